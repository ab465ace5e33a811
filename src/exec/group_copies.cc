// GroupCopies: a structured step's copies once per group pattern.
#include "exec/group_copies.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "plan/parts_into_memo.h"

namespace reshard {
namespace {

// Each device's one box in a layout: starts and extents by mesh position.
// False where some device's tile is several intervals along a dim (block
// cyclic).
bool Boxes(const Layout& l, const Mesh& mesh, std::vector<int64_t>& start, std::vector<int64_t>& extent) {
  const int64_t n = mesh.num_devices();
  const size_t rank = static_cast<size_t>(l.rank());
  start.assign(static_cast<size_t>(n) * rank, 0);
  extent.assign(static_cast<size_t>(n) * rank, 0);
  for (int64_t pos = 0; pos < n; ++pos) {
    const int64_t tile = l.TileOf(mesh.device(pos));
    if (tile < 0) return false;
    const std::vector<int32_t> coords = l.TileCoords(tile);
    for (size_t d = 0; d < rank; ++d) {
      // (An empty cell, as uneven shards leave, has no interval: an empty box at 0.)
      const std::vector<Interval> cells = l.TileIntervals(static_cast<int64_t>(d), coords[d]);
      if (cells.size() > 1) return false;
      start[static_cast<size_t>(pos) * rank + d] = cells.empty() ? 0 : cells[0].lo;
      extent[static_cast<size_t>(pos) * rank + d] = cells.empty() ? 0 : cells[0].size();
    }
  }
  return true;
}

}  // namespace

DeviceProgram GroupDeviceProgram(const GroupCopies& gc, const DeviceProgram& dp, size_t index) {
  DeviceProgram p;
  p.device = dp.device;
  p.input_bytes = dp.input_bytes;
  p.output_bytes = dp.output_bytes;
  const GroupCopies::Pattern& pat = gc.PatternOf(index);
  const int64_t k = gc.group_size, g = gc.group[index], r = gc.member[index];
  // The group's other members by program index (messages ascend by peer).
  std::vector<std::pair<int32_t, int64_t>> peers;  // (index, member)
  for (int64_t m = 0; m < k; ++m)
    if (m != r) peers.emplace_back(gc.members[static_cast<size_t>(g * k + m)], m);
  std::sort(peers.begin(), peers.end());
  // Sends: a box of its class to each peer, staged once per class, the
  // boxes laid out in the order their first messages come.
  std::vector<int32_t> first_of_class(static_cast<size_t>(pat.classes), -1);
  for (const auto& [peer, t] : peers) {
    const int32_t c = pat.receiver_class[static_cast<size_t>(t)];
    const size_t pair = gc.Pair(pat, t, r);
    const int64_t lo = gc.pack_begin[pair], hi = gc.pack_begin[pair + 1], bytes = gc.pair_bytes[pair];
    if (bytes == 0) continue;
    const int32_t m = static_cast<int32_t>(p.send_peer.size());
    int32_t& owner = first_of_class[static_cast<size_t>(c)];
    if (owner < 0) {
      owner = m;
      p.send_offset.push_back(p.send_bytes);
      p.send_bytes += bytes;
    } else {
      p.send_offset.push_back(p.send_offset[static_cast<size_t>(owner)]);
    }
    p.send_peer.push_back(peer);
    p.send_count.push_back(bytes);
    p.pack_owner.push_back(owner);
    p.pack_begin.push_back(static_cast<int32_t>(p.pack.ops.size()));
    p.pack.Append(gc.pack, lo, hi, 0, p.send_offset.back() - gc.stage_offset[pair]);
  }
  // Receives: member s's box of this device's class, one after another.
  for (const auto& [peer, sm] : peers) {
    const size_t pair = gc.Pair(pat, r, sm);
    const int64_t bytes = gc.pair_bytes[pair];
    if (bytes == 0) continue;
    p.recv_peer.push_back(peer);
    p.recv_count.push_back(bytes);
    p.recv_offset.push_back(p.recv_bytes);
    p.recv_peer_offset.push_back(-1);  // (as where the sender's program is not compiled)
    p.unpack_begin.push_back(static_cast<int32_t>(p.unpack.ops.size()));
    p.direct_begin.push_back(0);
    p.unpack.Append(gc.unpack, gc.unpack_begin[pair], gc.unpack_begin[pair + 1], p.recv_bytes, 0);
    p.recv_bytes += bytes;
    if (gc.parts > 1) {  // its sender's part's rank in the group, which orders them; rank 0 writes
      p.recv_part.push_back(pat.part_rank[static_cast<size_t>(sm)]);
      p.recv_writes.push_back(pat.Writes(sm));
    }
  }
  const size_t own = gc.Pair(pat, r, r);
  p.local.Append(gc.copies, gc.begin[own], gc.begin[own + 1]);
  if (gc.parts > 1) {
    p.local_part = pat.part_rank[static_cast<size_t>(r)];
    p.local_writes = pat.Writes(r);
  }
  p.pack_begin.push_back(static_cast<int32_t>(p.pack.ops.size()));
  p.unpack_begin.push_back(static_cast<int32_t>(p.unpack.ops.size()));
  p.direct_begin.push_back(0);
  return p;
}

std::optional<GroupCopies> MakeGroupCopies(const Mesh& mesh, const std::vector<int32_t>& axes, const Layout& in,
                                           const Layout& out, std::span<const int64_t> devices,
                                           const BufferFormat& in_format, const BufferFormat& out_format,
                                           bool direct, const BufferFormat* staging, bool with_copies) {
  const int64_t n = mesh.num_devices();
  if (axes.empty() || in.rank() == 0 || in.rank() != out.rank() || (out.partial() && !in.partial())) return std::nullopt;
  // A partial input's parts are routed whole (Exchange::RouteParts): into a
  // target with no reduction every part to every device; into a partial
  // one, each part to one target part (below: each group's to its own).
  std::optional<PartRoutes> routes;
  if (out.partial()) {
    routes = Exchange::RouteParts(in, out);
    if (routes->tile_to) return std::nullopt;
  }
  if (static_cast<int64_t>(devices.size()) != n || static_cast<int64_t>(in.devices().size()) != n ||
      static_cast<int64_t>(out.devices().size()) != n || !mesh.HasDevices(devices))
    return std::nullopt;
  const size_t rank = static_cast<size_t>(in.rank());
  std::vector<int64_t> in_start, in_extent, out_start, out_extent;
  if (!Boxes(in, mesh, in_start, in_extent) || !Boxes(out, mesh, out_start, out_extent)) return std::nullopt;

  GroupCopies gc;
  gc.has_direct = direct;
  gc.parts = in.reduction().parts;

  const int64_t k = mesh.GroupSize(axes);
  gc.group_size = k;
  const int64_t groups = n / k;
  // Groups numbered in order of their first position; members by position.
  std::vector<int64_t> member_pos(static_cast<size_t>(n));
  std::vector<int32_t> group_id(static_cast<size_t>(n), -1);
  gc.group.assign(static_cast<size_t>(n), 0);
  gc.member.assign(static_cast<size_t>(n), 0);
  gc.members.assign(static_cast<size_t>(n), 0);
  int32_t next = 0;
  for (int64_t pos = 0; pos < n; ++pos) {
    const size_t head = static_cast<size_t>(mesh.GroupOf(pos, axes));
    if (group_id[head] < 0) group_id[head] = next++;
    const int64_t g = group_id[head], m = mesh.MemberIndex(pos, axes);
    const int64_t device = mesh.device(pos);
    const int64_t index = PositionIn(devices, device);
    member_pos[static_cast<size_t>(g * k + m)] = pos;
    gc.members[static_cast<size_t>(g * k + m)] = static_cast<int32_t>(index);
    gc.group[static_cast<size_t>(index)] = static_cast<int32_t>(g);
    gc.member[static_cast<size_t>(index)] = static_cast<int32_t>(m);
  }
  if (next != groups) return std::nullopt;
  auto at = [rank](const std::vector<int64_t>& start, int64_t pos, size_t d) {
    return start[static_cast<size_t>(pos) * rank + d];
  };
  // Whether position `pos`'s box holds elements. (An empty tile's holders
  // are all part 0 of it: they hold nothing, whatever part they stand in.)
  auto holds = [&](const std::vector<int64_t>& extent, int64_t pos) {
    for (size_t d = 0; d < rank; ++d)
      if (at(extent, pos, d) == 0) return false;
    return true;
  };
  // A reducing step: per position, its part's rank among the parts its
  // group's members hold (dense, from 0; the members holding elements
  // only), the order its receivers apply the parts in, rank 0's writing.
  // Ranks, not parts, are what groups share: groups of one pattern may
  // hold different parts (into a partial target, each group its own).
  // Into a partial target, each group's receivers hold one target part q
  // and its senders' parts are all routed to q, and those are all the
  // parts routed to q: each receiver takes a box of every part of its
  // group, as into a target with no reduction.
  std::vector<int32_t> part_rank(gc.parts > 1 ? static_cast<size_t>(n) : 0, 0);
  std::vector<int64_t> parts_in(static_cast<size_t>(groups), gc.parts);  // per group: the parts routed to its receivers
  if (gc.parts > 1) {
    std::optional<PartsIntoMemo> routed_into;
    if (routes) routed_into.emplace(*routes);
    std::vector<int64_t> held;
    for (int64_t g = 0; g < groups; ++g) {
      held.clear();
      for (int64_t m = 0; m < k; ++m) {
        const int64_t pos = member_pos[static_cast<size_t>(g * k + m)];
        if (holds(in_extent, pos)) held.push_back(in.PartOf(mesh.device(pos)));
      }
      std::sort(held.begin(), held.end());
      held.erase(std::unique(held.begin(), held.end()), held.end());
      for (int64_t m = 0; m < k; ++m) {
        const int64_t pos = member_pos[static_cast<size_t>(g * k + m)];
        if (holds(in_extent, pos))
          part_rank[static_cast<size_t>(pos)] = static_cast<int32_t>(
              std::lower_bound(held.begin(), held.end(), in.PartOf(mesh.device(pos))) - held.begin());
      }
      if (!routes) continue;
      int64_t q = -1;
      for (int64_t m = 0; m < k; ++m) {
        const int64_t pos = member_pos[static_cast<size_t>(g * k + m)];
        if (!holds(out_extent, pos)) continue;
        if (q >= 0 && out.PartOf(mesh.device(pos)) != q) return std::nullopt;
        q = out.PartOf(mesh.device(pos));
      }
      if (q < 0) {
        parts_in[static_cast<size_t>(g)] = 0;  // (no receiver keeps an element)
        continue;
      }
      for (int64_t part : held)
        if (routes->to[static_cast<size_t>(part)] != q) return std::nullopt;
      const int64_t routed = static_cast<int64_t>(routed_into->Into(q).size());
      // (A target part no part is routed to holds the identity: a fill, which
      // patterns do not write.)
      if (routed == 0 || routed != static_cast<int64_t>(held.size())) return std::nullopt;
      parts_in[static_cast<size_t>(g)] = routed;
    }
  }
  // Groups whose members' boxes are alike (each member's extents, and its
  // boxes' offsets from the group's first input box, on both sides) share a
  // pattern: each such group is its pattern's first group shifted by one
  // offset, so member s's box into member r sits at the same places in
  // their buffers. Even shards give one pattern; uneven ones as many as
  // the groups fall differently (the last group of an uneven split).
  gc.pattern_of.assign(static_cast<size_t>(groups), -1);
  std::vector<int64_t> first_group;  // per pattern
  {
    std::unordered_map<uint64_t, std::vector<int32_t>> by_hash;  // signature hash -> patterns
    auto signature = [&](int64_t g, size_t m, size_t d, int part) {
      const int64_t pos = member_pos[static_cast<size_t>(g * k) + m], base = member_pos[static_cast<size_t>(g * k)];
      switch (part) {
        case 0: return at(in_start, pos, d) - at(in_start, base, d);
        case 1: return at(in_extent, pos, d);
        case 2: return at(out_start, pos, d) - at(in_start, base, d);
        case 3: return at(out_extent, pos, d);
        case 4: return static_cast<int64_t>(part_rank[static_cast<size_t>(pos)]);  // (the same for every d)
        default: return parts_in[static_cast<size_t>(g)];
      }
    };
    const int signatures = gc.parts > 1 ? 6 : 4;
    for (int64_t g = 0; g < groups; ++g) {
      uint64_t h = 1469598103934665603ull;
      for (size_t m = 0; m < static_cast<size_t>(k); ++m)
        for (size_t d = 0; d < rank; ++d)
          for (int part = 0; part < signatures; ++part) h = (h ^ static_cast<uint64_t>(signature(g, m, d, part))) * 1099511628211ull;
      std::vector<int32_t>& candidates = by_hash[h];
      for (int32_t p : candidates) {
        bool same = true;
        for (size_t m = 0; m < static_cast<size_t>(k) && same; ++m)
          for (size_t d = 0; d < rank && same; ++d)
            for (int part = 0; part < signatures && same; ++part)
              same = signature(g, m, d, part) == signature(first_group[static_cast<size_t>(p)], m, d, part);
        if (same) {
          gc.pattern_of[static_cast<size_t>(g)] = p;
          break;
        }
      }
      if (gc.pattern_of[static_cast<size_t>(g)] < 0) {
        gc.pattern_of[static_cast<size_t>(g)] = static_cast<int32_t>(first_group.size());
        candidates.push_back(static_cast<int32_t>(first_group.size()));
        first_group.push_back(g);
      }
    }
  }
  const int64_t eb = in.element_bytes();
  // A position's extents.
  auto extents = [rank](const std::vector<int64_t>& extent, int64_t pos) {
    return std::span<const int64_t>(extent.data() + static_cast<size_t>(pos) * rank, rank);
  };
  int64_t extent[kMaxRank];
  for (const int64_t ref : first_group) {
    GroupCopies::Pattern& pat = gc.patterns.emplace_back();
    pat.pairs_at = static_cast<int64_t>(gc.pair_bytes.size());
    auto pos_of = [&](int64_t m) { return member_pos[static_cast<size_t>(ref * k + m)]; };
    // One holder per input tile (of each part) within a group (distinct
    // tiles are disjoint grid cells), so each element a receiver needs (of
    // each part) has one sender there.
    {
      std::vector<std::pair<int32_t, int64_t>> tiles;  // (part rank, tile), of the tiles holding elements
      for (int64_t m = 0; m < k; ++m)
        if (holds(in_extent, pos_of(m)))
          tiles.emplace_back(gc.parts > 1 ? part_rank[static_cast<size_t>(pos_of(m))] : 0, in.TileOf(mesh.device(pos_of(m))));
      std::sort(tiles.begin(), tiles.end());
      if (std::adjacent_find(tiles.begin(), tiles.end()) != tiles.end()) return std::nullopt;
      pat.parts_in = gc.parts > 1 ? parts_in[static_cast<size_t>(ref)] : 1;
      if (gc.parts > 1) {
        // A receiver applies its boxes in part order; rank 0's write.
        pat.part_rank.resize(static_cast<size_t>(k));
        for (int64_t m = 0; m < k; ++m) pat.part_rank[static_cast<size_t>(m)] = part_rank[static_cast<size_t>(pos_of(m))];
        pat.part_order.resize(static_cast<size_t>(k));
        std::iota(pat.part_order.begin(), pat.part_order.end(), 0);
        std::stable_sort(pat.part_order.begin(), pat.part_order.end(), [&](int32_t a, int32_t b) {
          return pat.part_rank[static_cast<size_t>(a)] < pat.part_rank[static_cast<size_t>(b)];
        });
      }
    }
    // Receiver classes: members of the first group with one output tile.
    std::unordered_map<int64_t, int32_t> class_of_tile;
    std::vector<int64_t> representative;  // per class, its first member
    pat.receiver_class.resize(static_cast<size_t>(k));
    for (int64_t m = 0; m < k; ++m) {
      const int64_t tile = out.TileOf(mesh.device(pos_of(m)));
      auto [it, fresh] = class_of_tile.emplace(tile, static_cast<int32_t>(representative.size()));
      if (fresh) representative.push_back(m);
      pat.receiver_class[static_cast<size_t>(m)] = it->second;
    }
    pat.classes = static_cast<int32_t>(representative.size());
    std::vector<int64_t> class_size(representative.size(), 0);
    for (int32_t c : pat.receiver_class) ++class_size[static_cast<size_t>(c)];
    const size_t pairs = static_cast<size_t>(pat.classes * k);
    // Per pair (class, sender): the box's bytes; its copies where asked. A
    // member stages its box for each class with a receiver other than
    // itself, once, class after class (the pairs go class by class).
    gc.pair_bytes.resize(gc.pair_bytes.size() + pairs, 0);
    if (staging != nullptr) {
      gc.stage_offset.resize(gc.pair_bytes.size(), -1);
      pat.staged.assign(static_cast<size_t>(k), 0);
    }
    std::vector<std::vector<int64_t>> in_strides(static_cast<size_t>(k));  // per sender member
    for (int32_t c = 0; c < pat.classes; ++c) {
      const int64_t r = pos_of(representative[static_cast<size_t>(c)]);
      const std::vector<int64_t> out_strides = out_format.Strides(extents(out_extent, r));
      int64_t out_volume = 1, covered = 0;
      for (int64_t e : extents(out_extent, r)) out_volume *= e;
      for (int64_t s = 0; s < k; ++s) {
        const size_t pair = static_cast<size_t>(pat.pairs_at) + static_cast<size_t>(c * k + s);
        gc.begin.push_back(static_cast<int64_t>(gc.copies.ops.size()));
        if (staging != nullptr) {
          gc.unpack_begin.push_back(static_cast<int64_t>(gc.unpack.ops.size()));
          gc.pack_begin.push_back(static_cast<int64_t>(gc.pack.ops.size()));
        }
        const int64_t sp = pos_of(s);
        if (in_strides[static_cast<size_t>(s)].empty())
          in_strides[static_cast<size_t>(s)] = in_format.Strides(extents(in_extent, sp));
        const std::vector<int64_t>& in_str = in_strides[static_cast<size_t>(s)];
        int64_t volume = 1, src = 0, dst = 0;
        for (size_t d = 0; d < rank; ++d) {
          const int64_t lo = std::max(at(in_start, sp, d), at(out_start, r, d));
          const int64_t hi = std::min(at(in_start, sp, d) + at(in_extent, sp, d), at(out_start, r, d) + at(out_extent, r, d));
          extent[d] = std::max<int64_t>(0, hi - lo);
          volume *= extent[d];
          src += (lo - at(in_start, sp, d)) * in_str[d] * eb;
          dst += (lo - at(out_start, r, d)) * out_strides[d] * eb;
        }
        if (volume == 0) continue;
        covered += volume;
        gc.pair_bytes[pair] = volume * eb;
        const std::span<const int64_t> box(extent, rank);
        // (The staged form alone needs the direct copies of local pairs only.)
        const bool local = pat.receiver_class[static_cast<size_t>(s)] == c;
        if (with_copies && (direct || local)) gc.copies.AddBox(box, src, in_str, dst, out_strides, eb);
        if (staging == nullptr || class_size[static_cast<size_t>(c)] == (local ? 1 : 0)) continue;
        gc.stage_offset[pair] = pat.staged[static_cast<size_t>(s)];
        pat.staged[static_cast<size_t>(s)] += volume * eb;
        if (!with_copies) continue;
        const std::vector<int64_t> staged = staging->Strides(box);
        gc.pack.AddBox(box, src, in_str, gc.stage_offset[pair], staged, eb);
        gc.unpack.AddBox(box, 0, staged, dst, out_strides, eb);
      }
      // Every element of the receiver's box comes from its group, once of
      // each part routed to it (distinct tiles of a part are disjoint).
      if (covered != out_volume * pat.parts_in) return std::nullopt;
    }
    // What each member's messages carry: a box to every receiver of a class
    // but itself.
    pat.sent.assign(static_cast<size_t>(k), 0);
    pat.received.assign(static_cast<size_t>(k), 0);
    auto bytes_of = [&](int64_t c, int64_t s) { return gc.pair_bytes[static_cast<size_t>(pat.pairs_at + c * k + s)]; };
    std::vector<int64_t> class_bytes(static_cast<size_t>(pat.classes), 0);  // into one receiver, local copies included
    for (int32_t c = 0; c < pat.classes; ++c)
      for (int64_t s = 0; s < k; ++s) class_bytes[static_cast<size_t>(c)] += bytes_of(c, s);
    for (int64_t s = 0; s < k; ++s) {
      const int32_t own = pat.receiver_class[static_cast<size_t>(s)];
      for (int32_t c = 0; c < pat.classes; ++c)
        pat.sent[static_cast<size_t>(s)] += (class_size[static_cast<size_t>(c)] - (c == own)) * bytes_of(c, s);
      pat.received[static_cast<size_t>(s)] = class_bytes[static_cast<size_t>(own)] - bytes_of(own, s);
    }
  }
  gc.begin.push_back(static_cast<int64_t>(gc.copies.ops.size()));
  if (staging != nullptr) {
    gc.unpack_begin.push_back(static_cast<int64_t>(gc.unpack.ops.size()));
    gc.pack_begin.push_back(static_cast<int64_t>(gc.pack.ops.size()));
  }
  return gc;
}

bool GroupPatternKind(const PlanStep& ps, const Layout& in) {
  switch (ps.op) {
    case StepOp::kAllGather:
    case StepOp::kAllToAll: return in == ps.input;
    case StepOp::kReduceScatter: return in.partial() && in == ps.input;
    // Its reducing half from the input, or the gathering of its ring pieces.
    case StepOp::kAllReduce: {
      if (in == ps.input) return in.partial();
      const std::optional<Layout> pieces = RingPieces(ps);
      return pieces && in == *pieces;
    }
    default: return false;
  }
}

std::optional<int64_t> GroupCopyPairs(const CollectivePlan& plan, size_t step) {
  if (step >= plan.steps().size() || !plan.mesh()) return std::nullopt;
  const PlanStep& s = plan.steps()[step];
  auto pairs = [&](const Layout& in, const Layout& out) -> std::optional<int64_t> {
    if (!GroupPatternKind(s, in)) return std::nullopt;
    const std::optional<GroupCopies> gc = MakeGroupCopies(*plan.mesh(), s.group_axes, in, out, plan.devices(), {}, {},
                                                          true, nullptr, /*with_copies=*/false);
    if (!gc) return std::nullopt;
    return gc->Pairs();
  };
  // An all-reduce runs as two program steps through its ring pieces: both
  // written per pattern, or counted per message.
  if (const std::optional<Layout> pieces = RingPieces(s)) {
    const std::optional<int64_t> a = pairs(s.input, *pieces), b = pairs(*pieces, s.output);
    if (!a || !b) return std::nullopt;
    return *a + *b;
  }
  return pairs(s.input, s.output);
}

namespace {

// The bytes ops [lo, hi) of `prog` copy, or -1 where one reads outside
// [0, src_end) or writes outside [dst_lo, dst_end): a group copy's bounds.
int64_t RangeBytes(const CopyProgram& prog, int64_t lo, int64_t hi, int64_t src_end, int64_t dst_lo, int64_t dst_end) {
  int64_t bytes = 0;
  for (int64_t o = lo; o < hi; ++o) {
    const CopyOp& op = prog.ops[static_cast<size_t>(o)];
    if (op.src_offset < 0 || op.dst_offset < dst_lo || prog.SrcEnd(op) > src_end || prog.DstEnd(op) > dst_end) return -1;
    bytes += prog.OpBytes(op);
  }
  return bytes;
}

}  // namespace

Status CheckGroupCopyBounds(const GroupCopies& gc, std::span<const DeviceProgram> devices, size_t si) {
  const int64_t k = gc.group_size;
  std::vector<int64_t> first_group(gc.patterns.size(), -1);
  for (size_t g = gc.pattern_of.size(); g-- > 0;) first_group[static_cast<size_t>(gc.pattern_of[g])] = static_cast<int64_t>(g);
  for (size_t pi = 0; pi < gc.patterns.size(); ++pi) {
    const GroupCopies::Pattern& pat = gc.patterns[pi];
    const size_t base = static_cast<size_t>(first_group[pi] * k);
    // Per pair (class, sender), with the class's first member as its
    // receiver (a class's members' outputs are one size).
    std::vector<int64_t> first(static_cast<size_t>(pat.classes), -1), size(static_cast<size_t>(pat.classes), 0);
    for (int64_t m = k - 1; m >= 0; --m) {
      first[static_cast<size_t>(pat.receiver_class[static_cast<size_t>(m)])] = m;
      ++size[static_cast<size_t>(pat.receiver_class[static_cast<size_t>(m)])];
    }
    for (int32_t c = 0; c < pat.classes; ++c)
      for (int64_t sm = 0; sm < k; ++sm) {
        const DeviceProgram &to = devices[static_cast<size_t>(gc.members[base + static_cast<size_t>(first[static_cast<size_t>(c)])])],
                           &from = devices[static_cast<size_t>(gc.members[base + static_cast<size_t>(sm)])];
        const size_t pair = gc.PairOfClass(pat, c, sm);
        const bool own = pat.receiver_class[static_cast<size_t>(sm)] == c;
        const int64_t box_bytes = gc.pair_bytes[pair];
        bool inside = true;
        // The direct copies (in the staged form alone, the local ones only).
        if (gc.has_direct || own)
          inside &= RangeBytes(gc.copies, gc.begin[pair], gc.begin[pair + 1], from.input_bytes, 0, to.output_bytes) ==
                    box_bytes;
        // The staged box's pack and unpack, where a receiver other than the sender takes it.
        if (gc.has_staged() && size[static_cast<size_t>(c)] > own && box_bytes > 0) {
          const int64_t at = gc.stage_offset[pair];
          inside &= at >= 0 &&
                    RangeBytes(gc.unpack, gc.unpack_begin[pair], gc.unpack_begin[pair + 1], box_bytes, 0,
                                to.output_bytes) == box_bytes &&
                    RangeBytes(gc.pack, gc.pack_begin[pair], gc.pack_begin[pair + 1], from.input_bytes, at,
                                at + box_bytes) == box_bytes;
        }
        if (!inside)
          return Status::Internal(fmt::format("step {}: the group copy from device {} into device {} is out of bounds",
                                              si, from.device, to.device));
      }
  }
  return Status::Ok();
}

}  // namespace reshard
