// Threads as ranks (thread_comm.h): the comms of one group share a Group
// (thread_group.h: a lock, a generation-counting barrier, per-rank post
// slots, per-pair channels of unmatched sends and receives, per-rank
// requests); collectives are post, barrier, copy from the senders, barrier
// (box messages: every rank's copies as one schedule the ranks run
// together, thread_boxes.h); a point-to-point message is copied once,
// straight from the sender's buffer, when a send meets its receive.
#include "reshard/thread_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "exec/fibers.h"
#include "exec/permits.h"
#include "exec/reduce_kernel.h"
#include "exec/thread_boxes.h"
#include "exec/thread_group.h"
#include "reshard/executor.h"

namespace reshard {
namespace {

using thread_group::Channel;
using thread_group::Clock;
using thread_group::Group;
using thread_group::Pending;
using thread_group::Post;
using thread_group::Request;

class ThreadComm final : public Comm {
 public:
  ThreadComm(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  // Forgets this rank's unmatched sends and receives, so no peer ever reads
  // or writes a buffer of a comm that is gone (after a failed wait).
  ~ThreadComm() override {
    Group& g = *group_;
    auto lock = LockSpinning(g.mu);
    // (Only the peers it sent to hold its sends: no pass over every rank's
    // channels.)
    for (int peer : sent_to_) {
      auto& into = g.channels[static_cast<size_t>(peer)];
      auto it = into.find(rank_);
      if (it != into.end()) it->second.sends.clear();
    }
    g.channels[static_cast<size_t>(rank_)].clear();
    g.requests[static_cast<size_t>(rank_)].clear();
  }

  std::string_view name() const override { return "threads"; }
  bool ranks_in_process() const override { return true; }
  const std::shared_ptr<thread_group::Family>& family() const { return group_->family; }
  bool boxes_copy_once() const override { return group_->boxes_copy_once; }
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  // One barrier, not a collective's two: the last rank to arrive reduces
  // every rank's posted values (no rank leaves the barrier before it has),
  // and each rank copies the result on its way out, unlocked (the next
  // all-reduce's last rank, the one to write it again, cannot arrive before
  // this rank has). The runner agrees on errors this way at every run.
  Status AllReduce(std::span<int64_t> values, ReduceOp op) override {
    Group& g = *group_;
    g.posts[static_cast<size_t>(rank_)] =
        Post{.data = values.data(), .count = static_cast<int64_t>(values.size()), .op = static_cast<int>(op)};
    const std::function<void()> reduce = [&g] { g.ReduceAll(); };
    RESHARD_RETURN_IF_ERROR(g.Arrive(rank_, "AllReduce", /*short_wait=*/true, &reduce));
    // (Read unlocked: the next AllReduce's last rank writes `reduced` only
    // once every rank, this one too, has arrived there.)
    if (!g.last_status.ok()) return g.last_status;
    if (!g.reduced_status.ok()) return g.reduced_status;
    std::copy(g.reduced.begin(), g.reduced.end(), values.begin());
    return Status::Ok();
  }

  Status AllGather(std::span<const uint64_t> mine, std::span<uint64_t> all) override {
    Post post{.valid = all.size() == mine.size() * static_cast<size_t>(size()), .data = mine.data(),
              .count = static_cast<int64_t>(mine.size())};
    return Collective(post, "AllGather", [&](const std::vector<Post>& posts) {
      if (!post.valid)
        return Status::Internal(fmt::format("AllGather: rank {} gathers {} values into {}", rank_, mine.size(), all.size()));
      for (int k = 0; k < size(); ++k) {
        const Post& p = posts[static_cast<size_t>(k)];
        if (p.count != post.count)
          return Status::Internal(fmt::format("AllGather: rank {} passed {} values, rank {} {}", rank_, post.count, k, p.count));
        Copy(all.data() + static_cast<size_t>(k) * mine.size(), p.data, p.count * static_cast<int64_t>(sizeof(uint64_t)));
      }
      return Status::Ok();
    });
  }

  Status Broadcast(std::span<std::byte> bytes, int root) override {
    Post mine{.valid = root >= 0 && root < size(), .data = bytes.data(), .count = static_cast<int64_t>(bytes.size())};
    return Collective(mine, "Broadcast", [&](const std::vector<Post>& posts) {
      if (!mine.valid) return Status::Internal(fmt::format("Broadcast: root {} is not a rank of {}", root, size()));
      if (root == rank_) return Status::Ok();
      const Post& p = posts[static_cast<size_t>(root)];
      if (p.count != mine.count)
        return Status::Internal("Broadcast: " + MessageSizeMismatch(rank_, mine.count, root, p.count).message());
      Copy(bytes.data(), p.data, p.count);
      return Status::Ok();
    });
  }

  Status Barrier() override {
    return Collective(Post{}, "Barrier", [](const std::vector<Post>&) { return Status::Ok(); });
  }

  // The last rank to arrive sorts every rank by (color, key, rank) once and
  // makes the new groups; each rank then takes its own (a scan of every
  // rank's post by each would cost N^2 over thousands of ranks).
  Result<std::unique_ptr<Comm>> Split(int color, int key) override {
    Group& g = *group_;
    std::shared_ptr<Group> child;
    int child_rank = -1;
    const std::function<void()> assign = [&g] {
      std::vector<std::tuple<int, int, int>> joining;  // (color, key, parent rank)
      for (int k = 0; k < g.size; ++k) {
        const Post& p = g.posts[static_cast<size_t>(k)];
        if (p.color >= 0) joining.emplace_back(p.color, p.key, k);
      }
      std::sort(joining.begin(), joining.end());
      g.split_to.assign(static_cast<size_t>(g.size), {nullptr, -1});
      for (size_t i = 0; i < joining.size();) {
        size_t j = i;
        while (j < joining.size() && std::get<0>(joining[j]) == std::get<0>(joining[i])) ++j;
        std::shared_ptr<Group> made =
            g.family->Make(static_cast<int>(j - i), g.timeout_seconds, g.boxes_copy_once, g.copiers_count, g.copiers);
        for (size_t m = i; m < j; ++m) g.split_to[static_cast<size_t>(std::get<2>(joining[m]))] = {made, static_cast<int>(m - i)};
        i = j;
      }
    };
    RESHARD_RETURN_IF_ERROR(Collective(
        Post{.color = color, .key = key}, "Split",
        [&](const std::vector<Post>&) {
          std::tie(child, child_rank) = g.split_to[static_cast<size_t>(rank_)];
          return Status::Ok();
        },
        &assign));
    if (!child) return std::unique_ptr<Comm>();
    return std::unique_ptr<Comm>(std::make_unique<ThreadComm>(std::move(child), child_rank));
  }

  Status StartAlltoallv(const std::byte* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                        std::byte* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                        int64_t& request) override {
    request = kNoRequest;
    const size_t n = static_cast<size_t>(size());
    Post mine{.valid = send_counts.size() == n && send_displs.size() == n && recv_counts.size() == n &&
                       recv_displs.size() == n,
              .data = send, .send_counts = send_counts.data(), .send_displs = send_displs.data()};
    return Collective(mine, "Alltoallv", [&](const std::vector<Post>& posts) {
      if (!mine.valid) return Status::Internal(fmt::format("Alltoallv: rank {}'s count arrays are not {} long", rank_, n));
      for (int k = 0; k < size(); ++k) {
        const Post& p = posts[static_cast<size_t>(k)];
        if (!p.valid) return Status::Internal(fmt::format("Alltoallv: rank {}'s count arrays are not {} long", k, n));
        const int64_t sent = p.send_counts[rank_];
        const int64_t expected = recv_counts[static_cast<size_t>(k)];
        if (sent != expected)
          return MessageSizeMismatch(rank_, expected, k, sent);
        Copy(recv + recv_displs[static_cast<size_t>(k)], static_cast<const std::byte*>(p.data) + p.send_displs[rank_],
             sent);
      }
      return Status::Ok();
    });
  }

  Status StartAllgatherv(const std::byte* send, int64_t bytes, std::byte* recv, std::span<const int64_t> recv_counts,
                         std::span<const int64_t> recv_displs, int64_t& request) override {
    request = kNoRequest;
    const size_t n = static_cast<size_t>(size());
    Post mine{.valid = recv_counts.size() == n && recv_displs.size() == n, .data = send, .count = bytes};
    return Collective(mine, "Allgatherv", [&](const std::vector<Post>& posts) {
      if (!mine.valid) return Status::Internal(fmt::format("Allgatherv: rank {}'s count arrays are not {} long", rank_, n));
      for (int k = 0; k < size(); ++k) {
        const Post& p = posts[static_cast<size_t>(k)];
        const int64_t expected = recv_counts[static_cast<size_t>(k)];
        if (p.count != expected)
          return MessageSizeMismatch(rank_, expected, k, p.count);
        Copy(recv + recv_displs[static_cast<size_t>(k)], p.data, p.count);
      }
      return Status::Ok();
    });
  }

  Status StartAllgather(const std::byte* send, int64_t bytes, std::byte* recv, int64_t& request) override {
    request = kNoRequest;
    Post mine{.valid = true, .data = send, .count = bytes};
    return Collective(mine, "Allgather", [&](const std::vector<Post>& posts) {
      for (int k = 0; k < size(); ++k) {
        const Post& p = posts[static_cast<size_t>(k)];
        if (p.count != bytes)
          return Status::Internal(fmt::format("Allgather: rank {} passed {} bytes, rank {} {}", rank_, bytes, k, p.count));
        Copy(recv + static_cast<int64_t>(k) * bytes, p.data, p.count);
      }
      return Status::Ok();
    });
  }

  Status StartAlltoall(const std::byte* send, int64_t chunk, std::byte* recv, int64_t& request) override {
    request = kNoRequest;
    Post mine{.valid = true, .data = send, .count = chunk};
    return Collective(mine, "Alltoall", [&](const std::vector<Post>& posts) {
      for (int k = 0; k < size(); ++k) {
        const Post& p = posts[static_cast<size_t>(k)];
        if (p.count != chunk)
          return Status::Internal(fmt::format("Alltoall: rank {} passed a chunk of {} bytes, rank {} {}", rank_, chunk, k,
                                              p.count));
        Copy(recv + static_cast<int64_t>(k) * chunk, static_cast<const std::byte*>(p.data) + rank_ * chunk, chunk);
      }
      return Status::Ok();
    });
  }

  // Rank k's chunk: every rank's chunk k combined in ascending rank order.
  Status StartReduceScatter(const std::byte* send, int64_t chunk, std::byte* recv, DType dtype, reshard::ReduceOp op,
                            int64_t& request) override {
    request = kNoRequest;
    Post mine{.valid = true, .data = send, .count = chunk, .dtype = static_cast<int>(dtype), .op = static_cast<int>(op)};
    return Collective(mine, "ReduceScatter", [&](const std::vector<Post>& posts) {
      for (int k = 0; k < size(); ++k) {
        const Post& p = posts[static_cast<size_t>(k)];
        if (p.count != chunk || p.dtype != mine.dtype || p.op != mine.op)
          return Status::Internal(fmt::format(
              "ReduceScatter: rank {} passed a chunk of {} bytes (type {}, op {}), rank {} {} bytes (type {}, op {})",
              rank_, chunk, mine.dtype, mine.op, k, p.count, p.dtype, p.op));
      }
      for (int k = 0; k < size(); ++k) {
        const std::byte* from = static_cast<const std::byte*>(posts[static_cast<size_t>(k)].data) + rank_ * chunk;
        if (k == 0)
          Copy(recv, from, chunk);
        else
          CombineContiguous(from, recv, chunk, dtype, op);
      }
      return Status::Ok();
    });
  }

  // Every rank's buffer combined in ascending rank order, into each rank's recv.
  Status StartAllReduce(const std::byte* send, int64_t bytes, std::byte* recv, DType dtype, reshard::ReduceOp op,
                        int64_t& request) override {
    request = kNoRequest;
    Post mine{.valid = true, .data = send, .count = bytes, .dtype = static_cast<int>(dtype), .op = static_cast<int>(op)};
    return Collective(mine, "StartAllReduce", [&](const std::vector<Post>& posts) {
      for (int k = 0; k < size(); ++k) {
        const Post& p = posts[static_cast<size_t>(k)];
        if (p.count != bytes || p.dtype != mine.dtype || p.op != mine.op)
          return Status::Internal(fmt::format(
              "StartAllReduce: rank {} passed {} bytes (type {}, op {}), rank {} {} bytes (type {}, op {})", rank_, bytes,
              mine.dtype, mine.op, k, p.count, p.dtype, p.op));
      }
      for (int k = 0; k < size(); ++k) {
        const std::byte* from = static_cast<const std::byte*>(posts[static_cast<size_t>(k)].data);
        if (k == 0)
          Copy(recv, from, bytes);
        else
          CombineContiguous(from, recv, bytes, dtype, op);
      }
      return Status::Ok();
    });
  }

  bool has_boxes() const override { return true; }

  Result<std::unique_ptr<BoxExchange>> PrepareBoxes(const DeviceProgram& p, std::span<const int> send_rank,
                                                    std::span<const int> recv_rank) override {
    RESHARD_ASSIGN_OR_RETURN(std::unique_ptr<ThreadBoxes> boxes, ThreadBoxes::Prepare(p, send_rank, recv_rank, size()));
    return std::unique_ptr<BoxExchange>(std::move(boxes));
  }

  // Every message is copied once, straight from its sender's input into its
  // receiver's output: the ranks run one schedule of every rank's copies
  // together (ThreadBoxes::Pair: made by the first rank of the first run of
  // these prepared messages, kept in rank 0's for the later runs), each
  // taking the next task, at most `copiers` of them at once. The second
  // barrier keeps every input unchanged and every output unwritten by
  // others until all are done. A message whose two ranks disagree on its
  // length is the same error on every rank; the others still arrive.
  //
  // The run's set-up is the last arriving rank's, once, under the lock: the
  // check of every rank's messages, the run kept in rank 0's (or a new one
  // where any rank prepared anew), every rank's buffers and the task count
  // reset; a pass over every rank by each would cost N^2 a run over
  // thousands of ranks.
  Status StartBoxes(const BoxExchange& x, const std::byte* in, std::byte* out, BoxesEnd end,
                    int64_t& request) override {
    request = kNoRequest;
    // (ThreadBoxes is final: its exact type is the test a dynamic_cast makes,
    // at a fraction of its cost, paid by every rank at every run.)
    const auto* mine = typeid(x) == typeid(ThreadBoxes) ? static_cast<const ThreadBoxes*>(&x) : nullptr;
    Post post{.valid = mine != nullptr && mine->size() == size(), .data = in, .out = out, .boxes = mine};
    Group& g = *group_;
    const std::function<void()> set_up = [&g] {
      g.box_run.reset();
      g.box_status = Status::Ok();
      const size_t n = static_cast<size_t>(g.size);
      for (size_t k = 0; k < n; ++k)
        if (!g.posts[k].valid) {
          g.box_status = Status::Internal(fmt::format("Boxes: rank {} passed box messages another Comm prepared", k));
          return;
        }
      std::shared_ptr<BoxCollective>& slot = g.posts[0].boxes->run();
      bool same = slot != nullptr && slot->ids.size() == n;
      for (size_t k = 0; k < n && same; ++k) same = slot->ids[k] == g.posts[k].boxes->id();
      if (!same) {
        slot = std::make_shared<BoxCollective>();
        slot->ids.resize(n);
        slot->ranks.resize(n);
        for (size_t k = 0; k < n; ++k) {
          slot->ranks[k] = g.posts[k].boxes;
          slot->ids[k] = g.posts[k].boxes->id();
        }
        slot->inputs.resize(n);
        slot->outputs.resize(n);
      }
      for (size_t k = 0; k < n; ++k) {
        slot->inputs[k] = static_cast<const std::byte*>(g.posts[k].data);
        slot->outputs[k] = static_cast<std::byte*>(g.posts[k].out);
      }
      slot->next = 0;
      g.box_run = slot;
    };
    return Collective(
        post, "Boxes",
        [&](const std::vector<Post>&) {
          if (!g.box_status.ok()) return g.box_status;
          // (Not a copy of the shared_ptr: every rank's count of it would bounce
          // one cache line between the threads. The group holds it until the
          // next set-up, after every rank has read.)
          BoxCollective* const run = g.box_run.get();
          std::call_once(run->paired, [&] { run->copies = ThreadBoxes::Pair(run->ranks, g.copiers_count); });
          const std::vector<const std::byte*>& inputs = run->inputs;
          const std::vector<std::byte*>& outputs = run->outputs;
          const CopySchedule& schedule = run->copies->schedule;
          long_read_ = run->copies->program.bytes >= (int64_t{1} << 20);
          const int64_t tasks = schedule.tasks();
          // A rank that gets no copier's permit at once leaves the tasks to the
          // ranks of this exchange that did (each takes tasks until none is
          // left), and waits for one only where none of them copies: it would
          // only wake to find the work done.
          if (run->next.load() < tasks && (g.copiers->TryAcquire() || WaitForCopier(*run))) {
            // (Given back however the copies end: an exception, say bad_alloc,
            // is this collective's error, and the permit must not go with it.)
            struct Copying {
              BoxCollective& run;
              Permits& copiers;
              ~Copying() {
                --run.copying;
                copiers.Release();
              }
            } copying{*run, *g.copiers};
            ++run->copying;
            for (int64_t k = run->next.fetch_add(1); k < tasks; k = run->next.fetch_add(1))
              schedule.RunTask(k, inputs, outputs);
          }
          return run->copies->mismatch;
        },
        &set_up, /*second_barrier=*/end == BoxesEnd::kEveryCopy);
  }

  // A permit for a rank of `run` that got none at once, where no rank of it
  // copies (the permits are other groups'): true once held; false where
  // another rank of it copies, which takes every task left.
  bool WaitForCopier(const BoxCollective& run) {
    if (run.copying.load() > 0) return false;
    group_->copiers->Acquire();
    return true;
  }

  // Unbuffered, as strict as MPI allows: the send only records the
  // sender's pointer; its bytes are copied when a receive matches it.
  Status StartSend(const std::byte* data, int64_t bytes, int peer, int64_t& request) override {
    request = kNoRequest;
    RESHARD_RETURN_IF_ERROR(CheckPeer("StartSend", peer, bytes));
    Group& g = *group_;
    auto lock = LockSpinning(g.mu);
    if (g.broken) return Status::Internal(g.broken_message);
    request = next_request_++;
    g.requests[static_cast<size_t>(rank_)].emplace(request, Request{.peer = peer, .send = true});
    Channel& c = g.channels[static_cast<size_t>(peer)][rank_];
    sent_to_.insert(peer);
    c.sends.push_back(Pending<const std::byte>{.data = data, .bytes = bytes, .request = request});
    Match(peer, rank_, c);
    return Status::Ok();
  }

  Status StartRecv(std::byte* data, int64_t bytes, int peer, int64_t& request) override {
    request = kNoRequest;
    RESHARD_RETURN_IF_ERROR(CheckPeer("StartRecv", peer, bytes));
    Group& g = *group_;
    auto lock = LockSpinning(g.mu);
    if (g.broken) return Status::Internal(g.broken_message);
    request = next_request_++;
    g.requests[static_cast<size_t>(rank_)].emplace(request, Request{.peer = peer, .send = false});
    Channel& c = g.channels[static_cast<size_t>(rank_)][peer];
    c.receives.push_back(Pending<std::byte>{.data = data, .bytes = bytes, .request = request});
    Match(rank_, peer, c);
    return Status::Ok();
  }

  Status WaitSome(std::span<int64_t> requests, bool block, std::vector<int>& done) override {
    const size_t done_before = done.size();
    auto lock = LockSpinning(group_->mu);
    Clock::time_point deadline = group_->Deadline();
    while (true) {
      MatchMine();
      RESHARD_RETURN_IF_ERROR(Collect(requests, done));
      if (!block || done.size() > done_before) return Status::Ok();
      const auto waiting = std::find_if(requests.begin(), requests.end(), [](int64_t r) { return r != kNoRequest; });
      if (waiting == requests.end()) return Status::Ok();
      RESHARD_RETURN_IF_ERROR(AwaitProgress(lock, deadline, requests, *waiting));
    }
  }

  Status WaitAll(std::span<int64_t> requests) override {
    // Nothing to wait for (a collective's request: complete at once) takes
    // no lock: every rank of a run waits so after each collective, and over
    // thousands of ranks the group's lock was a queue.
    if (std::all_of(requests.begin(), requests.end(), [](int64_t r) { return r == kNoRequest; })) return Status::Ok();
    std::vector<int> done;
    auto lock = LockSpinning(group_->mu);
    Clock::time_point deadline = group_->Deadline();
    while (true) {
      MatchMine();
      const size_t done_before = done.size();
      RESHARD_RETURN_IF_ERROR(Collect(requests, done));
      // A wait is too long when nothing completes for timeout_seconds, not when a long exchange takes that in all.
      if (done.size() > done_before) deadline = group_->Deadline();
      const auto waiting = std::find_if(requests.begin(), requests.end(), [](int64_t r) { return r != kNoRequest; });
      if (waiting == requests.end()) return Status::Ok();
      RESHARD_RETURN_IF_ERROR(AwaitProgress(lock, deadline, requests, *waiting));
    }
  }

 private:
  static void Copy(void* to, const void* from, int64_t bytes) {
    if (bytes > 0) std::memcpy(to, from, static_cast<size_t>(bytes));  // memcpy of null pointers is undefined even for 0 bytes
  }

  Status CheckPeer(std::string_view call, int peer, int64_t bytes) const {
    if (peer < 0 || peer >= size())
      return Status::Internal(fmt::format("{}: peer {} is not a rank of {}", call, peer, size()));
    if (bytes < 0) return Status::Internal(fmt::format("{}: {} bytes", call, bytes));
    return Status::Ok();
  }

  // One collective call: post `mine`, wait for every rank, `read` the others'
  // posts (without the lock; nobody changes a post until everyone has passed
  // the second barrier), wait again. A bad argument still goes through both
  // barriers, so it is an error on this rank and never a hang on the others.
  // `last`: run under the lock by the last rank to arrive, before any reads
  // (set-up every rank shares, made once). Without the second barrier
  // (BoxesEnd::kOwnCopies, every rank alike) the caller's join of every
  // rank is the second barrier: no rank posts again before it.
  // (`read` a template parameter, not a std::function: a lambda capturing
  // more than two references is a heap allocation as a std::function, at
  // every collective of every rank.)
  template <typename Read>
  Status Collective(const Post& mine, std::string_view what, const Read& read,
                    const std::function<void()>* last = nullptr, bool second_barrier = true) {
    Group& g = *group_;
    g.posts[static_cast<size_t>(rank_)] = mine;  // (each rank its own; read once all have arrived)
    RESHARD_RETURN_IF_ERROR(g.Arrive(rank_, what, /*short_wait=*/true, last));
    // (An exception, e.g. bad_alloc pairing box messages, still goes
    // through the second barrier: an error here, never a hang there.)
    // (What the last rank set up for all, where it failed, is every rank's error.)
    Status read_status = g.last_status;
    try {
      if (read_status.ok()) read_status = read(g.posts);
    } catch (const std::exception& e) {
      read_status = Status::Internal(fmt::format("rank {} at {}: {}", rank_, what, e.what()));
    }
    const bool long_read = std::exchange(long_read_, false);
    if (!second_barrier) return read_status;
    const Status second = g.Arrive(rank_, what, /*short_wait=*/!long_read);
    // Every rank has read by now; the last Split's groups are in their comms,
    // and the box run in rank 0's messages.
    if (second.ok() && rank_ == 0) {
      auto lock = LockSpinning(g.mu);
      g.split_to.clear();
      g.box_run.reset();
    }
    return read_status.ok() ? second : read_status;
  }

  // Matches the channel from `sender` to `receiver`, oldest send to oldest
  // receive, copying each send's bytes from the sender's buffer into the
  // receiver's and completing both requests; a size mismatch fails the
  // receive (Internal) and completes the send with Ok, as MPI's truncation
  // error is the receiver's. REQUIRES: the group lock held.
  void Match(int receiver, int sender, Channel& c) {
    Group& g = *group_;
    bool matched = false;
    while (!c.sends.empty() && !c.receives.empty()) {
      const Pending<const std::byte> send = c.sends.front();
      const Pending<std::byte> receive = c.receives.front();
      c.sends.pop_front();
      c.receives.pop_front();
      Request& r = g.requests[static_cast<size_t>(receiver)].at(receive.request);
      if (send.bytes != receive.bytes) {
        r.status = MessageSizeMismatch(receiver, receive.bytes, sender, send.bytes);
      } else {
        Copy(receive.data, send.data, send.bytes);
      }
      r.complete = true;
      g.requests[static_cast<size_t>(sender)].at(send.request).complete = true;
      matched = true;
    }
    if (matched) NotifyAll(g.cv);
  }

  // Matches every channel into this rank (each Start* matched what it could
  // already; this only keeps the waits making progress on their own).
  // REQUIRES: the group lock held.
  void MatchMine() {
    for (auto& [sender, c] : group_->channels[static_cast<size_t>(rank_)]) Match(rank_, sender, c);
  }

  // Moves the complete requests among `requests` to `done`; the first failed
  // one's status, if any. REQUIRES: the group lock held.
  Status Collect(std::span<int64_t> requests, std::vector<int>& done) {
    auto& mine = group_->requests[static_cast<size_t>(rank_)];
    Status first_error;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == kNoRequest) continue;
      auto it = mine.find(requests[i]);
      if (it == mine.end()) return Status::Internal(fmt::format("rank {}: no request {}", rank_, requests[i]));
      if (!it->second.complete) continue;
      if (first_error.ok()) first_error = it->second.status;
      mine.erase(it);
      requests[i] = kNoRequest;
      done.push_back(static_cast<int>(i));
    }
    return first_error;
  }

  // Waits for any progress or until `deadline`; then, unless one of
  // `requests` completed as the time ran out, breaks the group naming what
  // `request` waits for. REQUIRES: `lock` holds the group lock.
  Status AwaitProgress(std::unique_lock<std::mutex>& lock, Clock::time_point deadline, std::span<const int64_t> requests,
                       int64_t request) {
    Group& g = *group_;
    if (g.broken) return Status::Internal(g.broken_message);
    if (WaitUntil(lock, g.cv, deadline) == std::cv_status::timeout) {
      MatchMine();
      const auto& mine = g.requests[static_cast<size_t>(rank_)];
      for (int64_t r : requests) {
        if (r == kNoRequest) continue;
        auto it = mine.find(r);
        if (it != mine.end() && it->second.complete) return Status::Ok();  // one completed as the time ran out
      }
      const Request& r = mine.at(request);
      return g.Break(rank_, r.send ? fmt::format("rank {} to receive a message", r.peer)
                                   : fmt::format("a message from rank {}", r.peer));
    }
    return g.broken ? Status::Internal(g.broken_message) : Status::Ok();
  }

  std::shared_ptr<Group> group_;
  const int rank_;
  int64_t next_request_ = 0;  // only this rank (one thread or fiber) starts requests
  std::unordered_set<int> sent_to_;  // the peers this rank has sent to
  // Set by a collective's read where others may still be at work long (box
  // messages of 1 MiB or more): its second barrier then sleeps at once.
  bool long_read_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> MakeThreadComms(int ranks, double timeout_seconds, int copiers,
                                                   bool boxes_copy_once) {
  copiers = ResolveThreads(copiers);
  std::shared_ptr<Group> group = std::make_shared<thread_group::Family>()->Make(
      ranks, timeout_seconds, boxes_copy_once, copiers, std::make_shared<Permits>(copiers));
  std::vector<std::unique_ptr<Comm>> comms;
  for (int k = 0; k < ranks; ++k) comms.push_back(std::make_unique<ThreadComm>(group, k));
  return comms;
}

std::function<void(std::string_view)> ThreadCommsBreaker(Comm& comm) {
  auto* threads = dynamic_cast<ThreadComm*>(&comm);
  if (threads == nullptr) return [](std::string_view) {};
  return [family = threads->family()](std::string_view message) { family->BreakAll(std::string(message)); };
}

}  // namespace reshard
