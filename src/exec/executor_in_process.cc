// The in-process executor: N virtual devices' buffers in one process, each
// step run as pack + local copies, then unpack straight from the senders'
// send buffers, over a thread pool.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fmt/format.h>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "exec/copy_kernel.h"
#include "exec/reduce_kernel.h"
#include "exec/thread_pool.h"
#include "reshard/executor.h"
#include "reshard/host_buffer.h"
#include "reshard/rank_reshard.h"
#include "reshard/thread_comm.h"

namespace reshard {
namespace {

using Work = CopyRange;

// Part `part` of `parts` of the sorted strided copies [begin, end): run interleaved.
struct Task {
  size_t begin, end;
  int64_t part, parts;
};

// Transport::kRanks: every device a thread running the step runner over
// threads as ranks, as every MPI rank runs it. The threads wait at a gate
// until all have started, so a thread the system cannot start fails the run
// (Unavailable) before any rank reaches a collective.
Result<ExecStats> RunAsRanks(const PlanProgram& program, std::span<const std::span<const std::byte>> sources,
                             std::span<const std::span<std::byte>> targets, const ExecOptions& options) {
  const size_t n = program.devices().size();
  if (n > static_cast<size_t>(kMaxThreads))
    return Status::Unavailable(fmt::format("threads as ranks run at most {} devices (one thread each); this plan has {}",
                                           kMaxThreads, n));
  const auto start = std::chrono::steady_clock::now();
  // A rank waits at a barrier while rank 0 runs the caller's hook over every
  // device's output (the checker): the timeout only guards against a hang.
  std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(static_cast<int>(n), /*timeout_seconds=*/600);
  std::vector<std::optional<Result<RankRunStats>>> results(n);
  std::vector<std::span<const std::byte>> outputs(n);
  std::mutex mu;
  std::condition_variable cv;
  enum class Gate { kWait, kGo, kStop } gate = Gate::kWait;
  RankOptions ro;
  ro.transport = options.rank_transport;
  ro.max_message_bytes = options.rank_max_message_bytes;
  // One rank's whole part: create, then execute with the checker's hook.
  auto run_rank = [&](size_t k) {
    Result<RankReshard> r = RankReshard::Create(std::move(comms[k]), program, ro);
    if (!r.ok()) {
      results[k] = r.status();
      return;
    }
    RankReshard::AfterStep hook;
    if (options.after_step) {
      // Every rank's output is in place before the hook reads them all, and
      // the hook is done before any rank goes on to overwrite one.
      hook = [&, k](size_t step, std::span<const std::byte> output) -> Status {
        outputs[k] = output;
        RESHARD_RETURN_IF_ERROR(r->comm().Barrier());
        if (k == 0) options.after_step(step, outputs);
        return r->comm().Barrier();
      };
    }
    results[k] = r->Execute(sources[k], targets[k], hook);
  };
  auto body = [&](size_t k) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return gate != Gate::kWait; });
      if (gate == Gate::kStop) return;
    }
    try {
      run_rank(k);
    } catch (const std::exception& e) {  // e.g. bad_alloc in a hook: never out of a thread
      results[k] = Status::Internal(fmt::format("rank {}: {}", k, e.what()));
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(n);
  bool started = true;
  try {
    for (size_t k = 0; k < n; ++k) threads.emplace_back(body, k);
  } catch (const std::system_error&) {
    started = false;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    gate = started ? Gate::kGo : Gate::kStop;
  }
  cv.notify_all();
  for (std::thread& t : threads) t.join();
  if (!started)
    return Status::Unavailable(fmt::format("could start only {} of the {} threads the ranks need", threads.size(), n));
  ExecStats stats;
  stats.peak_per_device.assign(n, 0);
  stats.steps.resize(program.steps().empty() ? 0 : static_cast<size_t>(program.steps().back().plan_step + 1));
  for (StepTraffic& t : stats.steps) {
    t.sent.assign(n, 0);
    t.received.assign(n, 0);
  }
  for (size_t k = 0; k < n; ++k) {
    if (!results[k]->ok()) return results[k]->status();  // the same on every rank: rank 0's
    const RankRunStats& r = results[k]->value();
    stats.bytes_moved += r.bytes_moved;
    stats.bytes_sent += r.bytes_received;  // as the staged path counts: the bytes that arrived as messages
    stats.peak_per_device[k] = r.peak_bytes;
    stats.peak_bytes = std::max(stats.peak_bytes, r.peak_bytes);
    for (size_t i = 0; i < stats.steps.size() && i < r.step_bytes_sent.size(); ++i) {
      stats.steps[i].sent[k] = r.step_bytes_sent[i];
      stats.steps[i].received[k] = r.step_bytes_received[i];
    }
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

class InProcessExecutor final : public Executor {
 public:
  explicit InProcessExecutor(ExecOptions o) : options_(std::move(o)), pool_(options_.threads) {}
  std::string_view name() const override { return "in-process"; }

  Result<ExecStats> Run(const PlanProgram& program, std::span<const std::span<const std::byte>> sources,
                        std::span<const std::span<std::byte>> targets) override {
    RESHARD_RETURN_IF_ERROR(pool_.status());
    RESHARD_RETURN_IF_ERROR(CheckBuffers(program, sources, targets));
    if (options_.transport == Transport::kRanks && !program.devices().empty()) return RunAsRanks(program, sources, targets, options_);
    const auto start = std::chrono::steady_clock::now();
    const size_t n = program.devices().size();
    ExecStats stats;
    stats.peak_per_device.assign(n, 0);
    phase_ = 0;
    phases_reused_ = 0;
    // Send buffers: one per device, the largest any step needs, kept across runs.
    send_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      int64_t need = 0;
      if (options_.transport == Transport::kStaged)
        for (const StepProgram& s : program.steps()) need = std::max(need, s.devices[i].send_bytes);
      if (send_[i].size() < need) {
        send_[i] = HostBuffer(need);
        Touch(send_[i]);
      }
    }
    std::vector<std::span<const std::byte>> in(sources.begin(), sources.end());
    std::vector<HostBuffer> in_owned(n), out_owned(n);
    std::vector<std::span<std::byte>> out(n);
    const size_t steps = program.steps().size();
    for (size_t si = 0; si < steps; ++si) {
      const StepProgram& step = program.steps()[si];
      const bool last = si + 1 == steps;
      for (size_t i = 0; i < n; ++i) {
        const DeviceProgram& dp = step.devices[i];
        if (last) {
          out[i] = targets[i];
        } else {
          out_owned[i] = HostBuffer(dp.output_bytes);
          out[i] = std::span<std::byte>(out_owned[i].data(), static_cast<size_t>(dp.output_bytes));
        }
        const int64_t held = static_cast<int64_t>(sources[i].size() + targets[i].size()) + send_[i].size() +
                             in_owned[i].size() + out_owned[i].size();
        stats.peak_per_device[i] = std::max(stats.peak_per_device[i], held);
      }
      // Phase 1: pack and local copies. Phase 2: unpack from the senders' buffers.
      const bool direct = options_.transport == Transport::kDirect;
      // Message m of receiver i carried the bytes its copies wrote (direct:
      // from the sender's input; staged: out of the sender's send buffer).
      // Traffic per plan step: an all-reduce's two program steps add up.
      if (si == 0 || step.plan_step != program.steps()[si - 1].plan_step) {
        StepTraffic& fresh = stats.steps.emplace_back();
        fresh.sent.assign(n, 0);
        fresh.received.assign(n, 0);
      }
      StepTraffic& traffic = stats.steps.back();
      auto count = [&](size_t i, const CopyProgram& copies, const std::vector<int32_t>& begin) {
        const DeviceProgram& dp = step.devices[i];
        for (size_t m = 0; m < dp.recv_peer.size(); ++m) {
          int64_t bytes = 0;
          for (int32_t k = begin[m]; k < begin[m + 1]; ++k) bytes += copies.OpBytes(copies.ops[static_cast<size_t>(k)]);
          traffic.received[i] += bytes;
          traffic.sent[static_cast<size_t>(dp.recv_peer[m])] += bytes;
        }
      };
      work_.clear();
      for (size_t i = 0; i < n; ++i) {
        const DeviceProgram& dp = step.devices[i];
        if (direct) {
          for (size_t m = 0; m < dp.recv_peer.size() && !step.reduces(); ++m)
            Add(dp.direct, dp.direct_begin[m], dp.direct_begin[m + 1], in[dp.recv_peer[m]].data(), out[i].data());
          stats.bytes_moved += dp.local.bytes + dp.direct.bytes;
          stats.bytes_sent += dp.direct.bytes;
          count(i, dp.direct, dp.direct_begin);
          if (!step.reduces()) Add(dp.local, 0, dp.local.ops.size(), in[i].data(), out[i].data());
          continue;
        }
        for (size_t m = 0; m < dp.send_peer.size(); ++m)  // each staged box once
          if (dp.Packs(m)) Add(dp.pack, dp.pack_begin[m], dp.pack_begin[m + 1], in[i].data(), send_[i].data());
        if (!step.reduces()) Add(dp.local, 0, dp.local.ops.size(), in[i].data(), out[i].data());
        stats.bytes_moved += dp.local.bytes;
      }
      RunWork();
      work_.clear();
      if (step.reduces()) {
        // Each device combines its part and what it receives in part order
        // (reduce_kernel.h): devices in parallel, each one's copies in turn.
        const DType dtype = program.layouts()[si].dtype();
        for (size_t i = 0; i < n && !direct; ++i) {
          const DeviceProgram& dp = step.devices[i];
          stats.bytes_moved += dp.unpack.bytes;
          stats.bytes_sent += dp.unpack.bytes;
          count(i, dp.unpack, dp.unpack_begin);
        }
        pool_.ParallelFor(static_cast<int64_t>(n), [&](int64_t k) {
          const size_t i = static_cast<size_t>(k);
          const DeviceProgram& dp = step.devices[i];
          const CopyProgram& received = direct ? dp.direct : dp.unpack;
          const std::vector<int32_t>& begin = direct ? dp.direct_begin : dp.unpack_begin;
          RunReducingCopies(
              dp, step.reduction, step.scale, dtype, in[i].data(), received, begin,
              [&](size_t m) -> const std::byte* {
                const size_t peer = static_cast<size_t>(dp.recv_peer[m]);
                return direct ? in[peer].data() : send_[peer].data() + dp.recv_peer_offset[m] - dp.recv_offset[m];
              },
              out[i].data());
        });
      }
      for (size_t i = 0; i < n && !direct && !step.reduces(); ++i) {
        const DeviceProgram& dp = step.devices[i];
        for (size_t m = 0; m < dp.recv_peer.size(); ++m) {
          // unpack ops address the receive buffer; message m lives in its sender's send buffer.
          const std::byte* base = send_[dp.recv_peer[m]].data() + dp.recv_peer_offset[m] - dp.recv_offset[m];
          Add(dp.unpack, dp.unpack_begin[m], dp.unpack_begin[m + 1], base, out[i].data());
        }
        stats.bytes_moved += dp.unpack.bytes;
        stats.bytes_sent += dp.unpack.bytes;
        count(i, dp.unpack, dp.unpack_begin);
      }
      RunWork();
      if (options_.after_step) {
        std::vector<std::span<const std::byte>> view(out.begin(), out.end());
        options_.after_step(si, view);
      }
      // The step's input is read: free it (sources belong to the caller).
      for (size_t i = 0; i < n; ++i) {
        in_owned[i] = std::move(out_owned[i]);
        in[i] = out[i];
      }
    }
    for (int64_t p : stats.peak_per_device) stats.peak_bytes = std::max(stats.peak_bytes, p);
    plans_.resize(phase_);  // plans_ describes this run (the next compares against it), not an older, longer one
    stats.phases_reused = phases_reused_;
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return stats;
  }

 private:
  void Touch(HostBuffer& o) {
    const int64_t chunk = int64_t{1} << 20;
    const int64_t parts = (o.size() + chunk - 1) / chunk;
    pool_.ParallelFor(parts, [&](int64_t k) {
      const int64_t lo = k * chunk;
      std::fill(o.data() + lo, o.data() + std::min(o.size(), lo + chunk), std::byte{0});
    });
  }

  // Queues copies begin..end of `p` for the next RunWork.
  void Add(const CopyProgram& p, size_t begin, size_t end, const std::byte* src, std::byte* dst) {
    for (size_t k = begin; k < end; ++k) work_.push_back({&p, &p.ops[k], src, dst, 0, CopyUnits(p, p.ops[k])});
  }

  // Runs the queued copies over the pool, in slices: slice k holds the k-th
  // part of every copy. A reshard's copies are strided walks through the same
  // rows of many buffers (each source row feeds every receiver, each target
  // row takes from every sender); running one copy after another walks every
  // page once per copy, while slices of every copy together keep a block of
  // rows of every buffer in the cache until all its copies are done
  // (docs/benchmarks.md, "Execution"). That suits copies that share source
  // rows and are long enough for each slice to hold rows of each. Copies that
  // share destination rows more than source rows (Spans), or too short to
  // slice (the many small boxes of a block-cyclic exchange: a slice would
  // hold a row of one box in four), run in groups by destination instead
  // (Group). Contiguous copies run in chunks of 256 KiB.
  void RunWork() {
    constexpr int64_t kChunk = int64_t{1} << 18;
    strided_.clear();
    chunks_.clear();
    tasks_.clear();
    int64_t strided_bytes = 0, strided_units = 0;
    for (const Work& w : work_) {
      if (w.op->num_dims > 0) {
        strided_.push_back(w);
        strided_bytes += w.program->OpBytes(*w.op);
        strided_units += w.hi;
      }
    }
    const int64_t slices = std::max<int64_t>(pool_.size(), (strided_bytes + kSliceBytes - 1) / kSliceBytes);
    // How the strided copies run (sliced, or grouped by destination: the
    // order and tasks) depends only on the copies and their buffers: a run
    // that repeats the last run's phase (Run again on one program and the
    // same buffers) takes it from that run instead of deciding and sorting
    // again (Spans sorts every copy twice, Group once). Any choice, order and
    // tasks cover every copy once, so a stale match (a hash collision, or
    // another program at the same addresses) costs speed, never data.
    const size_t phase = phase_++;
    if (phase >= plans_.size()) plans_.resize(phase + 1);
    PhasePlan& plan = plans_[phase];
    const uint64_t hash = HashCopies(strided_);
    const bool known = plan.hash == hash && plan.copies == strided_.size() &&
                       (plan.slice || (!plan.tasks.empty() && plan.tasks.back().end == strided_.size()));
    bool slice = false;
    if (known) {
      slice = plan.slice;
      if (!slice) {
        sorted_.clear();
        for (uint32_t k : plan.order) sorted_.push_back(strided_[k]);
        strided_.swap(sorted_);
        tasks_ = plan.tasks;
      }
      ++phases_reused_;
    } else {
      slice = !strided_.empty() && strided_units >= slices * static_cast<int64_t>(strided_.size()) &&
              Spans(/*dst=*/false) <= Spans(/*dst=*/true);
      // Emptied first, filled whole, the hash last: an entry a failed
      // allocation interrupts matches nothing.
      plan = PhasePlan{};
      if (!slice) {
        std::vector<uint32_t> order;
        Group(order);
        plan.tasks = tasks_;
        plan.order = std::move(order);
      }
      plan.slice = slice;
      plan.copies = strided_.size();
      plan.hash = hash;
    }
    // Contiguous copies: a large one cut into chunks, consecutive small ones
    // run together, about a chunk a task (an all-gather of small shards over
    // thousands of devices has millions of them: a task and a Work entry each
    // was most of its run's memory).
    for (size_t k = 0; k < work_.size(); ++k) {
      const Work& w = work_[k];
      if (w.op->num_dims > 0) continue;  // (units are bytes, from 0: Add)
      if (w.hi >= kChunk) {
        for (int64_t lo = 0; lo < w.hi; lo += kChunk) chunks_.push_back({k, k + 1, lo, std::min(w.hi, lo + kChunk)});
        continue;
      }
      ChunkTask* open = chunks_.empty() || chunks_.back().lo >= 0 ? nullptr : &chunks_.back();
      if (open != nullptr && open->hi + w.hi <= kChunk) {
        open->end = k + 1;
        open->hi += w.hi;
      } else {
        chunks_.push_back({k, k + 1, -1, w.hi});
      }
    }
    const int64_t first = slice ? slices : static_cast<int64_t>(tasks_.size());
    const int64_t parts = first + static_cast<int64_t>(chunks_.size());
    pool_.ParallelFor(parts, [&](int64_t k) {
      if (slice && k < slices) {
        for (const Work& w : strided_) {
          const int64_t lo = w.hi * k / slices, hi = w.hi * (k + 1) / slices;
          if (hi > lo) RunCopy(*w.program, *w.op, w.src, w.dst, lo, hi);
        }
        return;
      }
      if (k < first) {
        const Task& t = tasks_[static_cast<size_t>(k)];
        RunInterleaved(std::span<const Work>(strided_).subspan(t.begin, t.end - t.begin), t.part, t.parts, strided_bytes);
        return;
      }
      const ChunkTask& c = chunks_[static_cast<size_t>(k - first)];
      if (c.lo >= 0) {
        const Work& w = work_[c.begin];
        RunCopy(*w.program, *w.op, w.src, w.dst, c.lo, c.hi);
        return;
      }
      for (size_t i = c.begin; i < c.end; ++i) {
        const Work& w = work_[i];
        if (w.op->num_dims == 0) RunCopy(*w.program, *w.op, w.src, w.dst, 0, w.hi);
      }
    });
  }

  // How many disjoint spans the strided copies cover in their sources (or
  // destinations): copies whose spans overlap share rows. Where copies share
  // destination rows more than source rows (fewer spans: block-cyclic boxes,
  // each a strip of the same target rows, each source row read by one or two
  // boxes), filling each target block in turn reads the sources in order
  // too; where they share source rows (each source row feeds every receiver,
  // as in the canonical case and rows to columns), slices of every copy
  // read each source row once, in order, while grouping by destination would
  // read it in scattered pieces (measured: docs/benchmarks.md, "Block-cyclic
  // in one process").
  size_t Spans(bool dst) {
    spans_.clear();
    for (const Work& w : strided_) {
      const std::byte* base = dst ? w.dst : w.src;
      const int64_t begin = dst ? w.op->dst_offset : w.op->src_offset;
      const int64_t end = dst ? w.program->DstEnd(*w.op) : w.program->SrcEnd(*w.op);
      spans_.push_back({reinterpret_cast<uintptr_t>(base + begin), reinterpret_cast<uintptr_t>(base + end)});
    }
    std::sort(spans_.begin(), spans_.end());
    size_t count = 0;
    uintptr_t reach = 0;
    for (const auto& [begin, end] : spans_) {
      if (count == 0 || begin >= reach) ++count;
      reach = std::max(reach, end);
    }
    return count;
  }

  // Splits the strided copies into tasks by destination: sorted by the first
  // byte they write, copies whose destination spans overlap form a group (in
  // a block-cyclic exchange, the boxes that fill the same rows of a target,
  // from every sender), and a group runs interleaved (RunInterleaved), in
  // parts of about kSliceBytes, so each part fills a block of the target's
  // rows in address order. A group of more than kMaxGroup copies would cost
  // each part a pass over all of them: it runs as consecutive copies of about
  // kSliceBytes instead.
  // `order`: where each copy of the sorted list was in the list given.
  void Group(std::vector<uint32_t>& order) {
    constexpr size_t kMaxGroup = 1024;
    // Addresses as integers: copies into different buffers compare too.
    auto first_byte = [](const Work& w) { return reinterpret_cast<uintptr_t>(w.dst + w.op->dst_offset); };
    order.resize(strided_.size());
    std::iota(order.begin(), order.end(), uint32_t{0});
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return first_byte(strided_[a]) < first_byte(strided_[b]); });
    sorted_.clear();
    for (uint32_t k : order) sorted_.push_back(strided_[k]);
    strided_.swap(sorted_);
    auto add = [&](size_t begin, size_t end, int64_t bytes) {
      const int64_t parts = std::max<int64_t>(1, (bytes + kSliceBytes - 1) / kSliceBytes);
      for (int64_t k = 0; k < parts; ++k) tasks_.push_back({begin, end, k, parts});
    };
    for (size_t begin = 0; begin < strided_.size();) {
      uintptr_t span_end = 0;
      int64_t bytes = 0;
      size_t end = begin;
      for (; end < strided_.size() && (end == begin || first_byte(strided_[end]) < span_end); ++end) {
        const Work& w = strided_[end];
        span_end = std::max(span_end, reinterpret_cast<uintptr_t>(w.dst + w.program->DstEnd(*w.op)));
        bytes += w.program->OpBytes(*w.op);
      }
      if (end - begin <= kMaxGroup) {
        add(begin, end, bytes);
      } else {
        for (size_t b = begin; b < end;) {
          int64_t run = 0;
          size_t e = b;
          while (e < end && (e == b || run < kSliceBytes)) run += strided_[e].program->OpBytes(*strided_[e].op), ++e;
          add(b, e, run);
          b = e;
        }
      }
      begin = end;
    }
  }

  static uint64_t HashCopies(const std::vector<Work>& copies) {
    uint64_t h = copies.size();
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull + (h >> 29); };
    for (const Work& w : copies) {
      mix(reinterpret_cast<uintptr_t>(w.op));
      mix(reinterpret_cast<uintptr_t>(w.src));
      mix(reinterpret_cast<uintptr_t>(w.dst));
      mix(static_cast<uint64_t>(w.hi));
    }
    return h;
  }

  static constexpr int64_t kSliceBytes = int64_t{512} << 10;
  ExecOptions options_;
  ThreadPool pool_;
  std::vector<HostBuffer> send_;
  std::vector<Work> work_, strided_, sorted_;
  // Contiguous copies of work_ a task runs: bytes [lo, hi) of work_[begin]
  // (lo >= 0), or every contiguous copy of work_[begin, end) whole, hi bytes
  // in all (lo < 0).
  struct ChunkTask {
    size_t begin, end;
    int64_t lo, hi;
  };
  std::vector<ChunkTask> chunks_;
  std::vector<Task> tasks_;
  // How each phase (RunWork call) of the last run ran its strided copies:
  // sliced, or grouped (4 bytes a copy for the order, and its tasks, about
  // one per group). Deciding and sorting every box by destination cost 4 ms
  // of an 18 ms run of 65536 boxes.
  struct PhasePlan {
    uint64_t hash = 0;  // of the copies as given (HashCopies)
    size_t copies = 0;
    bool slice = false;
    std::vector<uint32_t> order;
    std::vector<Task> tasks;
  };
  std::vector<PhasePlan> plans_;
  size_t phase_ = 0;
  int64_t phases_reused_ = 0;  // this run's phases that took their plan from plans_
  std::vector<std::pair<uintptr_t, uintptr_t>> spans_;
};

}  // namespace

Status CheckBuffers(const PlanProgram& program, std::span<const std::span<const std::byte>> sources,
                    std::span<const std::span<std::byte>> targets) {
  const size_t n = program.devices().size();
  if (sources.size() != n || targets.size() != n)
    return Status::InvalidArgument(fmt::format("the plan has {} devices, but {} source and {} target buffers were given", n,
                                               sources.size(), targets.size()));
  for (size_t i = 0; i < n; ++i) {
    const int64_t dev = program.devices()[i];
    // The compiled sizes: they follow the buffers' formats (device_program.h).
    const int64_t want_src = program.steps().front().devices[i].input_bytes;
    const int64_t want_dst = program.steps().back().devices[i].output_bytes;
    if (static_cast<int64_t>(sources[i].size()) != want_src)
      return Status::InvalidArgument(fmt::format("device {}'s source buffer holds {} bytes; its source layout needs {}",
                                                 dev, sources[i].size(), want_src));
    if (static_cast<int64_t>(targets[i].size()) != want_dst)
      return Status::InvalidArgument(fmt::format("device {}'s target buffer holds {} bytes; its target layout needs {}",
                                                 dev, targets[i].size(), want_dst));
  }
  return Status::Ok();
}

double MeasureMemcpyGbps(int64_t bytes, int threads, int repeat) {
  if (bytes <= 0) return 0;
  const int64_t size = std::min<int64_t>(bytes, int64_t{1} << 28);
  HostBuffer a(size), b(size);
  std::fill(a.data(), a.data() + size, std::byte{1});
  std::fill(b.data(), b.data() + size, std::byte{2});
  ThreadPool pool(threads);
  const int64_t parts = std::max<int64_t>(pool.size(), (size + (int64_t{1} << 20) - 1) >> 20);
  const int64_t per = (size + parts - 1) / parts;
  double best = 0;
  for (int r = 0; r < std::max(1, repeat); ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t done = 0; done < bytes; done += size) {
      const int64_t now = std::min(size, bytes - done);
      pool.ParallelFor(parts, [&](int64_t k) {
        const int64_t lo = std::min(now, k * per), hi = std::min(now, lo + per);
        if (hi > lo) std::memcpy(b.data() + lo, a.data() + lo, static_cast<size_t>(hi - lo));
      });
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

std::unique_ptr<Executor> MakeInProcessExecutor(ExecOptions options) {
  return std::make_unique<InProcessExecutor>(std::move(options));
}

}  // namespace reshard
