#include "exec/copy_schedule.h"

#include <algorithm>
#include <climits>
#include <iterator>
#include <numeric>
#include <tuple>
#include <utility>

#include "exec/copy_kernel.h"

namespace reshard {
namespace {

constexpr int64_t kSliceBytes = int64_t{512} << 10;
constexpr int64_t kChunkBytes = int64_t{1} << 18;
// Bytes of each copy a part of a group takes, at least: every part sets
// up each of its copies anew (its record, its dims, how its rows copy),
// which outweighed the rows of parts of copies under a few KiB. (f64 8x8
// blocks on 1x8 into 24x24 on 4x2, 3547^2: groups of 444 copies of 24
// rows of 64 bytes, 15.9 ms a run on one thread in two parts of 768 bytes
// a copy, 13.7 in one.)
constexpr int64_t kMinCopyPartBytes = int64_t{2} << 10;
// Rows a slice of a copy takes on average, at least, for the strided copies
// to run in slices: a call per few rows of each copy costs more than the
// rows. (f32 8x8 blocks on 8x1 into 8x8 on 1x8, 5760^2 on the ranks: 5,760
// copies of 720 runs in 253 slices, three runs a call, ran at 0.1 of
// memcpy; in destination groups, at 0.9.)
constexpr int64_t kMinSliceRows = 16;

// Where a copy's bytes begin and end in the buffer it reads (or writes), as
// offsets into that buffer: spans of different buffers never overlap.
struct Span {
  int32_t buffer;
  int64_t begin, end;
  friend bool operator<(const Span& a, const Span& b) {
    return std::tie(a.buffer, a.begin, a.end) < std::tie(b.buffer, b.begin, b.end);
  }
};

Span SourceSpan(const ScheduledCopy& c) {
  return {c.src, c.src_delta + c.op->src_offset, c.src_delta + c.program->SrcEnd(*c.op)};
}
Span DestinationSpan(const ScheduledCopy& c) { return {c.dst, c.op->dst_offset, c.program->DstEnd(*c.op)}; }

// The buffer and first byte a copy reads (`by_source`) or writes: the key
// copies sort by before their spans chain. (The first byte only: a span's
// end walks the copy's dims, and a sort asks for each copy's key many times.)
std::pair<int32_t, int64_t> FirstByte(const ScheduledCopy& c, bool by_source) {
  return by_source ? std::pair(c.src, c.src_delta + c.op->src_offset) : std::pair(c.dst, c.op->dst_offset);
}

// Whether every run of copy `c` covers whole cache lines of its source
// (`source`) or its target: runs of a multiple of 64 bytes at offsets and
// strides of whole lines.
bool WholeLines(const ScheduledCopy& c, bool source) {
  const CopyOp& op = *c.op;
  if (op.run_bytes % 64 != 0 || (source ? c.src_delta + op.src_offset : op.dst_offset) % 64 != 0) return false;
  const CopyDim* dims = c.program->dims.data() + op.first_dim;
  for (int32_t d = 0; d < op.num_dims; ++d)
    if ((source ? dims[d].src_stride : dims[d].dst_stride) % 64 != 0) return false;
  return true;
}

}  // namespace

CopySchedule CopySchedule::Build(std::vector<ScheduledCopy> strided, std::vector<ScheduledCopy> contiguous, int threads) {
  CopySchedule s;
  s.strided_ = std::move(strided);
  s.contiguous_ = std::move(contiguous);
  int64_t strided_units = 0;
  for (const ScheduledCopy& c : s.strided_) {
    s.strided_bytes_ += c.program->OpBytes(*c.op);
    strided_units += c.units;
  }
  s.slices_ = std::max<int64_t>(threads, (s.strided_bytes_ + kSliceBytes - 1) / kSliceBytes);
  std::vector<uint32_t> src_chain;  // each copy's source chain (SplitLineBytes)
  const size_t dst_spans = s.strided_.empty() ? 0 : s.Spans(/*dst=*/true);
  const size_t src_spans = s.strided_.empty() ? 0 : s.Spans(/*dst=*/false, &src_chain);  // (each a sort: once)
  const bool slice = !s.strided_.empty() &&
                     strided_units >= kMinSliceRows * s.slices_ * static_cast<int64_t>(s.strided_.size()) &&
                     src_spans <= dst_spans;
  if (s.ReadsBySource(src_spans, dst_spans, src_chain))
    s.mode_ = Mode::kSourceGroups;
  else
    s.mode_ = !slice ? Mode::kGroups : s.FillsRowsTogether(dst_spans) ? Mode::kSlicedGroups : Mode::kSlices;
  if (s.mode_ != Mode::kSlices)
    s.Group(/*whole=*/s.mode_ == Mode::kSlicedGroups, /*by_source=*/s.mode_ == Mode::kSourceGroups, threads);
  // Contiguous copies: a large one cut into chunks, consecutive small ones
  // run together, about a chunk a task (an all-gather of small shards over
  // thousands of devices has millions of them: a task each was most of its
  // run's memory).
  for (size_t k = 0; k < s.contiguous_.size(); ++k) {
    const int64_t bytes = s.contiguous_[k].units;  // units of a copy with no dims are bytes
    if (bytes >= kChunkBytes) {
      for (int64_t lo = 0; lo < bytes; lo += kChunkBytes) s.chunks_.push_back({k, k + 1, lo, std::min(bytes, lo + kChunkBytes)});
      continue;
    }
    ChunkTask* open = s.chunks_.empty() || s.chunks_.back().lo >= 0 ? nullptr : &s.chunks_.back();
    if (open != nullptr && open->hi + bytes <= kChunkBytes) {
      open->end = k + 1;
      open->hi += bytes;
    } else {
      s.chunks_.push_back({k, k + 1, -1, bytes});
    }
  }
  return s;
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
// in one process"). `chain`, where given: each copy's span's index among
// them (copies whose spans overlap, one chain).
size_t CopySchedule::Spans(bool dst, std::vector<uint32_t>* chain) const {
  const size_t n = strided_.size();
  std::vector<Span> spans(n);
  for (size_t k = 0; k < n; ++k) spans[k] = dst ? DestinationSpan(strided_[k]) : SourceSpan(strided_[k]);
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), uint32_t{0});
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return spans[a] < spans[b]; });
  if (chain != nullptr) chain->assign(n, 0);
  size_t count = 0;
  int32_t buffer = -1;
  int64_t reach = 0;
  for (const uint32_t k : order) {
    const Span& s = spans[k];
    if (count == 0 || s.buffer != buffer || s.begin >= reach) {
      ++count;
      buffer = s.buffer;
      reach = s.end;
    }
    reach = std::max(reach, s.end);
    if (chain != nullptr) (*chain)[k] = static_cast<uint32_t>(count - 1);
  }
  return count;
}

// Whether copies that share source rows (they run in slices) are also
// short rows (of one or two dims, 16 to 512 bytes: RunInterleaved's
// row-a-turn cursors, rows under 64 bytes as many a turn as make 64) that
// write the same destination rows in groups of
// two or more on average (`dst_spans`: the disjoint spans they write; a
// task a group and slice, so single copies would make tasks of a few rows
// each). Then slice k runs part k of every destination group, interleaved:
// each group writes its target rows whole, in address order, a run from
// each of its copies in turn, and the slice still reads a block of every
// source's rows at once. The canonical case (64-byte runs, four senders to a
// target row) took about a fifth less time at 64 and 256 MiB than in slices
// of each copy, where the four senders' runs reached each target row at
// different times; grouping alone, whole groups one after another, read
// each source row in eight scattered pieces and ran 0.6 of memcpy at
// 256 MiB (docs/benchmarks.md, "Short rows: two-dim copies"). Runs of 16
// to 63 bytes (bf16 and f32 shards of a few elements a row) ran in slices
// of each copy before, each copy writing parts of lines alone: the bf16
// canonical case at 64 MiB took 13.4 ms so, 7.1 in destination groups.
bool CopySchedule::FillsRowsTogether(size_t dst_spans) const {
  for (const ScheduledCopy& c : strided_)
    if (c.op->num_dims > 2 || c.op->run_bytes < 16 || c.op->run_bytes > 512) return false;
  return 2 * dst_spans <= strided_.size();
}

// Whether the strided copies, in a pass beyond the last-level cache, share
// source rows (groups of two or more on average) and are either
// - runs of whole cache lines (64 to 512 bytes, in multiples of 64, at
//   destination strides of whole lines, one or two dims): streaming stores
//   then complete each line they write, in any order, and what bounds the
//   pass is the reads; or
// - runs of a line or more (7 bytes in 8 or more) that scatter: they read
//   fewer disjoint spans than they write (`src_spans` < `dst_spans`).
// Grouped by source, each source row is then read once, in order
// (RunInterleaved's planes by source), where the hardware's prefetchers
// follow it.
// Whole lines: the canonical case's pattern alone
// (bench/short_rows_bench.cc), 2 threads: at 64 MiB 2.9 ms by source
// against 4.8 for memcpy of the same bytes and 6.5 filling each target row
// whole; at 256 MiB 14.6 against 17.7 and 33.0. In `reshard run` the
// canonical case went from 5.0 to 2.9 ms at 64 MiB and from 21.5 to 12.3 at
// 256 MiB, 8x8 f64 blocks at 128 MiB from 30.0 to 6.6 (docs/benchmarks.md,
// "Small blocks and short lines by source", with the refolded local
// boxes). Copies of two dims whose inner rows lie apart in the source take
// RunInterleaved's general turns, a row of each a turn, in source order;
// that was still the faster (f32[256,256,128] P('y','x',None) to
// P(None,None,('x','y')): 4.2 ms a run on the ranks and 2.0 on `direct`,
// against 10.7 and 6.7 in the other modes).
// Scattering runs: random block-cyclic pairs whose runs straddle lines or
// exceed 512 bytes (f32 128x128 blocks on 4x2 into 200x200 on 1x8, 4096^2:
// runs of 32 to 512 bytes) ran at 0.2 to 0.8 of memcpy in destination
// groups or slices, and at 0.6 to 1.45 by source (docs/benchmarks.md,
// "Random block-cyclic pairs by source"). Where they gather as much as they
// scatter (f32 200x200 blocks on 1x8 into 64x64 on 1x8: eight spans each
// way), by source wrote each target line's pieces at different times and
// ran at 0.5 against 0.65 in slices of destination groups. Runs under a
// line stay out: a target line would take its pieces from several turns
// (bf16 8x8 blocks into 64x64: 0.17 of memcpy by source against 0.68 in
// destination groups joined by source; bench/inprocess_other_cases.sh).
bool CopySchedule::ReadsBySource(size_t src_spans, size_t dst_spans, const std::vector<uint32_t>& src_chain) const {
  if (strided_.empty() || strided_bytes_ < kStreamPassBytes || 2 * src_spans > strided_.size()) return false;
  bool whole_lines = true;
  int64_t short_bytes = 0;
  for (const ScheduledCopy& c : strided_) {
    const CopyOp& op = *c.op;
    if (op.run_bytes < 64) short_bytes += c.program->OpBytes(op);
    whole_lines = whole_lines && op.num_dims <= 2 && op.run_bytes >= 64 && op.run_bytes <= 512 && WholeLines(c, false);
  }
  return whole_lines || (8 * short_bytes <= strided_bytes_ && src_spans < dst_spans &&
                         8 * SplitLineBytes(src_chain) <= strided_bytes_);
}

// About how many bytes of target lines two copies of different source
// chains (`chain`, Spans': spans that overlap, what a group by source runs
// together) both
// write, row after row: the first's run ending inside a line where the
// second's begins, next to each other in the target. By source, each
// chain's turns write their part of such a line at another time, and a
// streaming store's half line costs more than a whole one (f32 48x48
// blocks on 4x2 into 200x200 on 1x8, 5829^2: 192-byte pieces from the two
// senders of a column alternate along each target row; 15.9 ms a run by
// source, 7.6 in destination groups, medians of 3 alternated runs on the
// ranks with the mode forced, a build not kept). Copies next to each other in
// the target are found by sorting on the first byte they write, and each
// pair counts a line a row (the fewer rows of the two) where they meet, and
// another where runs that alternate along a row meet again (the second's
// run and the first's next).
int64_t CopySchedule::SplitLineBytes(const std::vector<uint32_t>& chain) const {
  const size_t n = strided_.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), uint32_t{0});
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return FirstByte(strided_[a], /*by_source=*/false) < FirstByte(strided_[b], /*by_source=*/false);
  });
  // Whether bytes [end - 1, begin] lie in one line, the first ending inside it.
  auto split_line = [](int64_t end, int64_t begin) {
    return end % 64 != 0 && end <= begin && (end - 1) / 64 == begin / 64;
  };
  int64_t split = 0;
  for (size_t i = 1; i < n; ++i) {
    const ScheduledCopy &a = strided_[order[i - 1]], &b = strided_[order[i]];
    if (a.dst != b.dst || chain[order[i - 1]] == chain[order[i]]) continue;
    const CopyOp &x = *a.op, &y = *b.op;
    int lines = split_line(x.dst_offset + x.run_bytes, y.dst_offset);
    // Runs that alternate along a row (the same innermost target stride,
    // longer than either's run): b's run also meets a's next.
    const int64_t stride =
        x.num_dims > 0 ? a.program->dims[static_cast<size_t>(x.first_dim + x.num_dims - 1)].dst_stride : 0;
    if (y.num_dims > 0 && stride > x.run_bytes &&
        b.program->dims[static_cast<size_t>(y.first_dim + y.num_dims - 1)].dst_stride == stride)
      lines += split_line(y.dst_offset + y.run_bytes, x.dst_offset + stride);
    split += 64 * lines * std::min(a.units, b.units);
  }
  return split;
}

// Splits the strided copies into tasks by destination (by source:
// `by_source`, with "write" read as "read" below): sorted by the first
// byte they write, copies whose destination spans overlap form a group (in
// a block-cyclic exchange, the boxes that fill the same rows of a target,
// from every sender), and a group runs interleaved (RunInterleaved), in
// parts of about kSliceBytes, so each part fills a block of the target's
// rows in address order (by source: reads a block of the source's rows in
// order; no more parts than its copies' fewest planes, which RunInterleaved
// splits), and no more than leave each copy kMinCopyPartBytes a part,
// unless the group's share of the `threads` asks for more. A group of more
// than kMaxGroup copies would cost each part a pass over all of them: it
// runs as consecutive copies of about kSliceBytes instead.
void CopySchedule::Group(bool whole, bool by_source, int threads) {
  constexpr size_t kMaxGroup = 1024;
  std::vector<uint32_t> order(strided_.size());
  std::iota(order.begin(), order.end(), uint32_t{0});
  auto span = [by_source](const ScheduledCopy& c) { return by_source ? SourceSpan(c) : DestinationSpan(c); };
  // Copies whose spans reach more than kApartSpans times the median span
  // (a narrow strip of many target rows beside copies of a row each) group
  // apart from the others (PlaceApart says when they run): in a group, a
  // turn copies a row (or a line) of each copy, so one such strip drew the
  // rows it crosses into one group, each turn writing all of them and
  // reading from every copy (f32 8x8 blocks on 2x4 into 128x128 on 8x1,
  // 5053^2: the last block column's 20-byte strips of 8 rows beside copies
  // of one target row, groups of 37 copies; 0.20 of memcpy so, 0.42 apart,
  // medians of 5 alternated runs on the ranks).
  constexpr int64_t kApartSpans = 4;
  // Each copy's span, once (its end walks the copy's dims): for the median
  // here and, in sorted order, for the chains below.
  std::vector<Span> spans(strided_.size());
  std::vector<int64_t> lengths(strided_.size());
  for (size_t k = 0; k < strided_.size(); ++k) {
    spans[k] = span(strided_[k]);
    lengths[k] = spans[k].end - spans[k].begin;
  }
  const auto middle = lengths.begin() + static_cast<std::ptrdiff_t>(lengths.size() / 2);
  std::nth_element(lengths.begin(), middle, lengths.end());
  const int64_t median = lengths.empty() ? 0 : *middle;
  std::vector<uint8_t> apart(strided_.size());
  for (size_t k = 0; k < strided_.size(); ++k) apart[k] = spans[k].end - spans[k].begin > kApartSpans * median;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return std::pair(apart[a], FirstByte(strided_[a], by_source)) <
           std::pair(apart[b], FirstByte(strided_[b], by_source));
  });
  std::vector<ScheduledCopy> sorted;
  std::vector<Span> sorted_spans;
  sorted.reserve(strided_.size());
  sorted_spans.reserve(strided_.size());
  for (uint32_t k : order) sorted.push_back(strided_[k]), sorted_spans.push_back(spans[k]);
  strided_.swap(sorted);
  const size_t first_apart = static_cast<size_t>(std::count(apart.begin(), apart.end(), uint8_t{0}));
  int64_t batch_bytes = 0;  // of the batch task last started
  auto add = [&](size_t begin, size_t end, int64_t bytes) {
    int64_t parts = whole ? 1 : std::max<int64_t>(1, (bytes + kSliceBytes - 1) / kSliceBytes);
    // By source, a group's parts split each copy's planes (SourcePlanes):
    // no more parts than the fewest planes, or some would
    // have none.
    if (by_source)
      for (size_t k = begin; k < end; ++k) parts = std::min(parts, SourcePlanes(*strided_[k].program, *strided_[k].op));
    // Each copy kMinCopyPartBytes a part, at least; but a phase of a few
    // large groups keeps every thread busy: a group's share of the threads
    // (its part of the phase's bytes) in parts, at least.
    const int64_t share = (int64_t{threads} * bytes + strided_bytes_ - 1) / std::max<int64_t>(1, strided_bytes_);
    parts =
        std::min(parts, std::max({int64_t{1}, share, bytes / (static_cast<int64_t>(end - begin) * kMinCopyPartBytes)}));
    // A group of one part under kChunkBytes joins the task before it where
    // that is such a batch still under kChunkBytes: each run whole in turn.
    // (Rows too long to fold into planes leave a group per source or target
    // row: 46,080 tasks of 2.9 KiB in f32 32x32 blocks on 1x8 into 16x16 on
    // 2x4, 5760^2, each a shared count taken and a group set up.)
    if (!whole && parts == 1 && bytes < kChunkBytes) {
      if (!tasks_.empty() && tasks_.back().parts == 0 && tasks_.back().end == begin &&
          batch_bytes + bytes <= kChunkBytes) {
        tasks_.back().end = end;
        batch_bytes += bytes;
      } else {
        tasks_.push_back({begin, end, static_cast<int64_t>(batched_.size()), 0});
        batch_bytes = bytes;
      }
      batched_.push_back(begin);
      return;
    }
    for (int64_t k = 0; k < parts; ++k) tasks_.push_back({begin, end, k, parts});
  };
  std::vector<Chain> chains;
  for (size_t begin = 0; begin < strided_.size();) {
    const int32_t buffer = sorted_spans[begin].buffer;
    int64_t span_end = 0;
    size_t end = begin;
    for (; end < strided_.size(); ++end) {
      const Span& s = sorted_spans[end];
      if (end > begin && (s.buffer != buffer || s.begin >= span_end || end == first_apart)) break;
      span_end = std::max(span_end, s.end);
    }
    chains.push_back({begin, end});
    begin = end;
  }
  if (!by_source && ReadsLinesInParts()) JoinBySource(chains, kMaxGroup, first_apart);
  if (!by_source) OrderAlongRows(chains, kMaxGroup);
  PlaceApart(chains, first_apart, by_source);
  for (const auto& [begin, end] : chains) {
    if (end - begin <= kMaxGroup) {
      int64_t bytes = 0;
      for (size_t k = begin; k < end; ++k) bytes += strided_[k].program->OpBytes(*strided_[k].op);
      add(begin, end, bytes);
      continue;
    }
    for (size_t b = begin; b < end;) {
      int64_t run = 0;
      size_t e = b;
      while (e < end && (e == b || run < kSliceBytes)) run += strided_[e].program->OpBytes(*strided_[e].op), ++e;
      add(b, e, run);
      b = e;
    }
  }
}

// Whether some strided copy reads its source lines in parts: runs under a
// line, or runs of a few lines (under 4 KiB, RunInterleaved's rows a turn)
// that start or end within one. Such a line then feeds copies into
// different targets, whose groups, apart, read it at different times.
// (Some, not most: f64 24x24 blocks on 1x8 into 64x64 on 2x4, 4133^2, whose
// 192-byte runs split lines only on the senders of an uneven width, took
// 15.5 ms a run with its groups apart and 7.7 joined, run along the row;
// a rule of 1/8 of the bytes left them apart.)
// (On the ranks, medians of 3 alternated runs in a build with the join
// switched, not kept: f32 200x200 blocks on 1x8 into 64x64 on 1x8,
// 5053^2, runs of 256 bytes at offsets of 800 bytes a block, 11.0 ms a
// run apart, 7.4 joined; 200x200 on 4x2 into 24x24 on 4x2, 4992^2, 8.4 and
// 7.4. docs/benchmarks.md, "Random block-cyclic pairs: one dim unlike".)
bool CopySchedule::ReadsLinesInParts() const {
  for (const ScheduledCopy& c : strided_) {
    const CopyOp& op = *c.op;
    if (op.run_bytes < 64) return true;
    if (op.run_bytes <= 4096 && !WholeLines(c, true)) return true;
  }
  return false;
}

// Orders the copies of each destination group (`chains`, of up to
// `max_copies` copies) whose copies are
// all rows of one dim, of runs not all whole lines, some a line or more,
// by where they lie along a row: the offset of their first byte within
// its row, as a fraction of the row, in the source plus in the target (for
// block-cyclic layouts, the global column). A turn then sweeps each
// sender's row and each target's row once, in order, where in
// destination order a joined group's turn swept every sender's rows again
// for each target, in pieces, out of the order the hardware's prefetchers
// follow (f32 24x24 blocks on 2x4 into 32x32 on 1x8, 5760^2: runs of 32 to
// 96 bytes, a turn writing eight targets' rows from four senders' rows,
// 11.1 ms a run, 7.0 so; f64 100x100 on 4x2 into 200x200 on 4x2 8.4 and
// 5.0; on the ranks, medians of 3 alternated runs in a build with the order
// switched, not kept; docs/benchmarks.md, "Random block-cyclic pairs:
// copies along rows"). Runs under a line (8x8 blocks: turns writing pieces
// of many targets' lines by turns, with streaming stores), whole lines
// (16x16 f64 blocks into 32x32), and copies of two dims (the canonical
// case) ran up to twice as long so, and keep destination order.
void CopySchedule::OrderAlongRows(const std::vector<Chain>& chains, size_t max_copies) {
  auto along = [](const ScheduledCopy& c) {
    const CopyOp& op = *c.op;
    const CopyDim& d = c.program->dims[static_cast<size_t>(op.first_dim)];
    auto fraction = [](int64_t at, int64_t stride) {
      return stride > 0 ? static_cast<double>(at % stride) / static_cast<double>(stride) : 0.0;
    };
    return fraction(c.src_delta + op.src_offset, d.src_stride) + fraction(op.dst_offset, d.dst_stride);
  };
  std::vector<std::pair<double, ScheduledCopy>> keyed;
  for (const Chain& g : chains) {
    if (g.end - g.begin < 2 || g.end - g.begin > max_copies) continue;  // (a longer one runs in batches, in order)
    bool one_dim = true, whole_lines = true, long_runs = false;
    for (size_t k = g.begin; k < g.end && one_dim; ++k) {
      one_dim = strided_[k].op->num_dims == 1;
      long_runs = long_runs || strided_[k].op->run_bytes >= 64;
      whole_lines = whole_lines && WholeLines(strided_[k], false);
    }
    if (!one_dim || whole_lines || !long_runs) continue;
    keyed.clear();
    for (size_t k = g.begin; k < g.end; ++k) keyed.emplace_back(along(strided_[k]), strided_[k]);
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = g.begin; k < g.end; ++k) strided_[k] = keyed[k - g.begin].second;
  }
}

// Joins destination groups (`chains`, ranges of strided_ in destination
// order) whose copies read overlapping source spans into one group each,
// the joined groups' copies in destination order (the chains of apart
// copies, last, as they are); groups that would join
// into more than `max_copies` copies stay apart, as do the chains of
// copies from `first_apart` on (spans apart: Group).
// Runs under a line: in f32 8x8 blocks into 64x64, each target's group
// reads every other line of a sender's rows and the other target's group
// the lines between, at another time; joined, a turn writes both targets'
// rows and reads each sender's lines in order. On the ranks, 64 MiB, 2
// threads: 9.4 ms a run a group at a time, 2.8 joined; bf16 (16-byte runs,
// 32 MiB) 4.6 and 2.0 (bench/inprocess_other_cases.sh). In slices of
// groups likewise: the canonical case in f32 with x = 8 (32-byte runs, 128
// MiB) 26 ms a run, 9.7 joined; in bf16 with x = 4, 64 MiB, 7.8 and 5.4.
void CopySchedule::JoinBySource(std::vector<Chain>& chains, size_t max_copies, size_t first_apart) {
  const size_t n = strided_.size();
  std::vector<uint32_t> chain_of(n), root(chains.size());
  for (size_t g = 0; g < chains.size(); ++g) {
    root[g] = static_cast<uint32_t>(g);
    for (size_t k = chains[g].begin; k < chains[g].end; ++k) chain_of[k] = static_cast<uint32_t>(g);
  }
  auto find = [&](uint32_t g) {
    while (root[g] != g) g = root[g] = root[root[g]];
    return g;
  };
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), uint32_t{0});
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return FirstByte(strided_[a], /*by_source=*/true) < FirstByte(strided_[b], /*by_source=*/true);
  });
  bool joined = false;
  int32_t buffer = -1;
  int64_t reach = 0;
  uint32_t head = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = order[i];
    if (k >= first_apart) continue;
    const Span s = SourceSpan(strided_[k]);
    if (i == 0 || s.buffer != buffer || s.begin >= reach) {
      head = k, buffer = s.buffer, reach = s.end;
      continue;
    }
    reach = std::max(reach, s.end);
    const uint32_t a = find(chain_of[head]), b = find(chain_of[k]);
    if (a != b) root[std::max(a, b)] = std::min(a, b), joined = true;  // a group's root: its first chain
  }
  if (!joined) return;
  std::vector<size_t> copies(chains.size(), 0);
  for (size_t g = 0; g < chains.size(); ++g) copies[find(static_cast<uint32_t>(g))] += chains[g].end - chains[g].begin;
  // Each joined group's chains in their order, the groups in the order of
  // their first chains; a chain of a group too large, a group of its own.
  std::vector<std::vector<uint32_t>> members(chains.size());
  for (size_t g = 0; g < chains.size(); ++g) {
    const uint32_t r = find(static_cast<uint32_t>(g));
    members[copies[r] > max_copies ? g : r].push_back(static_cast<uint32_t>(g));
  }
  Arrange(chains, members);
}

void CopySchedule::Arrange(std::vector<Chain>& chains, const std::vector<std::vector<uint32_t>>& groups) {
  std::vector<ScheduledCopy> arranged;
  arranged.reserve(strided_.size());
  std::vector<Chain> ranges;
  for (const std::vector<uint32_t>& m : groups) {
    if (m.empty()) continue;
    const size_t begin = arranged.size();
    for (uint32_t g : m)
      arranged.insert(arranged.end(), strided_.begin() + static_cast<std::ptrdiff_t>(chains[g].begin),
                      strided_.begin() + static_cast<std::ptrdiff_t>(chains[g].end));
    ranges.push_back({begin, arranged.size()});
  }
  strided_.swap(arranged);
  chains.swap(ranges);
}

// Moves each chain of apart copies (`chains` from `first_apart` on, after
// the others: Group) to run right after the latest, in run order, of the
// groups with a copy whose first byte (by source: first byte read) lies in
// its buffer before its span ends; one that no such group precedes, first.
// The target lines it writes (the ends of the rows it crosses; by source,
// the source lines it reads) were then touched a moment before, not a pass
// beyond the caches earlier. f32 8x8 blocks on 2x4 into 128x128 on 8x1,
// 5053^2 (the last block column's 20-byte strips of 8 rows): the pair's
// copies replayed outside reshard (a harness not kept; 2 threads, batches
// as the schedule's) took 7.3 ms a pass with each strip after its eighth
// row's group against 7.7 to 8.3 after every group, 7.4 without the strips; in `reshard run`
// on the ranks the gain is within this machine's spread (the runs' ratios'
// medians 0.93, 1.00 and 0.97 in three sets of 15 to 25 alternated runs).
void CopySchedule::PlaceApart(std::vector<Chain>& chains, size_t first_apart, bool by_source) {
  const size_t others = static_cast<size_t>(
      std::partition_point(chains.begin(), chains.end(), [&](const Chain& c) { return c.begin < first_apart; }) -
      chains.begin());
  if (others == 0 || others == chains.size()) return;
  // The others' copies by first byte, each with the latest chain among
  // them and the copies before it in its buffer. (A group joined by source
  // holds copies of several buffers: a copy of an earlier buffer says
  // nothing of when this one's lines were written.)
  std::vector<std::pair<std::pair<int32_t, int64_t>, size_t>> starts;
  starts.reserve(first_apart);
  for (size_t g = 0; g < others; ++g)
    for (size_t k = chains[g].begin; k < chains[g].end; ++k) starts.emplace_back(FirstByte(strided_[k], by_source), g);
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i)
    if (starts[i].first.first == starts[i - 1].first.first)
      starts[i].second = std::max(starts[i].second, starts[i - 1].second);
  // after[g]: the chain an apart chain g runs after, plus one (0: first).
  std::vector<size_t> after(chains.size(), 0);
  for (size_t g = others; g < chains.size(); ++g) {
    std::pair<int32_t, int64_t> end{INT32_MIN, 0};
    for (size_t k = chains[g].begin; k < chains[g].end; ++k) {
      const Span s = by_source ? SourceSpan(strided_[k]) : DestinationSpan(strided_[k]);
      end = std::max(end, std::pair(s.buffer, s.end));
    }
    const auto at = std::lower_bound(starts.begin(), starts.end(), std::pair(end, size_t{0}));
    after[g] = at == starts.begin() || std::prev(at)->first.first != end.first ? 0 : std::prev(at)->second + 1;
  }
  std::vector<uint32_t> order(chains.size());
  std::iota(order.begin(), order.end(), uint32_t{0});
  // (Stable: apart chains after the same group keep their order, after it.)
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const size_t ka = a < others ? a + 1 : after[a], kb = b < others ? b + 1 : after[b];
    return std::pair(ka, a >= others) < std::pair(kb, b >= others);
  });
  std::vector<std::vector<uint32_t>> groups;
  groups.reserve(order.size());
  for (uint32_t g : order) groups.push_back({g});
  Arrange(chains, groups);
}

int64_t CopySchedule::StridedTasks() const {
  const int64_t groups = static_cast<int64_t>(tasks_.size());
  switch (mode_) {
    case Mode::kSlices:
      return slices_;
    case Mode::kSlicedGroups:
      return slices_ * groups;
    case Mode::kGroups:
    case Mode::kSourceGroups:
      return groups;
  }
  return groups;
}

int64_t CopySchedule::groups() const {
  int64_t n = static_cast<int64_t>(batched_.size());
  for (const Task& t : tasks_) n += t.parts > 0 && t.part == 0;
  return n;
}

int64_t CopySchedule::tasks() const { return StridedTasks() + static_cast<int64_t>(chunks_.size()); }

void CopySchedule::Run(ThreadPool& pool, std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts) const {
  pool.ParallelFor(tasks(), [&](int64_t k) { RunTask(k, srcs, dsts); });
}

void CopySchedule::RunTask(int64_t k, std::span<const std::byte* const> srcs, std::span<std::byte* const> dsts) const {
  auto src_of = [&](const ScheduledCopy& c) { return srcs[static_cast<size_t>(c.src)] + c.src_delta; };
  auto dst_of = [&](const ScheduledCopy& c) { return dsts[static_cast<size_t>(c.dst)]; };
  const int64_t groups = static_cast<int64_t>(tasks_.size());
  const int64_t first = StridedTasks();
  // Part `part` of `parts` of strided_[begin, end), interleaved; true
  // where it streamed, unfenced (the caller fences).
  auto interleave = [&](size_t begin, size_t end, int64_t part, int64_t parts) {
    thread_local std::vector<CopyRange> ranges;
    ranges.clear();
    for (size_t i = begin; i < end; ++i) {
      const ScheduledCopy& c = strided_[i];
      ranges.push_back({c.program, c.op, src_of(c), dst_of(c), 0, c.units});
    }
    return RunInterleavedUnfenced(ranges, part, parts, strided_bytes_, /*by_source=*/mode_ == Mode::kSourceGroups);
  };
  if (k < first) {
    // Every kind of task fences once, after all its streaming stores (a
    // fence waits for the core's write-combining buffers to drain:
    // RunInterleavedUnfenced says what one a group had cost a batch).
    bool streamed = false;
    switch (mode_) {
      case Mode::kSlices:
        for (const ScheduledCopy& c : strided_) {
          const int64_t lo = c.units * k / slices_, hi = c.units * (k + 1) / slices_;
          if (hi > lo) streamed = RunCopyUnfenced(*c.program, *c.op, src_of(c), dst_of(c), lo, hi) || streamed;
        }
        break;
      case Mode::kSlicedGroups: {
        // Slice by slice, every group's part of it: the threads work on one
        // slice at once (1.13 of memcpy against 0.94 at 256 MiB with each
        // thread a slice of its own, every group of it in turn).
        const Task& t = tasks_[static_cast<size_t>(k % groups)];
        streamed = interleave(t.begin, t.end, k / groups, slices_);
        break;
      }
      case Mode::kGroups:
      case Mode::kSourceGroups: {
        const Task& t = tasks_[static_cast<size_t>(k)];
        if (t.parts > 0) {
          streamed = interleave(t.begin, t.end, t.part, t.parts);
          break;
        }
        // A batch: its groups begin at batched_[t.part], ... until t.end.
        for (size_t g = static_cast<size_t>(t.part); g < batched_.size() && batched_[g] < t.end; ++g)
          streamed = interleave(batched_[g],
                                g + 1 < batched_.size() && batched_[g + 1] < t.end ? batched_[g + 1] : t.end, 0, 1) ||
                     streamed;
        break;
      }
    }
    if (streamed) FenceStreamingStores();
    return;
  }
  const ChunkTask& t = chunks_[static_cast<size_t>(k - first)];
  if (t.lo >= 0) {
    const ScheduledCopy& c = contiguous_[t.begin];
    RunCopy(*c.program, *c.op, src_of(c), dst_of(c), t.lo, t.hi);
    return;
  }
  for (size_t i = t.begin; i < t.end; ++i) {
    const ScheduledCopy& c = contiguous_[i];
    RunCopy(*c.program, *c.op, src_of(c), dst_of(c), 0, c.units);
  }
}

}  // namespace reshard
