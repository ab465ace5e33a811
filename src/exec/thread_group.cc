// A threads-as-ranks group's barrier, its breaking, and the all-reduce its
// last rank to arrive computes (thread_group.h).
#include "exec/thread_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <thread>

#include "exec/fibers.h"
#include "reshard/comm.h"

namespace reshard {
namespace thread_group {

std::shared_ptr<Group> Family::Make(int size, double timeout_seconds, bool boxes_copy_once, int copiers_count,
                                    std::shared_ptr<Permits> copiers) {
  // (The family outlives its groups: each holds it.)
  auto group = std::make_shared<Group>(size, timeout_seconds, boxes_copy_once, copiers_count, std::move(copiers),
                                       shared_from_this());
  std::lock_guard<std::mutex> lock(mu);
  if (broken) {  // (no other thread has it yet: its own lock is not needed)
    group->broken = true;
    group->broken_message = broken_message;
  }
  if (groups.size() >= 2 * pruned_size + 64) {
    std::erase_if(groups, [](const std::weak_ptr<Group>& g) { return g.expired(); });
    pruned_size = groups.size();
  }
  groups.push_back(group);
  return group;
}

void Family::BreakAll(const std::string& message) {
  std::vector<std::shared_ptr<Group>> live;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (broken) return;  // (every rank of an agreed error breaks: once is enough)
    broken = true;
    broken_message = message;
    for (const std::weak_ptr<Group>& g : groups)
      if (std::shared_ptr<Group> alive = g.lock()) live.push_back(std::move(alive));
  }
  for (const std::shared_ptr<Group>& g : live) {
    std::lock_guard<std::mutex> lock(g->mu);
    g->BreakWith(message);
  }
}

void Group::BreakWith(std::string message) {
  if (broken) return;
  broken = true;
  broken_message = std::move(message);
  NotifyAll(cv);
}

Status Group::Break(int rank, std::string_view what) {
  BreakWith(fmt::format("rank {} waited {} s for {}", rank, timeout_seconds, what));
  return Status::Internal(broken_message);
}

Status Group::Arrive(int rank, std::string_view what, bool short_wait, const std::function<void()>* last) {
  // (Read before arriving: the generation moves only once this rank has.)
  const int64_t my_generation = generation.load(std::memory_order_acquire);
  if (broken) {
    std::lock_guard<std::mutex> lock(mu);
    return Status::Internal(broken_message);
  }
  // (Acquire and release: the last rank reads what every rank posted.)
  if (arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == size) {
    // (Under the lock: a thread's wait tests the generation under it, and a
    // break and the barrier's opening are ordered by it: a barrier that a
    // rank has failed, seeing the group broken, never opens.)
    auto lock = LockSpinning(mu);
    if (broken) return Status::Internal(broken_message);
    last_status = Status::Ok();
    if (last != nullptr) {
      try {
        (*last)();
      } catch (const std::exception& e) {
        last_status = Status::Internal(fmt::format("rank {} setting up {} for every rank: {}", rank, what, e.what()));
      }
    }
    // (Before the generation moves: no rank arrives at the next barrier
    // until it has.)
    arrived.store(0, std::memory_order_relaxed);
    generation.fetch_add(1, std::memory_order_release);
    NotifyAll(cv);
    return Status::Ok();
  }
  const Clock::time_point deadline = Deadline();
  if (InFiber()) {
    // (Acquire: what every rank posted, and the last one set up, before the
    // generation moved.)
    while (generation.load(std::memory_order_acquire) == my_generation) {
      if (broken || PauseUntil(deadline) == std::cv_status::timeout) {
        // (Decided under the lock: the barrier may have opened first. A
        // group already broken keeps its message: Break.)
        std::lock_guard<std::mutex> lock(mu);
        if (generation != my_generation) break;
        return Break(rank, fmt::format("{} of the {} ranks at {}", size - arrived.load(), size, what));
      }
    }
    return Status::Ok();
  }
  // A short wait yields to the ranks still to come before sleeping, where
  // the ranks are few for the cores: a sleeping rank's wakeup and its turn
  // at the lock cost more than the wait (a 16 KiB reshard over 8 ranks on 2
  // cores: 126 against 237 us a run). A long one sleeps at once: yielding
  // ranks would take turns with those at work.
  if (short_wait && yields > 0) {
    for (int k = 0; k < yields && generation.load(std::memory_order_acquire) == my_generation; ++k)
      std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mu);
  while (generation == my_generation) {
    if (broken) return Status::Internal(broken_message);
    if (WaitUntil(lock, cv, deadline) == std::cv_status::timeout && generation == my_generation)
      return Break(rank, fmt::format("{} of the {} ranks at {}", size - arrived.load(), size, what));
  }
  return Status::Ok();
}

void Group::ReduceAll() {
  const Post& first = posts[0];
  reduced_status = Status::Ok();
  const int64_t* values = static_cast<const int64_t*>(first.data);
  reduced.assign(values, values + first.count);
  for (int k = 1; k < size; ++k) {
    const Post& p = posts[static_cast<size_t>(k)];
    if (p.count != first.count || p.op != first.op) {
      reduced_status = Status::Internal(fmt::format("AllReduce: rank 0 passed {} values (op {}), rank {} {} (op {})",
                                                    first.count, first.op, k, p.count, p.op));
      return;
    }
    const int64_t* theirs = static_cast<const int64_t*>(p.data);
    for (size_t i = 0; i < reduced.size(); ++i) {
      switch (static_cast<Comm::ReduceOp>(first.op)) {
        case Comm::ReduceOp::kMin: reduced[i] = std::min(reduced[i], theirs[i]); break;
        case Comm::ReduceOp::kMax: reduced[i] = std::max(reduced[i], theirs[i]); break;
        case Comm::ReduceOp::kSum: reduced[i] += theirs[i]; break;
      }
    }
  }
}

}  // namespace thread_group
}  // namespace reshard
