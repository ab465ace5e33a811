// The execution checker: tags computed from global indices, coverage counted
// from the program's copies, every step's output compared with its layout.
#include "exec/exec_checker.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <numeric>
#include <vector>

#include "exec/reduce_kernel.h"
#include "exec/thread_pool.h"
#include "plan/parts_into_memo.h"

namespace reshard {
namespace {

constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;

void Tag(int64_t g, int64_t eb, std::byte* out) {
  const uint64_t v = (static_cast<uint64_t>(g) + 1) * kMul;
  std::memcpy(out, &v, static_cast<size_t>(std::min<int64_t>(eb, 8)));
  if (eb > 8) {
    const uint64_t hi = static_cast<uint64_t>(g) + 1;
    std::memcpy(out + 8, &hi, static_cast<size_t>(std::min<int64_t>(eb - 8, 8)));
  }
}

// Calls f(local element index, global row-major index) for every element of
// device's local buffer, in local order. Each dim's part of the tile is held
// as runs of global indices (adjacent cells merged): memory in the tile's
// cells, not its elements (per element it took 8 bytes: 1.6 GB for a 1-D
// array of 200M elements).
template <typename F>
void ForEachLocal(const Layout& l, int64_t device, F&& f) {
  struct Run {
    int64_t lo, hi;
  };
  const int64_t t = l.TileOf(device);
  if (t < 0) return;
  const std::vector<int32_t> coords = l.TileCoords(t);
  const size_t rank = static_cast<size_t>(l.rank());
  std::vector<std::vector<Run>> runs(rank);
  std::vector<int64_t> stride(rank, 1);
  int64_t s = 1;
  for (size_t d = rank; d-- > 0;) {
    const std::vector<int64_t>& cuts = l.dim(static_cast<int64_t>(d)).cuts;
    for (int32_t k : l.TileCells(static_cast<int64_t>(d), coords[d])) {
      const int64_t lo = cuts[static_cast<size_t>(k)], hi = cuts[static_cast<size_t>(k) + 1];
      if (lo == hi) continue;
      if (!runs[d].empty() && runs[d].back().hi == lo)
        runs[d].back().hi = hi;
      else
        runs[d].push_back({lo, hi});
    }
    if (runs[d].empty()) return;
    stride[d] = s;
    s *= l.shape()[d];
  }
  if (rank == 0) {
    f(0, 0);
    return;
  }
  // An odometer over the outer dims: per dim, its run and global index.
  std::vector<size_t> run(rank, 0);
  std::vector<int64_t> g(rank);
  for (size_t d = 0; d < rank; ++d) g[d] = runs[d][0].lo;
  const std::vector<Run>& inner = runs[rank - 1];
  int64_t local = 0;
  while (true) {
    int64_t base = 0;
    for (size_t d = 0; d + 1 < rank; ++d) base += g[d] * stride[d];
    for (const Run& r : inner)
      for (int64_t x = r.lo; x < r.hi; ++x) f(local++, base + x);
    size_t d = rank - 1;
    while (true) {
      if (d == 0) return;
      --d;
      if (++g[d] < runs[d][run[d]].hi) break;
      if (++run[d] < runs[d].size()) {
        g[d] = runs[d][run[d]].lo;
        break;
      }
      run[d] = 0;
      g[d] = runs[d][0].lo;
    }
  }
}

// Whether part p < parts - 1 of element g is off by one (TagScheme).
int64_t Wobble(int64_t g, int64_t p) {
  uint64_t x = (static_cast<uint64_t>(g) + 1) * kMul ^ (static_cast<uint64_t>(p) + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<int64_t>((x >> 7) & 1u);
}

// Sum parts wobble only where parts + 1s stay well inside the exact range.
bool SumWobbles(DType dtype, int64_t parts) { return 4 * parts <= ExactIntegers(dtype); }

// The number element g holds in a source of reduction `r` on a device of
// part `part`.
int64_t NumberOf(const Reduction& r, DType dtype, int64_t part, int64_t g, const TagScheme& scheme) {
  const int64_t n = g % scheme.modulus + 1;
  if (r.parts < 2) return n;
  const int64_t parts = r.parts;
  const bool last = part + 1 == parts;
  switch (r.op) {
    case ReduceOp::kAvg: return n;
    case ReduceOp::kMax: return last ? n : n - Wobble(g, part);
    case ReduceOp::kMin: return last ? n : n + Wobble(g, part);
    case ReduceOp::kSum: {
      if (!SumWobbles(dtype, parts)) return last ? n : 0;
      if (!last) return Wobble(g, part);
      int64_t rest = n;
      for (int64_t q = 0; q + 1 < parts; ++q) rest -= Wobble(g, q);
      return rest;
    }
  }
  return n;
}

// The expected bytes of element g in a source layout (its device's part).
void ExpectSource(const Layout& layout, int64_t part, int64_t g, const TagScheme& scheme, int64_t eb, std::byte* out) {
  if (scheme.modulus == 0)
    Tag(g, eb, out);
  else
    StoreNumber(NumberOf(layout.reduction(), layout.dtype(), part, g, scheme), layout.dtype(), out);
}

// The expected bytes of element g in a target layout: a partial target's
// device of part `part` holds the source's parts routed to it, combined in
// part order, or the identity where none is.
void ExpectTarget(const Layout& layout, const std::vector<int64_t>& routed, int64_t g,
                  const TagScheme& scheme, int64_t eb, std::byte* out) {
  if (!layout.partial()) return ExpectSource(layout, 0, g, scheme, eb, out);  // the reduced value
  if (routed.empty()) return StoreIdentity(scheme.routes.fill, layout.dtype(), out);
  if (scheme.modulus == 0) return Tag(g, eb, out);  // the source had no reduction: its one part, copied
  const int64_t scale = scheme.routes.scale;  // an avg target's parts hold their share times its part count
  if (scheme.routed_reduced)
    return StoreNumber(NumberOf(Reduction{}, layout.dtype(), 0, g, scheme) * scale, layout.dtype(), out);
  int64_t v = 0;
  for (size_t i = 0; i < routed.size(); ++i) {
    const int64_t x = NumberOf(scheme.source, layout.dtype(), routed[i], g, scheme);
    v = i == 0 ? x : CombineNumbers(v, x, scheme.routes.combine);
  }
  if (scheme.routes.combine == ReduceOp::kAvg) v /= scheme.source.parts;
  StoreNumber(v * scale, layout.dtype(), out);
}

// The scheme of a reshard from `source` whose partial target's values come
// by `routes` (from `tiles` where they route tile by tile), from a plain
// layout the plan reduced the source onto where `routed_reduced`.
TagScheme SchemeWithRoutes(const Layout& source, PartRoutes routes, std::optional<Layout> tiles, bool routed_reduced) {
  TagScheme scheme;
  scheme.source = source.reduction();
  scheme.routes = std::move(routes);
  scheme.tiles = std::move(tiles);
  scheme.routed_reduced = routed_reduced;
  // Numbers where values combine: from partial sums, or into an avg target
  // whose parts scale what they hold (bit tags would not survive it).
  const int64_t scale = scheme.routes.scale;
  if (!source.partial() && scale == 1) return scheme;
  const int64_t exact = ExactIntegers(source.dtype()), parts = source.reduction().parts;
  int64_t m = exact - 1;  // a plain source's, and max's and min's
  if (source.partial()) {
    if (source.reduction().op == ReduceOp::kSum) m = SumWobbles(source.dtype(), parts) ? exact / 2 : exact;
    if (source.reduction().op == ReduceOp::kAvg) m = exact / parts;  // parts * n stays exact
  }
  scheme.modulus = std::max<int64_t>(1, m / scale);  // scale * n stays exact too
  return scheme;
}

}  // namespace

TagScheme TagSchemeFor(const Layout& source, const Layout& target, const Layout& routes_from) {
  PartRoutes routes = Exchange::RouteParts(routes_from, target);
  std::optional<Layout> tiles;
  if (routes.tile_to) tiles = routes_from;
  return SchemeWithRoutes(source, std::move(routes), std::move(tiles), !(routes_from == source) && !routes_from.partial());
}

void FillTags(const Layout& layout, int64_t device, std::span<std::byte> buffer, const TagScheme& scheme) {
  const int64_t eb = layout.element_bytes();
  const int64_t part = layout.PartOf(device);
  ForEachLocal(layout, device, [&](int64_t i, int64_t g) { ExpectSource(layout, part, g, scheme, eb, buffer.data() + i * eb); });
}

TagCheck CheckTags(const Layout& layout, int64_t device, std::span<const std::byte> buffer, const TagScheme& scheme) {
  const int64_t eb = layout.element_bytes();
  TagCheck r;
  if (static_cast<int64_t>(buffer.size()) != layout.LocalBytes(device)) {
    r.mismatches = 1;
    r.first_problem = fmt::format("device {} holds {} bytes; its layout needs {}", device, buffer.size(), layout.LocalBytes(device));
    return r;
  }
  std::byte want[16];
  const int64_t part = layout.PartOf(device);
  const bool per_element = layout.partial() && scheme.tiles.has_value();  // tile routes
  std::vector<int64_t> routed = layout.partial() && !per_element ? scheme.routes.PartsInto(part) : std::vector<int64_t>{};
  ForEachLocal(layout, device, [&](int64_t i, int64_t g) {
    ++r.checked;
    if (per_element) routed = scheme.routes.PartsAt(*scheme.tiles, part, layout.TileOf(device), g);
    ExpectTarget(layout, routed, g, scheme, eb, want);
    if (std::memcmp(want, buffer.data() + i * eb, static_cast<size_t>(eb)) != 0) {
      if (r.mismatches++ == 0)
        r.first_problem = fmt::format("device {} element {} (global index {}) holds a wrong value", device, i, g);
    }
  });
  return r;
}

namespace {

// Adds to writes[e] each time ops [lo, hi) of `p` write element e of dp's
// output; an error where one writes outside it.
Status CountWrites(const CopyProgram& p, size_t lo, size_t hi, const DeviceProgram& dp, int64_t eb, int64_t step,
                   std::vector<int32_t>& writes) {
  for (size_t k = lo; k < hi; ++k) {
    const CopyOp& op = p.ops[k];
    int64_t rows = 1;
    for (int32_t d = 0; d < op.num_dims; ++d) rows *= p.dims[static_cast<size_t>(op.first_dim + d)].count;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off = op.dst_offset, rem = r;
      for (int32_t d = op.num_dims - 1; d >= 0; --d) {
        const CopyDim& c = p.dims[static_cast<size_t>(op.first_dim + d)];
        off += (rem % c.count) * c.dst_stride;
        rem /= c.count;
      }
      if (off < 0 || off + op.run_bytes > dp.output_bytes)
        return Status::InvalidArgument(fmt::format("step {}: device {} writes bytes [{}, {}) of a {}-byte output", step,
                                                   dp.device, off, off + op.run_bytes, dp.output_bytes));
      for (int64_t b = off; b < off + op.run_bytes; b += eb) ++writes[static_cast<size_t>(b / eb)];
    }
  }
  return Status::Ok();
}

// Whether `copies` (dp.unpack or dp.direct) was compiled (CompileOptions::copies).
bool Compiled(const PlanProgram& program, const DeviceProgram& dp, const CopyProgram& copies) {
  return &copies == &dp.unpack ? program.has_staged_copies() : program.has_direct_copies();
}

}  // namespace

Status CheckCoverage(const PlanProgram& program) {
  const int64_t eb = program.element_bytes();
  for (size_t si = 0; si < program.steps().size(); ++si) {
    const int64_t parts = program.steps()[si].reduction.parts;  // 1 unless the step reduces
    const bool by_parts = program.steps()[si].by_parts;
    const int relay_round = program.steps()[si].relay_round;
    // The parts each device must get: the routes from this step's input to its output.
    const Layout& out = program.layouts()[si + 1];
    const PartRoutes routes =
        by_parts && relay_round != 1 ? Exchange::RouteParts(program.layouts()[si], out) : PartRoutes{};
    if (relay_round == 1) {
      // A relayed exchange's round 1: each device's own values written once
      // (its local copies), each relay's piece combined at most once.
      // (What the pieces add up to is the tags' check at the keepers.)
      for (const DeviceProgram& dp : program.steps()[si].devices) {
        std::vector<int32_t> writes(static_cast<size_t>(dp.output_bytes / eb), 0);
        RESHARD_RETURN_IF_ERROR(CountWrites(dp.local, 0, dp.local.ops.size(), dp, eb, static_cast<int64_t>(si), writes));
        for (size_t e = 0; e < writes.size(); ++e)
          if (writes[e] != 1)
            return Status::InvalidArgument(fmt::format("step {}: device {}'s own element {} is written {} times", si,
                                                       dp.device, e, writes[e]));
        if ((!dp.local.ops.empty() && !dp.local_writes) || std::any_of(dp.recv_writes.begin(), dp.recv_writes.end(), [](uint8_t w) { return w != 0; }))
          return Status::InvalidArgument(fmt::format("step {}: device {} overwrites its own values with a relay's piece", si,
                                                     dp.device));
        // (Pieces from several donors may meet on an element: each is
        // another part, combined once.)
        for (const auto& [moved, begin] : {std::pair(&dp.unpack, &dp.unpack_begin), std::pair(&dp.direct, &dp.direct_begin)}) {
          if (!Compiled(program, dp, *moved)) continue;
          for (size_t m = 0; m + 1 < begin->size(); ++m) {
            std::fill(writes.begin(), writes.end(), 0);
            RESHARD_RETURN_IF_ERROR(CountWrites(*moved, static_cast<size_t>((*begin)[m]), static_cast<size_t>((*begin)[m + 1]),
                                                dp, eb, static_cast<int64_t>(si), writes));
            for (size_t e = 0; e < writes.size(); ++e)
              if (writes[e] > 1)
                return Status::InvalidArgument(fmt::format("step {}: device {}'s element {} gets device {}'s relayed piece "
                                                           "{} times", si, dp.device, e,
                                                           program.devices()[static_cast<size_t>(dp.recv_peer[m])], writes[e]));
          }
        }
      }
      continue;
    }
    PartsIntoMemo into(routes);
    if (const GroupCopies* gc = program.steps()[si].group_copies.get()) {
      // Written per group pattern: each receiver class's copies from every
      // member fill its (common) output once, in each form compiled (a
      // reducing step's, once per part). A device of each class of each
      // pattern, in the pattern's first group.
      const int64_t k = gc->group_size;
      std::vector<bool> seen(gc->pair_bytes.size() / static_cast<size_t>(k), false);  // per pair row
      for (size_t g = 0; g < gc->pattern_of.size(); ++g) {
        for (int64_t m = 0; m < k; ++m) {
          const size_t index = static_cast<size_t>(gc->members[g * static_cast<size_t>(k) + static_cast<size_t>(m)]);
          const GroupCopies::Pattern& pat = gc->PatternOf(index);
          const size_t row = gc->Pair(pat, m, 0) / static_cast<size_t>(k);
          if (seen[row]) continue;
          seen[row] = true;
          const DeviceProgram& dp = program.steps()[si].devices[index];
          // The direct copies, and the staged form's unpacks with the local
          // copies, each part's boxes (the one part where the step does not
          // reduce): exactly the parts routed to a receiver that keeps
          // elements reach it, ranked as their parts order them, the
          // lowest part's boxes writing.
          const Layout& in = program.layouts()[si];
          std::vector<int64_t> member_part(static_cast<size_t>(k), -1);
          std::vector<std::pair<int64_t, int32_t>> ranked;  // (part, rank) of the members sending it a box
          for (int64_t sm = 0; sm < k && gc->parts > 1; ++sm) {
            const size_t from = static_cast<size_t>(gc->members[g * static_cast<size_t>(k) + static_cast<size_t>(sm)]);
            member_part[static_cast<size_t>(sm)] = in.PartOf(program.devices()[from]);
            if (gc->pair_bytes[gc->Pair(pat, m, sm)] > 0)
              ranked.emplace_back(member_part[static_cast<size_t>(sm)], pat.part_rank[static_cast<size_t>(sm)]);
          }
          std::sort(ranked.begin(), ranked.end());
          ranked.erase(std::unique(ranked.begin(), ranked.end()), ranked.end());
          std::vector<int64_t> parts;
          for (size_t j = 0; j < ranked.size(); ++j) {
            parts.push_back(ranked[j].first);
            // One rank a part, in the parts' order, from 0.
            if (static_cast<size_t>(ranked[j].second) != j)
              return Status::InvalidArgument(fmt::format("step {}: device {} applies part {} {}th, not {}th", si, dp.device,
                                                         ranked[j].first, ranked[j].second, j));
          }
          if (gc->parts > 1 && dp.output_bytes > 0) {
            const std::vector<int64_t> routed = routes.PartsInto(out.partial() ? out.PartOf(dp.device) : -1);
            if (parts != routed)
              return Status::InvalidArgument(fmt::format("step {}: device {} gets {} parts, not the {} routed to it", si,
                                                         dp.device, parts.size(), routed.size()));
          }
          if (parts.empty()) parts = {-1};
          for (const bool staged : {false, true})
            for (const int64_t part : parts) {
              if (staged ? !gc->has_staged() : !gc->has_direct) continue;
              std::vector<int32_t> writes(static_cast<size_t>(dp.output_bytes / eb), 0);
              for (int64_t sm = 0; sm < k; ++sm) {
                if (part >= 0 && member_part[static_cast<size_t>(sm)] != part) continue;
                const bool unpack = staged && sm != m;
                const size_t cs = gc->Pair(pat, m, sm);
                const auto [lo, hi] = unpack ? std::pair(gc->unpack_begin[cs], gc->unpack_begin[cs + 1]) : gc->Ops(cs);
                RESHARD_RETURN_IF_ERROR(CountWrites(unpack ? gc->unpack : gc->copies, static_cast<size_t>(lo),
                                                    static_cast<size_t>(hi), dp, eb, static_cast<int64_t>(si), writes));
              }
              for (size_t e = 0; e < writes.size(); ++e)
                if (writes[e] != 1)
                  return Status::InvalidArgument(fmt::format("step {}: device {}'s output element {} is written {} times{}{}",
                                                             si, dp.device, e, writes[e], staged ? " (staged)" : "",
                                                             part >= 0 ? fmt::format(" by part {}", part) : ""));
            }
        }
      }
      continue;
    }
    for (const DeviceProgram& dp : program.steps()[si].devices) {
      std::vector<int32_t> writes(static_cast<size_t>(dp.output_bytes / eb), 0);
      // Adds the writes of ops [lo, hi) of `p`; an error where one leaves the output.
      auto count = [&](const CopyProgram& p, size_t lo, size_t hi) -> Status {
        return CountWrites(p, lo, hi, dp, eb, static_cast<int64_t>(si), writes);
      };
      if (by_parts && routes.tile_to) {
        // Tile routes: the identity where no part's tile reaches, elsewhere
        // each element written once by the writing copies (the first part
        // routed to it), and by each part's copies at most once (for the
        // staged and the direct copies alike); values are CheckTags'.
        if (out.TileOf(dp.device) >= 0 && routes.Fills(out, dp.device) == dp.fill.ops.empty())
          return Status::InvalidArgument(fmt::format("step {}: device {} is {}filled with the identity", si, dp.device,
                                                     dp.fill.ops.empty() ? "not " : ""));
        for (const auto& [moved, begin] : {std::pair(&dp.unpack, &dp.unpack_begin), std::pair(&dp.direct, &dp.direct_begin)}) {
          if (!Compiled(program, dp, *moved)) continue;
          // Adds the writes of part `part`'s copies (every part's where
          // negative), or of its writing copies alone.
          auto count_part = [&, moved = moved, begin = begin](int64_t part, bool writers_only) -> Status {
            if ((part < 0 || dp.local_part == part) && (!writers_only || dp.local_writes))
              RESHARD_RETURN_IF_ERROR(count(dp.local, 0, dp.local.ops.size()));
            for (size_t m = 0; m + 1 < begin->size(); ++m)
              if ((part < 0 || dp.recv_part[m] == part) && (!writers_only || dp.recv_writes[m]))
                RESHARD_RETURN_IF_ERROR(count(*moved, static_cast<size_t>((*begin)[m]), static_cast<size_t>((*begin)[m + 1])));
            return Status::Ok();
          };
          std::fill(writes.begin(), writes.end(), 0);
          RESHARD_RETURN_IF_ERROR(count(dp.fill, 0, dp.fill.ops.size()));
          RESHARD_RETURN_IF_ERROR(count_part(-1, /*writers_only=*/true));
          for (size_t e = 0; e < writes.size(); ++e)
            if (writes[e] != 1)
              return Status::InvalidArgument(fmt::format("step {}: device {}'s output element {} is written {} times "
                                                         "(fill and first parts' copies)", si, dp.device, e, writes[e]));
          // Each part's copies land exactly where it is routed, and write
          // exactly where it is the first part routed (values alone would
          // not show a lost max or min part that never wins). Elements by
          // their global index where the buffer is tight and row-major.
          const bool tight = !(si + 1 == program.steps().size()) || program.target_format().tight_row_major();
          std::vector<std::vector<int64_t>> routed;  // per local element, the parts routed to it
          if (tight)
            ForEachLocal(out, dp.device, [&](int64_t, int64_t g) {
              routed.push_back(routes.PartsAt(program.layouts()[si], out.PartOf(dp.device), out.TileOf(dp.device), g));
            });
          std::vector<int32_t> first(writes.size(), 0);
          for (int64_t part = 0; part < parts; ++part) {
            std::fill(writes.begin(), writes.end(), 0);
            RESHARD_RETURN_IF_ERROR(count_part(part, /*writers_only=*/true));
            first.swap(writes);
            std::fill(writes.begin(), writes.end(), 0);
            RESHARD_RETURN_IF_ERROR(count_part(part, /*writers_only=*/false));
            for (size_t e = 0; e < writes.size(); ++e) {
              int32_t want = writes[e] > 1 ? 1 : writes[e], want_first = first[e];
              if (tight && e < routed.size()) {
                const std::vector<int64_t>& at = routed[e];
                want = std::find(at.begin(), at.end(), part) != at.end();
                want_first = !at.empty() && at.front() == part;
              }
              if (writes[e] != want || first[e] != want_first)
                return Status::InvalidArgument(fmt::format(
                    "step {}: device {}'s output element {} gets part {} {} times ({} as its first part), not {} ({})",
                    si, dp.device, e, part, writes[e], first[e], want, want_first));
            }
          }
        }
        continue;
      }
      // Per part (a reducing step combines one contribution of each part
      // that reaches the device), and for the staged and the direct copies
      // of the messages alike; a device no part reaches, by its fill.
      for (const auto& [moved, begin] : {std::pair(&dp.unpack, &dp.unpack_begin), std::pair(&dp.direct, &dp.direct_begin)}) {
        if (!Compiled(program, dp, *moved)) continue;
        std::vector<bool> reaches(static_cast<size_t>(parts), !by_parts);
        if (!dp.local.ops.empty() && dp.local_part < parts) reaches[static_cast<size_t>(dp.local_part)] = true;
        // (A relay's piece reaches the keeper inside its helper's message.)
        for (int64_t part : dp.relayed_part) reaches[static_cast<size_t>(part)] = true;
        for (size_t m = 0; m + 1 < begin->size(); ++m)
          if ((*begin)[m] < (*begin)[m + 1]) reaches[static_cast<size_t>(dp.recv_part.empty() ? 0 : dp.recv_part[m])] = true;
        const bool reached = std::find(reaches.begin(), reaches.end(), true) != reaches.end();
        if (reached && !dp.fill.ops.empty())
          return Status::InvalidArgument(fmt::format("step {}: device {} is filled with the identity and also receives parts", si, dp.device));
        if (by_parts && out.TileOf(dp.device) >= 0 && !writes.empty()) {
          // Exactly the routed parts reach the device (every part where the output is not partial).
          const int64_t q = out.partial() ? out.PartOf(dp.device) : -1;
          const std::vector<int64_t>& routed = into.Into(q);
          std::vector<bool> want(static_cast<size_t>(parts), false);
          for (int64_t p : routed) want[static_cast<size_t>(p)] = true;
          if (want != reaches)
            return Status::InvalidArgument(fmt::format("step {}: device {} does not get exactly the parts routed to it", si,
                                                       dp.device));
          if (routes.Fills(out, dp.device) == dp.fill.ops.empty())
            return Status::InvalidArgument(fmt::format("step {}: device {} is {}filled with the identity, but {} part is "
                                                       "routed to it", si, dp.device, dp.fill.ops.empty() ? "not " : "",
                                                       routed.empty() ? "no" : "a"));
        }
        if (!reached && !dp.fill.ops.empty()) {
          std::fill(writes.begin(), writes.end(), 0);
          RESHARD_RETURN_IF_ERROR(count(dp.fill, 0, dp.fill.ops.size()));
          for (size_t e = 0; e < writes.size(); ++e)
            if (writes[e] != 1)
              return Status::InvalidArgument(fmt::format("step {}: device {}'s output element {} is filled {} times", si,
                                                         dp.device, e, writes[e]));
          continue;
        }
        if (!reached && !writes.empty())
          return Status::InvalidArgument(fmt::format("step {}: device {}'s output is never written", si, dp.device));
        for (int64_t part = 0; part < parts; ++part) {
          if (!reaches[static_cast<size_t>(part)]) continue;
          std::fill(writes.begin(), writes.end(), 0);
          if (dp.local_part == part) RESHARD_RETURN_IF_ERROR(count(dp.local, 0, dp.local.ops.size()));
          for (size_t m = 0; m + 1 < begin->size(); ++m)
            if ((dp.recv_part.empty() ? 0 : dp.recv_part[m]) == part)
              RESHARD_RETURN_IF_ERROR(count(*moved, static_cast<size_t>((*begin)[m]), static_cast<size_t>((*begin)[m + 1])));
          for (size_t k = 0; k < dp.relayed_part.size(); ++k)
            if (dp.relayed_part[k] == part) RESHARD_RETURN_IF_ERROR(count(dp.relayed, k, k + 1));
          for (size_t e = 0; e < writes.size(); ++e)
            if (writes[e] != 1)
              return Status::InvalidArgument(
                  parts > 1 ? fmt::format("step {}: device {}'s output element {} is written {} times by part {}", si,
                                          dp.device, e, writes[e], part)
                            : fmt::format("step {}: device {}'s output element {} is written {} times", si, dp.device, e,
                                          writes[e]));
        }
      }
    }
  }
  return Status::Ok();
}

bool TargetValuesStated(const Layout& source, const Layout& target, const Layout& routes_from) {
  if (!target.partial() || routes_from == source || !routes_from.partial()) return true;
  // Parts moved alike: every device holds the part it held in the source.
  if (!source.partial() || !(routes_from.reduction() == source.reduction()) || routes_from.devices() != source.devices())
    return false;
  for (int64_t d : source.devices())
    if (routes_from.TileOf(d) >= 0 && routes_from.PartOf(d) != source.PartOf(d)) return false;
  return true;
}

std::optional<PartRoutes> ComposedRoutes(std::span<const Layout* const> chain) {
  if (chain.size() < 2) return std::nullopt;
  const Layout& source = *chain.front();
  const ReduceOp op = source.reduction().op;
  if (!source.partial() || op == ReduceOp::kAvg) return std::nullopt;
  std::vector<int64_t> at(static_cast<size_t>(source.reduction().parts));
  std::iota(at.begin(), at.end(), int64_t{0});  // each source part's part in the layout reached
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    const Layout& in = *chain[i];
    const Layout& out = *chain[i + 1];
    if (!in.partial() || !out.partial() || in.reduction().op != op || out.reduction().op != op) return std::nullopt;
    const PartRoutes r = Exchange::RouteParts(in, out);
    if (r.KeepsParts()) continue;  // (tile routes too: each tile into its own part)
    if (r.tile_to || r.scale != 1 || r.combine != op) return std::nullopt;
    for (int64_t& p : at) {
      p = r.to[static_cast<size_t>(p)];
      if (p < 0) return std::nullopt;
    }
  }
  PartRoutes routes;
  routes.to = std::move(at);
  routes.combine = op;
  routes.fill = chain.back()->reduction().op;
  return routes;
}

std::vector<const Layout*> LayoutChain(const CollectivePlan& plan) {
  std::vector<const Layout*> chain = {&plan.source()};
  for (const PlanStep& s : plan.steps()) chain.push_back(&s.output);
  if (plan.steps().empty()) chain.push_back(&plan.target());
  return chain;
}

std::vector<const Layout*> LayoutChain(const PlanProgram& program) {
  std::vector<const Layout*> chain;
  for (const Layout& l : program.layouts()) chain.push_back(&l);
  if (chain.size() == 1) chain.push_back(&program.target());
  return chain;
}

std::optional<ValueRoutes> ValueRoutesOf(std::span<const Layout* const> chain) {
  const Layout& source = *chain.front();
  const Layout& target = *chain.back();
  const Layout& last_input = *chain[chain.size() > 1 ? chain.size() - 2 : 0];
  if (TargetValuesStated(source, target, last_input))
    return ValueRoutes{&last_input, Exchange::RouteParts(last_input, target), false};
  if (std::optional<PartRoutes> composed = ComposedRoutes(chain))
    return ValueRoutes{&source, std::move(*composed), true};
  return std::nullopt;
}

namespace {

// The scheme of a plan from `source` whose target's values come by `v`.
TagScheme SchemeOfRoutes(const Layout& source, ValueRoutes v) {
  std::optional<Layout> tiles;
  if (v.routes.tile_to) tiles = *v.from;
  const bool routed_reduced = !(*v.from == source) && !v.from->partial();
  return SchemeWithRoutes(source, std::move(v.routes), std::move(tiles), routed_reduced);
}

// The scheme of a plan passing through `chain`: routes from its last step's
// input where the oracles state the target's values from there, else
// composed from the source (ValueRoutesOf); unstated, its checks report
// mismatches.
TagScheme SchemeOfChain(std::span<const Layout* const> chain) {
  const Layout& source = *chain.front();
  std::optional<ValueRoutes> v = ValueRoutesOf(chain);
  if (!v) return TagSchemeFor(source, *chain.back(), source);
  return SchemeOfRoutes(source, std::move(*v));
}

TagScheme SchemeOf(const PlanProgram& program) { return SchemeOfChain(LayoutChain(program)); }

}  // namespace

bool PlanValuesStated(const CollectivePlan& plan) { return ValueRoutesOf(LayoutChain(plan)).has_value(); }

bool PlanValuesStated(const PlanProgram& program) { return ValueRoutesOf(LayoutChain(program)).has_value(); }

TagScheme TagSchemeFor(const CollectivePlan& plan) { return SchemeOfChain(LayoutChain(plan)); }

void FillSources(const PlanProgram& program, std::span<const std::span<std::byte>> sources, int threads) {
  ThreadPool pool(threads);
  const TagScheme scheme = SchemeOf(program);
  pool.ParallelFor(static_cast<int64_t>(sources.size()),
                   [&](int64_t i) { FillTags(program.source(), program.devices()[i], sources[i], scheme); });
}

TagCheck CheckTargets(const PlanProgram& program, std::span<const std::span<const std::byte>> targets, int threads) {
  ThreadPool pool(threads);
  TagCheck all;
  std::mutex mu;
  const TagScheme scheme = SchemeOf(program);
  pool.ParallelFor(static_cast<int64_t>(targets.size()), [&](int64_t i) {
    TagCheck c = CheckTags(program.target(), program.devices()[i], targets[i], scheme);
    std::lock_guard<std::mutex> lock(mu);
    all.checked += c.checked;
    all.mismatches += c.mismatches;
    if (all.first_problem.empty()) all.first_problem = c.first_problem;
  });
  return all;
}

Result<CheckReport> RunChecked(const PlanProgram& program, int threads, Transport transport, RankChoice ranks) {
  if (!program.source_format().tight_row_major() || !program.target_format().tight_row_major())
    return Status::InvalidArgument("the checker compares tight row-major buffers; this program was compiled for other formats");
  std::optional<ValueRoutes> value_routes = ValueRoutesOf(LayoutChain(program));
  if (!value_routes)
    return Status::InvalidArgument("the checker states a partial target's values by the routes of the last step, "
                                   "from the source, from a layout without a pending reduction, or from one whose "
                                   "devices hold their source parts, or by every step's routes composed (parts "
                                   "routed whole, under one op: sum, max or min)");
  RESHARD_RETURN_IF_ERROR(CheckCoverage(program));
  const size_t n = program.devices().size();
  std::vector<std::vector<std::byte>> src(n), dst(n);
  std::vector<std::span<const std::byte>> sources(n);
  std::vector<std::span<std::byte>> targets(n);
  ThreadPool pool(threads);
  RESHARD_RETURN_IF_ERROR(pool.status());
  for (size_t i = 0; i < n; ++i) {
    src[i].resize(static_cast<size_t>(program.source().LocalBytes(program.devices()[i])));
    // Poisoned, not zeroed: a reduction that combined into its output instead
    // of writing the first part would pass on zeros.
    dst[i].assign(static_cast<size_t>(program.target().LocalBytes(program.devices()[i])), std::byte{0xA5});
    sources[i] = src[i];
    targets[i] = dst[i];
  }
  const TagScheme scheme = SchemeOfRoutes(program.source(), std::move(*value_routes));
  pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t i) { FillTags(program.source(), program.devices()[i], src[i], scheme); });
  CheckReport report;
  std::mutex mu;
  ExecOptions o;
  o.threads = threads;
  o.transport = transport;
  o.rank_transport = ranks.transport;
  o.rank_max_message_bytes = ranks.max_message_bytes;
  o.rank_priced_chunks = ranks.priced_chunks;
  o.max_scheduled_group_copies = ranks.max_scheduled_group_copies;
  o.after_step = [&](size_t step, std::span<const std::span<const std::byte>> outputs) {
    const Layout& l = program.layouts()[step + 1];
    const bool last = step + 1 == program.steps().size();
    // A partial layout a step passes through inside the plan (a reduction
    // kept pending over some axes): values are checked where the plan ends
    // (the simulator says why), sizes here.
    if (!last && l.partial()) {
      for (size_t i = 0; i < n; ++i)
        if (static_cast<int64_t>(outputs[i].size()) != l.LocalBytes(program.devices()[i])) {
          ++report.mismatches;
          if (report.first_problem.empty())
            report.first_problem = fmt::format("after step {}: device {} holds {} bytes; its layout needs {}", step,
                                               program.devices()[i], outputs[i].size(),
                                               l.LocalBytes(program.devices()[i]));
        }
      return;
    }
    pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t i) {
      TagCheck c = CheckTags(l, program.devices()[i], outputs[i], scheme);
      std::lock_guard<std::mutex> lock(mu);
      if (last) report.elements_checked += c.checked;
      report.mismatches += c.mismatches;
      if (report.first_problem.empty() && !c.first_problem.empty())
        report.first_problem = fmt::format("after step {}: {}", step, c.first_problem);
    });
  };
  std::unique_ptr<Executor> ex = MakeInProcessExecutor(o);
  RESHARD_ASSIGN_OR_RETURN(report.stats, ex->Run(program, sources, targets));
  return report;
}

}  // namespace reshard
