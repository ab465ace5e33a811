// The execution checker's coverage (exec_checker.h, CheckCoverage): how
// often each output element of every step is written, counted from the
// program's copies alone, before anything runs.
#include "exec/exec_checker.h"

#include <algorithm>
#include <fmt/format.h>
#include <utility>
#include <vector>

#include "exec/local_elements.h"
#include "plan/parts_into_memo.h"

namespace reshard {

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

}  // namespace reshard
