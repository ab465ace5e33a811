// Threads as ranks (thread_comm.h): the comms of one group share a Group (a
// lock, a generation-counting barrier, per-rank post slots and mailboxes);
// collectives are post, barrier, copy from the senders, barrier.
#include "reshard/thread_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace reshard {
namespace {

using Clock = std::chrono::steady_clock;

// What one rank hands the others for the collective under way; which fields
// mean something depends on the call.
struct Post {
  bool valid = true;  // false: this rank's arguments were bad; readers skip it
  const void* data = nullptr;
  int64_t count = 0;  // values or bytes of `data`
  const int64_t* send_counts = nullptr;
  const int64_t* send_displs = nullptr;
  int color = -1, key = 0;
};

// The state the comms of one group share, all under `mu`.
struct Group {
  Group(int size, double timeout_seconds)
      : size(size), timeout_seconds(timeout_seconds), posts(static_cast<size_t>(size)),
        mailboxes(static_cast<size_t>(size)) {}

  Clock::time_point Deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  }

  // Marks the group broken by `rank`'s wait for `what`. REQUIRES: `mu` held.
  Status Break(int rank, std::string_view what) {
    if (!broken) {
      broken = true;
      broken_message = fmt::format("rank {} waited {} s for {}", rank, timeout_seconds, what);
      cv.notify_all();
    }
    return Status::Internal(broken_message);
  }

  // The barrier: returns once every rank has arrived, or Internal when the
  // group is or becomes broken. REQUIRES: `lock` holds `mu`.
  Status Arrive(std::unique_lock<std::mutex>& lock, int rank, std::string_view what) {
    if (broken) return Status::Internal(broken_message);
    const int64_t my_generation = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return Status::Ok();
    }
    const Clock::time_point deadline = Deadline();
    while (generation == my_generation) {
      if (broken) return Status::Internal(broken_message);
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && generation == my_generation)
        return Break(rank, fmt::format("{} of the {} ranks at {}", size - arrived, size, what));
    }
    return Status::Ok();
  }

  const int size;
  const double timeout_seconds;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  bool broken = false;
  std::string broken_message;
  std::vector<Post> posts;
  // The new groups of the Split under way, by the parent rank of each one's rank 0.
  std::unordered_map<int, std::shared_ptr<Group>> split_groups;
  // mailboxes[receiver][sender]: the messages sent and not yet received,
  // oldest first; a sender's entry exists once it has sent (a group of N
  // ranks holds no N x N queues).
  std::vector<std::map<int, std::deque<std::vector<std::byte>>>> mailboxes;
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  std::string_view name() const override { return "threads"; }
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  Status AllReduce(std::span<int64_t> values, ReduceOp op) override {
    std::vector<int64_t> reduced(values.begin(), values.end());
    Post mine{.data = values.data(), .count = static_cast<int64_t>(values.size())};
    RESHARD_RETURN_IF_ERROR(Collective(mine, "AllReduce", [&](const std::vector<Post>& posts) {
      for (int k = 0; k < size(); ++k) {
        const Post& p = posts[static_cast<size_t>(k)];
        if (p.count != mine.count)
          return Status::Internal(fmt::format("AllReduce: rank {} passed {} values, rank {} {}", rank_, mine.count, k, p.count));
        if (k == rank_) continue;  // `reduced` starts as this rank's values
        const int64_t* theirs = static_cast<const int64_t*>(p.data);
        for (size_t i = 0; i < reduced.size(); ++i) {
          switch (op) {
            case ReduceOp::kMin: reduced[i] = std::min(reduced[i], theirs[i]); break;
            case ReduceOp::kMax: reduced[i] = std::max(reduced[i], theirs[i]); break;
            case ReduceOp::kSum: reduced[i] += theirs[i]; break;
          }
        }
      }
      return Status::Ok();
    }));
    // Only now: the others read `values` until the second barrier.
    std::copy(reduced.begin(), reduced.end(), values.begin());
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
        return Status::Internal(fmt::format("Broadcast: rank {} expected {} bytes from rank {}, which sent {}", rank_,
                                            mine.count, root, p.count));
      Copy(bytes.data(), p.data, p.count);
      return Status::Ok();
    });
  }

  Status Barrier() override {
    return Collective(Post{}, "Barrier", [](const std::vector<Post>&) { return Status::Ok(); });
  }

  Result<std::unique_ptr<Comm>> Split(int color, int key) override {
    std::shared_ptr<Group> child;
    int child_rank = -1;
    RESHARD_RETURN_IF_ERROR(Collective(Post{.color = color, .key = key}, "Split", [&](const std::vector<Post>& posts) {
      if (color < 0) return Status::Ok();
      std::vector<std::pair<int, int>> members;  // (key, parent rank)
      for (int k = 0; k < size(); ++k)
        if (posts[static_cast<size_t>(k)].color == color) members.emplace_back(posts[static_cast<size_t>(k)].key, k);
      std::sort(members.begin(), members.end());
      for (size_t i = 0; i < members.size(); ++i)
        if (members[i].second == rank_) child_rank = static_cast<int>(i);
      // Whichever member comes first makes the group; the others find it.
      std::lock_guard<std::mutex> lock(group_->mu);
      std::shared_ptr<Group>& made = group_->split_groups[members.front().second];
      if (!made) made = std::make_shared<Group>(static_cast<int>(members.size()), group_->timeout_seconds);
      child = made;
      return Status::Ok();
    }));
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
          return Status::Internal(
              fmt::format("rank {} expected {} bytes from rank {}, which sent {}", rank_, expected, k, sent));
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
          return Status::Internal(
              fmt::format("rank {} expected {} bytes from rank {}, which sent {}", rank_, expected, k, p.count));
        Copy(recv + recv_displs[static_cast<size_t>(k)], p.data, p.count);
      }
      return Status::Ok();
    });
  }

  Status StartSend(const std::byte* data, int64_t bytes, int peer, int64_t& request) override {
    request = kNoRequest;
    RESHARD_RETURN_IF_ERROR(CheckPeer("StartSend", peer, bytes));
    std::vector<std::byte> message(data, data + bytes);
    std::lock_guard<std::mutex> lock(group_->mu);
    group_->mailboxes[static_cast<size_t>(peer)][rank_].push_back(std::move(message));
    group_->cv.notify_all();
    return Status::Ok();
  }

  Status StartRecv(std::byte* data, int64_t bytes, int peer, int64_t& request) override {
    request = kNoRequest;
    RESHARD_RETURN_IF_ERROR(CheckPeer("StartRecv", peer, bytes));
    request = next_request_++;
    receives_.emplace(request, Receive{.data = data, .bytes = bytes, .peer = peer});
    receives_by_peer_[peer].push_back(request);
    return Status::Ok();
  }

  Status WaitSome(std::span<int64_t> requests, bool block, std::vector<int>& done) override {
    const size_t done_before = done.size();
    std::unique_lock<std::mutex> lock(group_->mu);
    Clock::time_point deadline = group_->Deadline();
    while (true) {
      MatchMessages();
      RESHARD_RETURN_IF_ERROR(Collect(requests, done));
      if (!block || done.size() > done_before) return Status::Ok();
      const auto waiting = std::find_if(requests.begin(), requests.end(), [](int64_t r) { return r != kNoRequest; });
      if (waiting == requests.end()) return Status::Ok();
      RESHARD_RETURN_IF_ERROR(AwaitMessage(lock, deadline, *waiting));
    }
  }

  Status WaitAll(std::span<int64_t> requests) override {
    std::vector<int> done;
    std::unique_lock<std::mutex> lock(group_->mu);
    Clock::time_point deadline = group_->Deadline();
    while (true) {
      MatchMessages();
      const size_t done_before = done.size();
      RESHARD_RETURN_IF_ERROR(Collect(requests, done));
      // A wait is too long when nothing arrives for timeout_seconds, not when a long exchange takes that in all.
      if (done.size() > done_before) deadline = group_->Deadline();
      const auto waiting = std::find_if(requests.begin(), requests.end(), [](int64_t r) { return r != kNoRequest; });
      if (waiting == requests.end()) return Status::Ok();
      RESHARD_RETURN_IF_ERROR(AwaitMessage(lock, deadline, *waiting));
    }
  }

 private:
  struct Receive {
    std::byte* data;
    int64_t bytes;
    int peer;
    bool complete = false;
    Status status = Status::Ok();  // of a complete receive
  };

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
  Status Collective(const Post& mine, std::string_view what, const std::function<Status(const std::vector<Post>&)>& read) {
    Group& g = *group_;
    std::unique_lock<std::mutex> lock(g.mu);
    g.posts[static_cast<size_t>(rank_)] = mine;
    RESHARD_RETURN_IF_ERROR(g.Arrive(lock, rank_, what));
    lock.unlock();
    const Status read_status = read(g.posts);
    lock.lock();
    const Status second = g.Arrive(lock, rank_, what);
    // Every rank has read by now; the last Split's groups are in their comms.
    if (second.ok() && rank_ == 0) g.split_groups.clear();
    return read_status.ok() ? second : read_status;
  }

  // Matches this rank's mailboxes to its pending receives, each peer's in
  // order; how many it completed. REQUIRES: the group lock held.
  int MatchMessages() {
    int matched = 0;
    auto& mailbox = group_->mailboxes[static_cast<size_t>(rank_)];
    for (auto& [peer, messages] : mailbox) {
      auto it = receives_by_peer_.find(peer);
      if (it == receives_by_peer_.end()) continue;
      std::deque<int64_t>& pending = it->second;
      while (!messages.empty() && !pending.empty()) {
        Receive& r = receives_.at(pending.front());
        const std::vector<std::byte>& m = messages.front();
        if (static_cast<int64_t>(m.size()) != r.bytes) {
          r.status = Status::Internal(
              fmt::format("rank {} expected {} bytes from rank {}, which sent {}", rank_, r.bytes, peer, m.size()));
        } else {
          Copy(r.data, m.data(), r.bytes);
        }
        r.complete = true;
        messages.pop_front();
        pending.pop_front();
        ++matched;
      }
    }
    return matched;
  }

  // Moves the complete receives among `requests` to `done`; the first failed
  // one's status, if any.
  Status Collect(std::span<int64_t> requests, std::vector<int>& done) {
    Status first_error;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == kNoRequest) continue;
      auto it = receives_.find(requests[i]);
      if (it == receives_.end()) return Status::Internal(fmt::format("rank {}: no request {}", rank_, requests[i]));
      if (!it->second.complete) continue;
      if (first_error.ok()) first_error = it->second.status;
      receives_.erase(it);
      requests[i] = kNoRequest;
      done.push_back(static_cast<int>(i));
    }
    return first_error;
  }

  // Waits for a message or until `deadline`, then breaks the group naming
  // `request`'s peer. REQUIRES: `lock` holds the group lock.
  Status AwaitMessage(std::unique_lock<std::mutex>& lock, Clock::time_point deadline, int64_t request) {
    Group& g = *group_;
    if (g.broken) return Status::Internal(g.broken_message);
    if (g.cv.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (MatchMessages() > 0) return Status::Ok();  // one came as the time ran out
      return g.Break(rank_, fmt::format("a message from rank {}", receives_.at(request).peer));
    }
    return g.broken ? Status::Internal(g.broken_message) : Status::Ok();
  }

  std::shared_ptr<Group> group_;
  const int rank_;
  int64_t next_request_ = 0;
  std::unordered_map<int64_t, Receive> receives_;    // started and not yet waited for
  std::map<int, std::deque<int64_t>> receives_by_peer_;  // the incomplete ones, in the order started
};

}  // namespace

std::vector<std::unique_ptr<Comm>> MakeThreadComms(int ranks, double timeout_seconds) {
  auto group = std::make_shared<Group>(ranks, timeout_seconds);
  std::vector<std::unique_ptr<Comm>> comms;
  for (int k = 0; k < ranks; ++k) comms.push_back(std::make_unique<ThreadComm>(group, k));
  return comms;
}

}  // namespace reshard
