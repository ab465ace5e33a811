#include "exec/staging_cache.h"

#include <algorithm>
#include <utility>

namespace reshard {

StagingCache& StagingCache::Instance() {
  // Never destroyed: reshard objects may be destroyed after static destructors run.
  static StagingCache* cache = new StagingCache();
  return *cache;
}

HostBuffer StagingCache::Take(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (it->size() >= bytes && it->size() <= 2 * bytes && (best == kept_.end() || it->size() < best->size())) best = it;
    if (best != kept_.end()) {
      HostBuffer b = std::move(*best);
      kept_.erase(best);
      return b;
    }
  }
  return HostBuffer(bytes);
}

void StagingCache::Give(HostBuffer buffer) {
  if (buffer.size() < kMinBytes) return;
  std::vector<HostBuffer> dropped;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  kept_.push_back(std::move(buffer));
  std::sort(kept_.begin(), kept_.end(), [](const HostBuffer& x, const HostBuffer& y) { return x.size() > y.size(); });
  while (kept_.size() > kKept) {
    dropped.push_back(std::move(kept_.back()));
    kept_.pop_back();
  }
}

void StagingCache::Clear() {
  std::vector<HostBuffer> gone;
  std::lock_guard<std::mutex> lock(mu_);
  gone.swap(kept_);
}

}  // namespace reshard
