// The state the comms of one threads-as-ranks group share (thread_comm.h,
// thread_comm.cc): the posts of the collective under way and its barrier,
// the channels of unmatched point-to-point messages and every rank's
// requests, the Split and box exchange under way. The channels and
// requests are under one lock; a rank writes its own post unlocked before
// it arrives, and what the last rank to arrive sets up for all (an
// all-reduce's result, a barrier's status) is read unlocked once the
// barrier opens, until the next barrier, whose last rank alone writes it.
#ifndef RESHARD_SRC_EXEC_THREAD_GROUP_H_
#define RESHARD_SRC_EXEC_THREAD_GROUP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "exec/fibers.h"
#include "exec/permits.h"
#include "exec/thread_boxes.h"
#include "reshard/status.h"

namespace reshard {
// The threads backend's shared state, in a namespace of its own: generic
// names, used only by thread_comm.cc.
namespace thread_group {

using Clock = std::chrono::steady_clock;

// What one rank hands the others for the collective under way; which fields
// mean something depends on the call.
struct Post {
  bool valid = true;  // false: this rank's arguments were bad; readers skip it
  const void* data = nullptr;
  void* out = nullptr;  // box messages: the receiver's output
  int64_t count = 0;  // values or bytes of `data`
  const int64_t* send_counts = nullptr;
  const int64_t* send_displs = nullptr;
  int color = -1, key = 0;
  int dtype = -1, op = -1;  // a reduce-scatter's or all-reduce's element type and op
  const ThreadBoxes* boxes = nullptr;  // box messages: the sender's runs
};

// A point-to-point send or receive not yet matched: the caller's buffer
// (never copied before the match) and the request it completes.
template <typename Byte>
struct Pending {
  Byte* data;
  int64_t bytes;
  int64_t request;
};

// The unmatched sends and receives of one (receiver, sender) pair. Each
// Start* matches what it can at once, so at most one side is non-empty.
struct Channel {
  std::deque<Pending<const std::byte>> sends;
  std::deque<Pending<std::byte>> receives;
};

// One point-to-point request's state.
struct Request {
  int peer;
  bool send;
  bool complete = false;
  Status status = Status::Ok();  // of a complete request
};

struct Group;

// Every group of one MakeThreadComms: the first, and every group split from
// it or from one split from it, so that one rank's failure can end every
// wait of every group at once (BreakAll).
struct Family : std::enable_shared_from_this<Family> {
  // Makes a group of this family. REQUIRES: the family held by a shared_ptr.
  std::shared_ptr<Group> Make(int size, double timeout_seconds, bool boxes_copy_once, int copiers_count,
                              std::shared_ptr<Permits> copiers);
  // Breaks every group of the family still alive with `message`, and every
  // group made after; only the first call does anything.
  void BreakAll(const std::string& message);

  std::mutex mu;
  std::vector<std::weak_ptr<Group>> groups;  // ended ones pruned as the list doubles
  size_t pruned_size = 0;
  bool broken = false;
  std::string broken_message;
};

// The state the comms of one group share, under `mu` (but the copiers, a
// box exchange's task count, thread_boxes.h, the posts, each written by its
// rank before it arrives, and what the last rank to arrive set up for all,
// read once the barrier opens: Arrive).
struct Group {
  Group(int size, double timeout_seconds, bool boxes_copy_once, int copiers_count, std::shared_ptr<Permits> copiers,
        std::shared_ptr<Family> family)
      : size(size), timeout_seconds(timeout_seconds), boxes_copy_once(boxes_copy_once), copiers_count(copiers_count),
        copiers(std::move(copiers)), family(std::move(family)), posts(static_cast<size_t>(size)),
        channels(static_cast<size_t>(size)), requests(static_cast<size_t>(size)) {}

  Clock::time_point Deadline() const {
    return WaitClockNow() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  }

  // Marks the group broken by `rank`'s wait for `what`. REQUIRES: `mu` held.
  Status Break(int rank, std::string_view what);
  // Marks the group broken with `message` (unless it is already), waking
  // every wait in it. REQUIRES: `mu` held.
  void BreakWith(std::string message);

  // The barrier: returns once every rank has arrived, or Internal when the
  // group is or becomes broken. `short_wait`: the others are expected soon.
  // Called and returning without `mu`: a rank arrives by counting itself
  // (`arrived`, atomic), and in a fiber waits reading `generation`, taking
  // the lock only where the generation has not moved (to see a break or
  // its deadline); only the last rank takes it. What a rank wrote before it
  // arrived (its post) every rank may read once the barrier opens. Every
  // rank of every thread takes the group's one lock, so each taking was
  // contended by the other threads' ranks (a barrier took it twice a rank,
  // once to arrive and once to leave).
  // `last`: run by the last rank to arrive, under `mu`, before any rank
  // leaves; an exception out of it (bad_alloc setting up a Split, say) is
  // kept in `last_status`, every rank's to return, and the barrier still
  // opens.
  Status Arrive(int rank, std::string_view what, bool short_wait = true, const std::function<void()>* last = nullptr);

  // AllReduce's: every rank's posted values (Post::data, count, op) reduced
  // into `reduced`, or why not. REQUIRES: `mu` held, every rank arrived.
  void ReduceAll();

  const int size;
  const double timeout_seconds;
  const bool boxes_copy_once;
  const int copiers_count;
  // How many ranks may copy box messages at once (thread_comm.h), shared by
  // every group split from one MakeThreadComms.
  const std::shared_ptr<Permits> copiers;
  const std::shared_ptr<Family> family;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> arrived{0};         // at the barrier under way; reset by its last rank
  std::atomic<int64_t> generation{0};  // moved under `mu`, by a barrier's last rank; read unlocked
  // Yields before sleeping at a barrier: 32 where at most 4 ranks share a
  // hardware thread, else none.
  const int yields = size <= 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) ? 32 : 0;
  std::atomic<bool> broken{false};  // set under `mu`, with the message
  std::string broken_message;
  std::vector<Post> posts;
  std::vector<int64_t> reduced;  // the last AllReduce's result
  Status reduced_status = Status::Ok();
  Status last_status = Status::Ok();  // the last barrier's `last`'s (Arrive)
  // The Split under way: each rank's new group and rank in it (null where
  // it joins none), made once by the last rank to arrive.
  std::vector<std::pair<std::shared_ptr<Group>, int>> split_to;
  // The box exchange under way, set up once by the last rank to arrive: its
  // run, or why every rank fails it.
  std::shared_ptr<BoxCollective> box_run;
  Status box_status = Status::Ok();
  // channels[receiver][sender]: the sends and receives of that pair not yet
  // matched, oldest first; an entry exists once the pair has sent or
  // received (a group of N ranks holds no N x N queues).
  std::vector<std::map<int, Channel>> channels;
  // requests[rank]: that rank's point-to-point requests started and not yet
  // waited for; the peer completes them as it matches.
  std::vector<std::unordered_map<int64_t, Request>> requests;
};

}  // namespace thread_group
}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_THREAD_GROUP_H_
