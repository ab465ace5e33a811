#include "reshard/host_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>
#include <utility>

namespace reshard {
namespace {
constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kLine = 64;
}  // namespace

HostBuffer::HostBuffer(int64_t bytes) : size_(bytes) {
  if (bytes <= 0) {
    size_ = 0;
    return;
  }
  if (bytes < kHugePage) {
    // Whole cache lines: malloc's 16 bytes put a buffer's lines 16 bytes
    // off, and streaming stores of line-long runs then wrote each line in
    // two halves (the canonical case at 8 MiB over 8 devices, 1 MiB a
    // buffer: 1.5 ms a run, 0.3 at 64 bytes).
    const int64_t rounded = (bytes + kLine - 1) / kLine * kLine;
    data_ = static_cast<std::byte*>(std::aligned_alloc(static_cast<size_t>(kLine), static_cast<size_t>(rounded)));
  } else {
    const int64_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;  // aligned_alloc wants a multiple
    data_ = static_cast<std::byte*>(std::aligned_alloc(static_cast<size_t>(kHugePage), static_cast<size_t>(rounded)));
#ifdef MADV_HUGEPAGE
    if (data_ != nullptr) madvise(data_, static_cast<size_t>(rounded), MADV_HUGEPAGE);  // advice only: failure is fine
#endif
  }
  if (data_ == nullptr) throw std::bad_alloc();
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() { std::free(data_); }

}  // namespace reshard
