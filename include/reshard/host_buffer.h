// HostBuffer: an uninitialized byte buffer for executors' local buffers.
// Every buffer starts on a 64-byte line; buffers of 2 MiB or more are
// 2 MiB-aligned and asked to be backed by
// transparent huge pages (madvise; the kernel may decline). Strided copies
// over large buffers touch a new 4 KiB page every few runs, so with small
// pages they wait on TLB misses. Callers may pass any memory to an
// executor; this is what reshard's own tools and benchmarks use.
//
// Movable, not copyable. Not thread-safe to move while in use.
#ifndef RESHARD_HOST_BUFFER_H_
#define RESHARD_HOST_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace reshard {

class HostBuffer {
 public:
  HostBuffer() = default;
  // Throws std::bad_alloc when the memory is not there.
  explicit HostBuffer(int64_t bytes);
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  ~HostBuffer();

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  int64_t size() const { return size_; }
  std::span<std::byte> span() { return {data_, static_cast<size_t>(size_)}; }
  std::span<const std::byte> span() const { return {data_, static_cast<size_t>(size_)}; }

 private:
  std::byte* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace reshard

#endif  // RESHARD_HOST_BUFFER_H_
