// CopySchedule: how the in-process executor runs one phase of a step's
// copies over its thread pool: which copies run in slices and which in
// groups by destination, in what order, in which tasks. It depends only on
// the copies and on which buffer each reads and writes, never on where the
// buffers are, so the executor builds it once per compiled program (keyed
// by PlanProgram::id) and every later run of that program takes it as it
// is, whatever buffers the run is given. Deciding, hashing and sorting
// every copy on every run had cost as long as the copies themselves on
// small boxes (262144 boxes of 8x8 f64: 8 ms of a 19 ms run).
//
// Immutable after Build; Run is safe to call from one thread at a time,
// RunTask from any.
#ifndef RESHARD_SRC_EXEC_COPY_SCHEDULE_H_
#define RESHARD_SRC_EXEC_COPY_SCHEDULE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "exec/thread_pool.h"
#include "reshard/device_program.h"

namespace reshard {

// One copy of a compiled program, its buffers named by their index in the
// tables a run passes: it reads from srcs[src] + src_delta (the delta: where
// a received message lies in its sender's send buffer, relative to the
// receive-buffer offsets its ops hold) and writes into dsts[dst].
// (Indices are below twice the executor's devices: fewer than 2^31.)
struct ScheduledCopy {
  const CopyProgram* program = nullptr;
  const CopyOp* op = nullptr;
  int32_t src = 0, dst = 0;
  int64_t src_delta = 0;
  int64_t units = 0;  // CopyUnits(*program, *op)
};

class CopySchedule {
 public:
  // Decides how `copies` run on a pool of `threads` threads. Copies with
  // dims (strided) that share destination rows more than source rows, or are
  // too short to slice (the many small boxes of a block-cyclic exchange),
  // run in groups by destination, each group interleaved (RunInterleaved);
  // strided copies that share source rows run in slices (slice k: the k-th
  // part of every copy), so a block of rows of every buffer stays cached
  // until all its copies are done (docs/benchmarks.md, "Execution"), and
  // where they are also short rows that share destination rows, in slices
  // of their destination groups (slice k: part k of every group, each
  // interleaved); in a pass of kStreamPassBytes or more, copies that share
  // source rows and are runs of whole cache lines, or runs of a line or more
  // (7 bytes in 8) that read fewer spans than they write, in groups by
  // source (Mode::kSourceGroups); contiguous copies run in chunks of about
  // 256 KiB.
  // Scattering runs that are not whole lines group by source only where
  // senders' pieces meet inside under 1/8 of the target lines
  // (SplitLineBytes). Where some strided copy reads its source lines in
  // parts (runs under a line, or under 4 KiB starting or ending inside
  // one), destination groups whose copies read the same source spans run
  // as one group (a source line then feeds several targets in one turn);
  // a group of one-dim copies of runs not all whole lines, some a line or
  // more, runs in the order its copies lie along a row (OrderAlongRows).
  // Copies whose spans reach more than four times the median copy's (a
  // strip of many rows beside copies of a row each) group apart, each such
  // group run after the groups that write its buffer before its span ends
  // (PlaceApart).
  // `strided`: the copies with dims; `contiguous`: those without.
  static CopySchedule Build(std::vector<ScheduledCopy> strided, std::vector<ScheduledCopy> contiguous, int threads);

  // Runs every copy once over `pool`. REQUIRES: every copy's buffer indices
  // within the tables, and the buffers large enough for its ops.
  void Run(ThreadPool& pool, std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts) const;
  // The same work as tasks that ranks (threads or fibers) take in any order,
  // each once (Run: over a pool): threads as ranks copying one collective
  // together (thread_comm.h). Thread-safe; REQUIRES: 0 <= k < tasks(), and
  // Run's buffer tables.
  int64_t tasks() const;
  // The groups the strided copies run in (not kSlices): each group of a
  // batch task counts, as does each group cut into parts once.
  int64_t groups() const;
  void RunTask(int64_t k, std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts) const;

  size_t size() const { return strided_.size() + contiguous_.size(); }
  // The strided copies in the order their groups run them (tests).
  const std::vector<ScheduledCopy>& StridedForTesting() const { return strided_; }
  // How the strided copies run: in slices (slice k: the k-th part of every
  // copy); in groups by destination, each group's parts tasks of their own;
  // or in slices of groups (slice k: the k-th part of every group, each
  // interleaved, a task of its own).
  // Or in groups by source (copies reading the same source rows, sorted by
  // the first byte they read, each group's parts tasks of their own): runs
  // of a cache line or more in a pass beyond the caches (ReadsBySource,
  // copy_schedule.cc).
  enum class Mode { kSlices, kGroups, kSlicedGroups, kSourceGroups };
  Mode mode() const { return mode_; }

 private:
  // Part `part` of `parts` of strided_[begin, end), run interleaved (in
  // kSlicedGroups, a whole group: part 0 of 1, run in slices). parts == 0:
  // a batch of small groups, each run whole in turn, the first beginning
  // at batched_[part], the next ones at the entries after it below `end`.
  struct Task {
    size_t begin, end;
    int64_t part, parts;
  };
  // Bytes [lo, hi) of contiguous_[begin] (lo >= 0), or every copy of
  // contiguous_[begin, end) whole, hi bytes in all (lo < 0).
  struct ChunkTask {
    size_t begin, end;
    int64_t lo, hi;
  };
  size_t Spans(bool dst, std::vector<uint32_t>* chain = nullptr) const;
  int64_t StridedTasks() const;  // the tasks before the contiguous copies' chunks
  bool FillsRowsTogether(size_t dst_spans) const;
  // `src_spans`, `dst_spans`: Spans(false), Spans(true); `src_chain`:
  // Spans(false)'s chain of each copy.
  bool ReadsBySource(size_t src_spans, size_t dst_spans, const std::vector<uint32_t>& src_chain) const;
  int64_t SplitLineBytes(const std::vector<uint32_t>& chain) const;
  // whole: one task per group (kSlicedGroups), not parts of kSliceBytes;
  // by_source: groups by the source rows copies read (kSourceGroups);
  // threads: those that run the schedule (a group keeps its share in parts).
  void Group(bool whole, bool by_source, int threads);
  // A range [begin, end) of strided_.
  struct Chain {
    size_t begin, end;
  };
  bool ReadsLinesInParts() const;
  void OrderAlongRows(const std::vector<Chain>& chains, size_t max_copies);
  void JoinBySource(std::vector<Chain>& chains, size_t max_copies, size_t first_apart);
  void PlaceApart(std::vector<Chain>& chains, size_t first_apart, bool by_source);
  // Rebuilds strided_ as `groups` lists `chains`: each group's chains in
  // turn, adjacent, the groups in order (empty ones skipped); `chains`
  // becomes one range of strided_ per group.
  void Arrange(std::vector<Chain>& chains, const std::vector<std::vector<uint32_t>>& groups);

  std::vector<ScheduledCopy> strided_, contiguous_;
  int64_t strided_bytes_ = 0, slices_ = 0;
  Mode mode_ = Mode::kGroups;
  std::vector<Task> tasks_;
  std::vector<size_t> batched_;  // where each group of a batch task begins, in order
  std::vector<ChunkTask> chunks_;
};

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_COPY_SCHEDULE_H_
