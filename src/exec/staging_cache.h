// StagingCache: staging buffers that outlive the reshard objects that used
// them, as COSTA keeps its staging in a process-wide context. The buffers of
// an object that is destroyed wait here for the next one, so a reshard
// created for every call (as costa::transform plans in every call) does not
// take fresh memory each time, with its page faults and, for huge pages, the
// kernel's compaction. Only large buffers are kept (small ones malloc
// cheaply), the largest four; a buffer is reused only for a need of at least
// half its size, so an object never holds far more than it asked for.
// Thread-safe: threads as ranks create and destroy their objects at once.
#ifndef RESHARD_SRC_EXEC_STAGING_CACHE_H_
#define RESHARD_SRC_EXEC_STAGING_CACHE_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include "reshard/host_buffer.h"

namespace reshard {

class StagingCache {
 public:
  static StagingCache& Instance();
  // A kept buffer of `bytes` to twice that (the smallest), or a new one.
  // Throws std::bad_alloc as HostBuffer does.
  HostBuffer Take(int64_t bytes);
  // Keeps `buffer` when it is large, dropping the smallest kept beyond four.
  void Give(HostBuffer buffer);
  void Clear();

 private:
  static constexpr size_t kKept = 4;                     // a send, a receive and two intermediate buffers
  static constexpr int64_t kMinBytes = int64_t{2} << 20;  // a huge page
  std::mutex mu_;
  std::vector<HostBuffer> kept_;
};

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_STAGING_CACHE_H_
