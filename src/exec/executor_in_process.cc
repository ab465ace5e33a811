// The in-process executor: N virtual devices' buffers in one process. The
// pool transports run each step as pack + local copies, then unpack straight
// from the senders' send buffers (or direct copies), over a thread pool;
// threads as ranks run the step runner (rank_threads.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "exec/copy_kernel.h"
#include "exec/copy_schedule.h"
#include "exec/fibers.h"
#include "exec/rank_threads.h"
#include "exec/reduce_kernel.h"
#include "exec/thread_pool.h"
#include "reshard/executor.h"
#include "reshard/host_buffer.h"
#include "reshard/rank_reshard.h"

namespace reshard {
namespace {

// Transport::kRanks: the figures of one run of every rank, as the executor
// reports them.
ExecStats RankStats(const PlanProgram& program, const std::vector<RankRunStats>& ranks,
                    std::vector<std::string> transports) {
  const size_t n = ranks.size();
  ExecStats stats;
  stats.peak_per_device.assign(n, 0);
  stats.steps.resize(program.steps().empty() ? 0 : static_cast<size_t>(program.steps().back().plan_step + 1));
  for (StepTraffic& t : stats.steps) {
    t.sent.assign(n, 0);
    t.received.assign(n, 0);
  }
  for (size_t k = 0; k < n; ++k) {
    const RankRunStats& r = ranks[k];
    stats.bytes_moved += r.bytes_moved;
    stats.bytes_sent += r.bytes_received;  // as the staged path counts: the bytes that arrived as messages
    stats.peak_per_device[k] = r.peak_bytes;
    stats.peak_bytes = std::max(stats.peak_bytes, r.peak_bytes);
    for (size_t i = 0; i < stats.steps.size() && i < r.step_bytes_sent.size(); ++i) {
      stats.steps[i].sent[k] = r.step_bytes_sent[i];
      stats.steps[i].received[k] = r.step_bytes_received[i];
    }
  }
  stats.rank_transports = std::move(transports);
  return stats;
}

// One contiguous run; element-sized ones (the boxes of an all-gather or
// all-to-all of one element a device) as fixed-size copies, no call.
inline void CopyRun(std::byte* t, const std::byte* s, int64_t bytes) {
  switch (bytes) {
    case 1: std::memcpy(t, s, 1); return;
    case 2: std::memcpy(t, s, 2); return;
    case 4: std::memcpy(t, s, 4); return;
    case 8: std::memcpy(t, s, 8); return;
    case 16: std::memcpy(t, s, 16); return;
    default: std::memcpy(t, s, static_cast<size_t>(bytes));
  }
}

class InProcessExecutor final : public Executor {
 public:
  explicit InProcessExecutor(ExecOptions o) : options_(std::move(o)) {}
  std::string_view name() const override { return "in-process"; }

  Result<ExecStats> Run(const PlanProgram& program, std::span<const std::span<const std::byte>> sources,
                        std::span<const std::span<std::byte>> targets) override {
    RESHARD_RETURN_IF_ERROR(CheckBuffers(program, sources, targets));
    Transport transport = Resolve(program);
    // Each transport runs one form of the copies; a program may lack the other.
    if (transport == Transport::kDirect ? !program.has_direct_copies() : !program.has_staged_copies())
      return Status::InvalidArgument(fmt::format(
          "this program was compiled without the {} copies its transport runs (CompileOptions::copies)",
          transport == Transport::kDirect ? "direct" : "staged (pack and unpack)"));
    if (transport == Transport::kRanks && !program.devices().empty()) {
      Result<ExecStats> ranks = RunAsRanks(program, sources, targets);
      // kAuto where the system cannot map a stack per device or start the
      // threads (before any rank ran): the pool runs it.
      if (options_.transport != Transport::kAuto || ranks.ok() || ranks.status().code() != Status::Code::kUnavailable)
        return ranks;
      transport = program.has_direct_copies() ? Transport::kDirect : Transport::kStaged;
    }
    ranks_.reset();  // (a pool run keeps no ranks, threads or staging beside it)
    // The pool, started at the first run that needs it (threads as ranks copy on their own threads).
    if (!pool_) pool_.emplace(options_.threads);
    RESHARD_RETURN_IF_ERROR(pool_->status());
    ThreadPool& pool = *pool_;
    if (program.devices().size() >= (size_t{1} << 30))  // (a schedule names buffers by 32-bit index, two per device)
      return Status::InvalidArgument(fmt::format("the in-process executor runs at most 2^30 devices; this plan has {}",
                                                 program.devices().size()));
    const auto start = std::chrono::steady_clock::now();
    const size_t n = program.devices().size();
    const bool direct = transport == Transport::kDirect;
    ExecStats stats;
    stats.transport = transport;
    // How the program's copies run depends on the program alone: kept from
    // the last run of the same program (its id), else decided now.
    if (schedule_.program_id == 0 || schedule_.program_id != program.id()) {
      schedule_ = {};  // freed first: the old and the new are not held at once
      schedule_ = Schedule(program, direct, pool.size(), options_.max_scheduled_group_copies);
    } else {
      stats.phases_reused = schedule_.phases;
    }
    stats.peak_per_device.assign(n, 0);
    // Send buffers: one per device, the largest any step needs, kept across runs.
    send_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      int64_t need = 0;
      if (transport == Transport::kStaged)
        for (const StepProgram& s : program.steps()) need = std::max(need, s.devices[i].send_bytes);
      if (send_[i].size() < need) {
        send_[i] = HostBuffer(need);
        Touch(send_[i]);
      }
    }
    std::vector<std::span<const std::byte>> in(sources.begin(), sources.end());
    std::vector<HostBuffer> in_owned(n), out_owned(n);
    std::vector<std::span<std::byte>> out(n);
    // The tables the schedules' buffer indices name (ForEachCopy): inputs or
    // outputs first, then the send buffers.
    std::vector<const std::byte*> srcs(2 * n);
    std::vector<std::byte*> dsts(2 * n);
    for (size_t i = 0; i < n; ++i) srcs[n + i] = dsts[n + i] = send_[i].data();
    const size_t steps = program.steps().size();
    for (size_t si = 0; si < steps; ++si) {
      const StepProgram& step = program.steps()[si];
      const StepSchedule& sched = schedule_.steps[si];
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
        srcs[i] = in[i].data();
        dsts[i] = out[i].data();
      }
      // Traffic per plan step: an all-reduce's two program steps add up.
      if (si == 0 || step.plan_step != program.steps()[si - 1].plan_step) {
        StepTraffic& fresh = stats.steps.emplace_back();
        fresh.sent.assign(n, 0);
        fresh.received.assign(n, 0);
      }
      StepTraffic& traffic = stats.steps.back();
      for (size_t i = 0; i < n; ++i) {
        traffic.sent[i] += sched.traffic.sent[i];
        traffic.received[i] += sched.traffic.received[i];
      }
      stats.bytes_moved += sched.bytes_moved;
      stats.bytes_sent += sched.bytes_sent;
      // Phase 1: packs (or direct copies) and local copies. A reducing step
      // then combines, each device its part and what it receives, in part
      // order (reduce_kernel.h): devices in parallel, each one's copies in
      // turn. Phase 2 (staged): unpacks from the senders' send buffers.
      if (sched.by_receiver != nullptr) {
        // A large step written per group pattern: each device's copies of
        // each phase in turn, devices spread over the pool.
        const GroupCopies& gc = *sched.by_receiver;
        for (bool phase1 : {true, false})
          pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t i) {
            ForEachGroupCopy(gc, n, static_cast<size_t>(i), direct, phase1,
                             [&](const CopyProgram& p, int64_t lo, int64_t hi, size_t src, size_t dst, int64_t delta) {
                               const std::byte* from = srcs[src] + delta;
                               std::byte* to = dsts[dst];
                               for (int64_t k = lo; k < hi; ++k) {
                                 const CopyOp& op = p.ops[static_cast<size_t>(k)];
                                 // (A contiguous run inline: many are one element.)
                                 if (op.num_dims == 0)
                                   CopyRun(to + op.dst_offset, from + op.src_offset, op.run_bytes);
                                 else
                                   RunCopy(p, op, from, to, 0, CopyUnits(p, op));
                               }
                             });
          });
      }
      sched.first.Run(pool, srcs, dsts);
      if (step.reduces() && step.group_copies != nullptr) {
        const DType dtype = program.layouts()[si].dtype();
        pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t k) {
          const size_t i = static_cast<size_t>(k);
          // (Kept per thread: no allocation per device and run once it has grown.)
          thread_local std::vector<Contribution> in_order;
          GroupContributions(*step.group_copies, i, direct, in, send_, in_order);
          ApplyContributions(in_order, step.reduction, step.scale, dtype, out[i].data());
        });
      } else if (step.reduces()) {
        const DType dtype = program.layouts()[si].dtype();
        pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t k) {
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
      sched.second.Run(pool, srcs, dsts);
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
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return stats;
  }

 private:
  // kAuto: AutoTransport's, or the other where the program lacks its copies.
  // The program's messages are counted once per program (its id), not at
  // every run: O(steps x devices).
  Transport Resolve(const PlanProgram& program) {
    if (options_.transport != Transport::kAuto) return options_.transport;
    if (program.id() == 0 || messages_program_id_ != program.id()) {
      messages_ = ProgramMessages(program);
      messages_program_id_ = program.id();
    }
    // (Priced chunks are the ranks' alone: their messages are not weighed.)
    const Transport t =
        AutoTransport(static_cast<int64_t>(program.devices().size()), options_.rank_priced_chunks ? 0 : messages_);
    if (t == Transport::kRanks && !program.has_staged_copies()) return Transport::kDirect;
    if (t == Transport::kDirect && !program.has_direct_copies()) return Transport::kStaged;
    return t;
  }

  // The threads the ranks run on (ExecOptions::rank_bytes_per_thread): the
  // same for every run of a program, whose targets are one size.
  int RankCopiers(std::span<const std::span<std::byte>> targets) const {
    const int all = ResolveThreads(options_.threads);
    if (options_.rank_bytes_per_thread <= 0) return all;
    int64_t bytes = 0;
    for (const std::span<std::byte>& t : targets) bytes += static_cast<int64_t>(t.size());
    return static_cast<int>(std::clamp<int64_t>(bytes / options_.rank_bytes_per_thread, 1, all));
  }

  // Transport::kRanks: the ranks of the program last run, kept (threads,
  // runners, staging, box messages) so that the next run of the same
  // program, at the same place, only runs them, as MPI's persistent
  // reshard does; started again for another program or after a failed run.
  Result<ExecStats> RunAsRanks(const PlanProgram& program, std::span<const std::span<const std::byte>> sources,
                               std::span<const std::span<std::byte>> targets) {
    const auto start = std::chrono::steady_clock::now();
    if (ranks_ == nullptr || ranks_->broken() || ranks_program_ != &program || ranks_program_id_ != program.id()) {
      ranks_.reset();  // (stops its threads before new ones start)
      RankOptions ro;
      ro.transport = options_.rank_transport;
      ro.max_message_bytes = options_.rank_max_message_bytes;
      ro.priced_chunks = options_.rank_priced_chunks;
      // A rank waits at a barrier while rank 0 runs the caller's hook over
      // every device's output (the checker): the timeout only guards against a hang.
      const RankThreads::CommSettings comms{
          .timeout_seconds = 600, .copiers = RankCopiers(targets), .boxes_copy_once = !options_.rank_choose_as_mpi};
      RESHARD_ASSIGN_OR_RETURN(ranks_, RankThreads::Start(program, ro, options_.after_step, comms));
      ranks_program_ = &program;
      ranks_program_id_ = program.id();
    }
    RESHARD_ASSIGN_OR_RETURN(std::vector<RankRunStats> ranks, ranks_->Run(sources, targets));
    ExecStats stats = RankStats(program, ranks, ranks_->transports());
    stats.transport = Transport::kRanks;
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return stats;
  }

  // One program step's copies as they run, and what they carry.
  struct StepSchedule {
    CopySchedule first, second;  // phase 1 and phase 2 (Run)
    // A step written per group pattern with more copies than
    // ExecOptions::max_scheduled_group_copies: run receiver by receiver
    // from the pattern, no per-copy list (first and second are empty).
    const GroupCopies* by_receiver = nullptr;
    int64_t bytes_moved = 0, bytes_sent = 0;
    StepTraffic traffic;  // this program step's own
  };
  struct ProgramSchedule {
    uint64_t program_id = 0;  // PlanProgram::id; 0: none
    std::vector<StepSchedule> steps;
    int64_t phases = 0;  // schedules with any copies
  };

  // Every step's schedules. Buffer indices: device i's step input (sources)
  // and output (destinations) are i, its send buffer n + i.
  // Calls emit(copy) for every copy of phase 1 (`first`: packs, or direct
  // copies, and local copies) or phase 2 (unpacks) of `step`, as Run runs
  // them. Buffer indices: device i's step input (sources) and output
  // (destinations) are i, its send buffer n + i.
  template <typename Emit>
  static void ForEachCopy(const StepProgram& step, bool direct, bool first, Emit&& emit) {
    const size_t n = step.devices.size();
    auto add = [&emit](const CopyProgram& p, size_t begin, size_t end, size_t src, size_t dst, int64_t delta = 0) {
      for (size_t k = begin; k < end; ++k)
        emit(ScheduledCopy{&p, &p.ops[k], static_cast<int32_t>(src), static_cast<int32_t>(dst), delta,
                           CopyUnits(p, p.ops[k])});
    };
    if (step.group_copies != nullptr) {
      for (size_t i = 0; i < n; ++i)
        ForEachGroupCopy(*step.group_copies, n, i, direct, first,
                         [&](const CopyProgram& p, int64_t lo, int64_t hi, size_t src, size_t dst, int64_t delta) {
                           add(p, static_cast<size_t>(lo), static_cast<size_t>(hi), src, dst, delta);
                         });
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      const DeviceProgram& dp = step.devices[i];
      if (!first) {
        // unpack ops address the receive buffer; message m lives in its sender's send buffer.
        for (size_t m = 0; m < dp.recv_peer.size() && !direct && !step.reduces(); ++m)
          add(dp.unpack, dp.unpack_begin[m], dp.unpack_begin[m + 1], n + static_cast<size_t>(dp.recv_peer[m]), i,
              dp.recv_peer_offset[m] - dp.recv_offset[m]);
        continue;
      }
      if (direct) {
        for (size_t m = 0; m < dp.recv_peer.size() && !step.reduces(); ++m)
          add(dp.direct, dp.direct_begin[m], dp.direct_begin[m + 1], static_cast<size_t>(dp.recv_peer[m]), i);
      } else {
        for (size_t m = 0; m < dp.send_peer.size(); ++m)  // each staged box once
          if (dp.Packs(m)) add(dp.pack, dp.pack_begin[m], dp.pack_begin[m + 1], i, n + i);
      }
      if (!step.reduces()) add(dp.local, 0, dp.local.ops.size(), i, i);
    }
  }

  // Calls emit(program, lo, hi, src, dst, delta) with device i's copies
  // (ops [lo, hi) of program) of phase 1 (`first`) or 2 of a step written
  // per group pattern, buffers named as ForEachCopy names them. Direct:
  // phase 1, its box from every member of its group (its own: the local
  // copies). Staged: phase 1, its boxes staged into its send buffer and its
  // local copies; phase 2, every other member's box from the place it is
  // staged in that member's send buffer (the delta).
  // A reducing step: phase 1 stages the boxes (staged), nothing else; the
  // boxes are applied in part order after it (GroupContributions).
  template <typename Emit>
  static void ForEachGroupCopy(const GroupCopies& gc, size_t n, size_t i, bool direct, bool first, Emit&& emit) {
    const GroupCopies::Pattern& pat = gc.PatternOf(i);
    const int64_t k = gc.group_size, g = gc.group[i], r = gc.member[i];
    auto member = [&](int64_t m) { return static_cast<size_t>(gc.members[static_cast<size_t>(g * k + m)]); };
    const bool reduces = gc.parts > 1;
    if (direct) {
      for (int64_t s = 0; s < k && first && !reduces; ++s) {
        const auto [lo, hi] = gc.Ops(gc.Pair(pat, r, s));
        emit(gc.copies, lo, hi, member(s), i, int64_t{0});
      }
      return;
    }
    if (first) {
      if (!reduces) {
        const auto [lo, hi] = gc.Ops(gc.Pair(pat, r, r));
        emit(gc.copies, lo, hi, i, i, int64_t{0});
      }
      for (int32_t c = 0; c < pat.classes; ++c) {
        const size_t pair = gc.PairOfClass(pat, c, r);
        emit(gc.pack, gc.pack_begin[pair], gc.pack_begin[pair + 1], i, n + i, int64_t{0});
      }
      return;
    }
    for (int64_t s = 0; s < k && !reduces; ++s) {
      if (s == r) continue;
      const size_t cs = gc.Pair(pat, r, s);
      const int64_t at = gc.stage_offset[cs];
      if (gc.unpack_begin[cs] < gc.unpack_begin[cs + 1]) emit(gc.unpack, gc.unpack_begin[cs], gc.unpack_begin[cs + 1], n + member(s), i, at);
    }
  }

  // Device i's boxes of a reducing step written per group pattern, in part
  // order: its own from its input, each other member's from that member's
  // input (direct) or from where it staged the box in its send buffer; into `out`, cleared first.
  static void GroupContributions(const GroupCopies& gc, size_t i, bool direct, std::span<const std::span<const std::byte>> in,
                                 const std::vector<HostBuffer>& send, std::vector<Contribution>& out) {
    const GroupCopies::Pattern& pat = gc.PatternOf(i);
    const int64_t k = gc.group_size, g = gc.group[i], r = gc.member[i];
    out.clear();
    for (const int32_t s : pat.part_order) {
      const size_t pair = gc.Pair(pat, r, s);
      if (gc.pair_bytes[pair] == 0) continue;
      const size_t from = static_cast<size_t>(gc.members[static_cast<size_t>(g * k + s)]);
      const bool writes = pat.Writes(s);
      if (s == r || direct) {
        const auto [lo, hi] = gc.Ops(pair);
        out.push_back({&gc.copies, lo, hi, in[from].data(), writes});
      } else {
        out.push_back({&gc.unpack, gc.unpack_begin[pair], gc.unpack_begin[pair + 1],
                       send[from].data() + gc.stage_offset[pair], writes});
      }
    }
  }

  // One phase's schedule: its copies counted first, so that each list is
  // allocated once at its size (a step can have millions of copies).
  static CopySchedule PhaseSchedule(const StepProgram& step, bool direct, bool first, int threads) {
    size_t strided = 0, contiguous = 0;
    ForEachCopy(step, direct, first, [&](const ScheduledCopy& c) { ++(c.op->num_dims > 0 ? strided : contiguous); });
    std::vector<ScheduledCopy> a, b;
    a.reserve(strided);
    b.reserve(contiguous);
    ForEachCopy(step, direct, first, [&](const ScheduledCopy& c) { (c.op->num_dims > 0 ? a : b).push_back(c); });
    return CopySchedule::Build(std::move(a), std::move(b), threads);
  }

  // Every step's schedules and traffic.
  static ProgramSchedule Schedule(const PlanProgram& program, bool direct, int threads, int64_t max_group_copies) {
    const size_t n = program.devices().size();
    ProgramSchedule out;
    out.program_id = program.id();
    for (const StepProgram& step : program.steps()) {
      StepSchedule& s = out.steps.emplace_back();
      s.traffic.sent.assign(n, 0);
      s.traffic.received.assign(n, 0);
      if (step.group_copies != nullptr) {
        // The pattern's figures per member; its copies listed only where few.
        const GroupCopies& gc = *step.group_copies;
        const int64_t k = gc.group_size;
        // Per pair row (a pattern's receiver class): the bytes written into
        // one receiver, and its copies in the form run (staged: the unpacks,
        // a receiver's packs and its local copies, as many again at most).
        const size_t rows = gc.pair_bytes.size() / static_cast<size_t>(k);
        std::vector<int64_t> row_ops(rows), row_bytes(rows, 0);
        for (size_t row = 0; row < rows; ++row) {
          const size_t lo = row * static_cast<size_t>(k), hi = lo + static_cast<size_t>(k);
          row_ops[row] =
              direct ? gc.begin[hi] - gc.begin[lo] : 2 * (gc.unpack_begin[hi] - gc.unpack_begin[lo]) + gc.begin[hi] - gc.begin[lo];
          for (size_t pair = lo; pair < hi; ++pair) row_bytes[row] += gc.pair_bytes[pair];
        }
        int64_t copies = 0;
        for (size_t i = 0; i < n; ++i) {
          const GroupCopies::Pattern& pat = gc.PatternOf(i);
          const size_t m = static_cast<size_t>(gc.member[i]);
          const size_t row = gc.Pair(pat, static_cast<int64_t>(m), 0) / static_cast<size_t>(k);
          s.traffic.sent[i] = pat.sent[m];
          s.traffic.received[i] = pat.received[m];
          s.bytes_sent += pat.received[m];
          s.bytes_moved += row_bytes[row];
          copies += row_ops[row];
        }
        if (copies > max_group_copies) {
          s.by_receiver = &gc;  // (nothing scheduled: no phase to reuse)
          continue;
        }
      }
      // Message m of receiver i carried the bytes its copies wrote (direct:
      // from the sender's input; staged: out of the sender's send buffer).
      for (size_t i = 0; i < n; ++i) {
        const DeviceProgram& dp = step.devices[i];
        const CopyProgram& p = direct ? dp.direct : dp.unpack;
        const std::vector<int32_t>& begin = direct ? dp.direct_begin : dp.unpack_begin;
        for (size_t m = 0; m < dp.recv_peer.size(); ++m) {
          int64_t bytes = 0;
          for (int32_t k = begin[m]; k < begin[m + 1]; ++k) bytes += p.OpBytes(p.ops[static_cast<size_t>(k)]);
          s.traffic.received[i] += bytes;
          s.traffic.sent[static_cast<size_t>(dp.recv_peer[m])] += bytes;
        }
        s.bytes_moved += dp.local.bytes + p.bytes;
        s.bytes_sent += p.bytes;
      }
      s.first = PhaseSchedule(step, direct, /*first=*/true, threads);
      s.second = PhaseSchedule(step, direct, /*first=*/false, threads);
      out.phases += (s.first.size() > 0) + (s.second.size() > 0);
    }
    return out;
  }

  void Touch(HostBuffer& o) {
    const int64_t chunk = int64_t{1} << 20;
    const int64_t parts = (o.size() + chunk - 1) / chunk;
    pool_->ParallelFor(parts, [&](int64_t k) {
      const int64_t lo = k * chunk;
      std::fill(o.data() + lo, o.data() + std::min(o.size(), lo + chunk), std::byte{0});
    });
  }

  ExecOptions options_;
  std::optional<ThreadPool> pool_;
  std::vector<HostBuffer> send_;
  // The schedules of the program last run: 40 bytes a copy, kept so that
  // the next run of the same program runs them as they are.
  ProgramSchedule schedule_;
  std::unique_ptr<RankThreads> ranks_;
  const PlanProgram* ranks_program_ = nullptr;
  uint64_t ranks_program_id_ = 0;
  uint64_t messages_program_id_ = 0;  // whose messages `messages_` counts (0: none; ids start at 1)
  int64_t messages_ = 0;
};

}  // namespace

int ResolveThreads(int threads) {
  return std::min(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
                  kMaxThreads);
}

// Each fiber's guard a mapping of its own, a rank takes two of the 65,530
// mappings Linux gives a process by default: 16,384 ranks hold about half
// of them, leaving the rest to the process. With guard regions every
// stack is in one mapping, and the cap is a choice, not a limit met: 2^20
// stacks of a MiB and their guards reserve about 1.06 TiB of the
// process's address space (docs/benchmarks.md, "Threads as ranks past
// 16,384 devices").
constexpr int64_t kRankDevicesGuardMappings = 16384;
constexpr int64_t kRankDevicesGuardRegions = int64_t{1} << 20;

int64_t MaxRankDevices() { return Fibers::GuardsTakeMappings() ? kRankDevicesGuardMappings : kRankDevicesGuardRegions; }

Status CheckRankDevices(int64_t devices) {
  if (devices <= MaxRankDevices()) return Status::Ok();
  return Status::Unavailable(fmt::format(
      "threads as ranks run at most {} devices here (a fiber stack and a runner each{}); these layouts have {}",
      MaxRankDevices(), Fibers::GuardsTakeMappings() ? ", each stack's guard a mapping of its own" : "", devices));
}

Transport AutoTransport(int64_t devices, int64_t messages) {
  return devices <= std::min(kAutoRankDevices, MaxRankDevices()) && messages <= kMaxRankMessages ? Transport::kRanks
                                                                                                 : Transport::kDirect;
}

int64_t ProgramMessages(const PlanProgram& program) {
  int64_t messages = 0;
  for (const StepProgram& s : program.steps()) {
    if (s.group_copies != nullptr) {
      const GroupCopies& gc = *s.group_copies;
      messages += static_cast<int64_t>(gc.group.size()) * std::max<int64_t>(0, gc.group_size - 1);
      continue;
    }
    for (const DeviceProgram& d : s.devices) messages += static_cast<int64_t>(d.send_peer.size());
  }
  return messages;
}

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
