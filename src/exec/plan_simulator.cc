// The reference simulator for collective plans: runs every step's SPMD
// program on virtual devices, op by op, with tagged elements, and checks
// each step's result against the step's stated output layout.
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <optional>
#include <stdexcept>
#include <string>
#include <fmt/format.h>

#include "exec/block_copy.h"
#include "exec/exec_checker.h"
#include "exec/reduce_kernel.h"
#include "exec/simulator.h"
#include "plan/parts_into_memo.h"
#include "plan/relay.h"

namespace reshard {
namespace {

using Tag = uint64_t;  // global row-major index + 1; 0 = padding or never written

struct Buffer {
  std::vector<int64_t> shape;
  std::vector<Tag> data;
};

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// Per local dim, the global index of each local position (-1: padding).
std::vector<std::vector<int64_t>> LocalToGlobal(const Layout& l, int64_t device, const std::vector<int64_t>& shape) {
  std::vector<std::vector<int64_t>> out(l.rank());
  const int64_t t = l.TileOf(device);
  for (int64_t d = 0; d < l.rank(); ++d) {
    if (t >= 0) {
      const int32_t coord = l.TileCoords(t)[d];
      for (int32_t k : l.TileCells(d, coord))
        for (int64_t g = l.dim(d).cuts[k]; g < l.dim(d).cuts[k + 1]; ++g) out[d].push_back(g);
    }
    out[d].resize(std::max<int64_t>(shape[d], static_cast<int64_t>(out[d].size())), -1);
  }
  return out;
}

// Partial values: part p of the element tagged t, chosen so that `op` over
// the parts gives t back exactly (in 64-bit modular arithmetic: avg divides
// a sum that is parts * t), while a part lost, doubled or taken from the
// wrong device changes the result. Sum parts are pseudo-random but for the
// last, which makes up the rest.
Tag Mix(Tag t, int64_t p) {
  uint64_t x = t * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(p + 1) * 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 31;
  return (x | 1u) << 8;
}
Tag PartValue(Tag t, int64_t p, int64_t parts, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      if (p + 1 < parts) return Mix(t, p);
      Tag rest = op == ReduceOp::kAvg ? t * static_cast<Tag>(parts) : t;
      for (int64_t q = 0; q + 1 < parts; ++q) rest -= Mix(t, q);
      return rest;
    }
    case ReduceOp::kMax: return p + 1 < parts ? t - 1 : t;
    case ReduceOp::kMin: return p + 1 < parts ? t + 1 : t;
  }
  return t;
}

// The tags of the elements `device` holds of `layout` in a buffer of
// `shape` (padding positions 0), before any partial value is taken
// (PlanRun::ValueOf); nullopt if the layout's shard does not fit.
std::optional<std::vector<Tag>> Expected(const Layout& l, int64_t device, const std::vector<int64_t>& shape) {
  const auto map = LocalToGlobal(l, device, shape);
  for (int64_t d = 0; d < l.rank(); ++d)
    if (static_cast<int64_t>(map[d].size()) > shape[d]) return std::nullopt;
  std::vector<Tag> out = {1};  // accumulates global row-major offsets + 1 (0 marks padding)
  int64_t stride = 1;
  std::vector<int64_t> strides(l.rank(), 1);
  for (int64_t d = l.rank() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= l.shape()[d];
  }
  for (int64_t d = 0; d < l.rank(); ++d) {
    std::vector<Tag> next;
    next.reserve(out.size() * shape[d]);
    for (Tag base : out)
      for (int64_t i = 0; i < shape[d]; ++i) {
        const int64_t g = map[d][i];
        next.push_back(base == 0 || g < 0 ? 0 : base + static_cast<Tag>(g * strides[d]));
      }
    out = std::move(next);
  }
  return out;
}

// What a partial target's buffers start as (no element's value).
constexpr Tag kNeverWritten = 0xDEADBEEFDEADBEEFull;

// The identity of `op` among tags.
Tag Identity(ReduceOp op) { return op == ReduceOp::kMin ? std::numeric_limits<Tag>::max() : 0; }

std::vector<int64_t> Strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

// Copies the box [0, box) of `in` (origin `from` in it) to `out` (origin `to`).
void CopyBox(const Buffer& in, const std::vector<int64_t>& from, Buffer& out, const std::vector<int64_t>& to,
             const std::vector<int64_t>& box) {
  if (Product(box) == 0) return;
  const auto si = Strides(in.shape), so = Strides(out.shape);
  std::vector<int64_t> idx(box.size(), 0);
  const size_t rank = box.size();
  while (true) {
    int64_t a = 0, b = 0;
    for (size_t d = 0; d < rank; ++d) {
      a += (from[d] + idx[d]) * si[d];
      b += (to[d] + idx[d]) * so[d];
    }
    out.data[b] = in.data[a];
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++idx[d] < box[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

class PlanRun {
 public:
  PlanRun(const CollectivePlan& plan, SimulationReport& report)
      : plan_(plan),
        report_(report),
        via_(plan.source()) {
    if (plan.mesh()) positions_.emplace(*plan.mesh());
    // Where the target's values are stated: from the last step's input, or
    // (a plan that reduced some axes first) by routes composed from the source.
    // (Unstated, Execute reports it before any value is asked.)
    if (std::optional<ValueRoutes> v = ValueRoutesOf(LayoutChain(plan))) {
      via_ = *v->from;
      routes_ = std::move(v->routes);
      stated_ = true;
    }
  }

  PlanRun(const PlanRun&) = delete;  // into_ points at routes_
  PlanRun& operator=(const PlanRun&) = delete;

  // The value `device` holds of the element tagged t in `layout`: the tag,
  // or where the layout is partial its part: the source's (PartValue), or a
  // partial target's, the parts of the last step's input (the source, or a
  // plain layout the plan reduced onto) routed to it (at this element, with
  // tile routes) combined (or the identity where none is).
  Tag ValueOf(const Layout& l, int64_t device, Tag t) {
    if (!l.partial() || t == 0) return t;
    if (l == plan_.source()) {
      const Reduction& r = plan_.source().reduction();
      return PartValue(t, l.PartOf(device), r.parts, r.op);
    }
    const Reduction& r = via_.reduction();
    const int64_t q = l.PartOf(device);
    std::vector<int64_t> at;  // with tile routes, this element's
    if (routes_.tile_to) at = routes_.PartsAt(via_, q, l.TileOf(device), static_cast<int64_t>(t - 1));
    const std::vector<int64_t>& parts = routes_.tile_to ? at : into_.Into(q);
    if (parts.empty()) return Identity(routes_.fill);
    Tag v = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Tag p = r.parts > 1 ? PartValue(t, parts[i], r.parts, r.op) : t;
      v = i == 0 ? p : CombineNumbers(v, p, routes_.combine);
    }
    if (routes_.combine == ReduceOp::kAvg) v /= static_cast<Tag>(r.parts);
    return v * static_cast<Tag>(routes_.scale);
  }

  void Problem(const std::string& what) {
    if (report_.first_problem.empty()) report_.first_problem = what;
  }

  // Fills each device's buffer with `layout` in `shape` (or its own local shape when empty);
  // false (a mismatch counted) where a shard does not fit its buffer.
  bool Load(const Layout& layout, const std::vector<int64_t>& shape) {
    for (int64_t dev : plan_.devices()) {
      Buffer b;
      b.shape = shape.empty() ? layout.LocalShape(dev) : shape;
      // Devices holding nothing, or an empty shard (a block-cyclic shard of
      // a zero-size array keeps its blocks along the other dims): no data.
      if (layout.TileOf(dev) >= 0 && Product(b.shape) > 0) {
        std::optional<std::vector<Tag>> data = Expected(layout, dev, b.shape);
        if (!data) {
          ++report_.mismatches;
          Problem("device " + std::to_string(dev) + "'s shard does not fit its buffer");
          return false;
        }
        b.data = std::move(*data);
        for (Tag& t : b.data) t = ValueOf(layout, dev, t);
      }
      buffers_[dev] = std::move(b);
    }
    return true;
  }

  // Checks every device's buffer against `layout`; returns the mismatches.
  void Check(const PlanStep* step, const Layout& layout, bool padded, size_t step_index) {
    // A partial layout a step passes through inside the plan (a reduction
    // kept pending over some axes): its parts are numbered tile by tile, so
    // which source parts each holds is the collectives' grouping, not the
    // layout's; its values are checked where the plan ends, shapes here.
    const bool pending = step != nullptr && step_index + 1 < plan_.steps().size() && layout.partial();
    for (int64_t dev : layout.devices()) {
      if (layout.TileOf(dev) < 0) continue;
      const Buffer& b = buffers_[dev];
      const std::vector<int64_t> want_shape = padded ? b.shape : layout.LocalShape(dev);
      if (Product(want_shape) == 0 && b.data.empty()) continue;  // an empty shard: nothing to hold
      std::optional<std::vector<Tag>> want = Expected(layout, dev, want_shape);
      if (!want || (!padded && b.shape != want_shape)) {
        ++report_.mismatches;
        Problem(fmt::format("step {}: device {} holds a buffer of shape [{}], which cannot hold its shard", step_index,
                            dev, fmt::join(b.shape, ",")));
        continue;
      }
      for (size_t i = 0; i < want->size() && !pending; ++i) {
        if ((*want)[i] == 0) continue;  // padding: any value
        if (!step) ++report_.elements_checked;  // counted once, at the end
        if (b.data[i] != ValueOf(layout, dev, (*want)[i])) {
          ++report_.mismatches;
          Problem(fmt::format("after step {} ({}): device {} position {} holds {} instead of {}global element {}",
                              step_index, step ? StepOpName(step->op) : "start", dev, i,
                              b.data[i] == 0 ? std::string("padding") : std::to_string(b.data[i] - 1),
                              layout.partial() ? "its part of " : "", (*want)[i] - 1));
        }
      }
    }
  }

  std::vector<int64_t> Group(int64_t pos, const std::vector<int32_t>& axes) const {
    return plan_.mesh()->GroupMembers(pos, axes);
  }

  // Runs one op on every device; returns false on a malformed op.
  bool Run(const ProgramOp& op, const PlanStep& step, size_t si, std::map<int64_t, int64_t>& peak) {
    const int64_t eb = plan_.source().element_bytes();
    auto fail = [&](const std::string& why) {
      ++report_.mismatches;
      Problem(fmt::format("step {} ({}), op {}: {}", si, StepOpName(step.op), ProgramOpName(op.kind), why));
      return false;
    };
    auto hold = [&](int64_t dev, int64_t bytes) { peak[dev] = std::max(peak[dev], bytes); };
    const Mesh* mesh = plan_.mesh() ? &*plan_.mesh() : nullptr;
    std::map<int64_t, Buffer> next;
    switch (op.kind) {
      case ProgramOp::Kind::kReshape:
        for (auto& [dev, b] : buffers_) {
          if (Product(op.shape) != Product(b.shape)) return fail("reshape changes the element count");
          b.shape = op.shape;
        }
        return true;
      case ProgramOp::Kind::kTranspose:
        for (auto& [dev, b] : buffers_) {
          if (op.perm.size() != b.shape.size()) return fail("transpose of the wrong rank");
          Buffer out{op.shape, std::vector<Tag>(b.data.size())};
          const auto si_in = Strides(b.shape);
          const auto so = Strides(out.shape);
          std::vector<int64_t> idx(out.shape.size(), 0);
          for (size_t i = 0; i < out.data.size(); ++i) {
            int64_t src = 0, rem = static_cast<int64_t>(i);
            for (size_t d = 0; d < out.shape.size(); ++d) {
              const int64_t c = rem / so[d];
              rem %= so[d];
              src += c * si_in[op.perm[d]];
            }
            out.data[i] = b.data[src];
          }
          hold(dev, (Product(b.shape) + Product(out.shape)) * eb);
          b = std::move(out);
        }
        return true;
      case ProgramOp::Kind::kPad:
      case ProgramOp::Kind::kSlice:
        for (auto& [dev, b] : buffers_) {
          if (op.shape.size() != b.shape.size()) return fail("rank changes");
          std::vector<int64_t> box(op.shape.size());
          for (size_t d = 0; d < box.size(); ++d) {
            if (op.kind == ProgramOp::Kind::kPad ? op.shape[d] < b.shape[d] : op.shape[d] > b.shape[d])
              return fail(fmt::format("dim {} goes from {} to {}", d, b.shape[d], op.shape[d]));
            box[d] = std::min(op.shape[d], b.shape[d]);
          }
          Buffer out{op.shape, std::vector<Tag>(Product(op.shape), 0)};
          const std::vector<int64_t> zero(box.size(), 0);
          CopyBox(b, zero, out, zero, box);
          hold(dev, (Product(b.shape) + Product(out.shape)) * eb);
          b = std::move(out);
        }
        return true;
      case ProgramOp::Kind::kDynamicSlice:
        if (!mesh) return fail("a dynamic slice needs a mesh");
        for (auto& [dev, b] : buffers_) {
          const int64_t linear = mesh->MemberIndex(PositionOf(dev), op.axes);
          std::vector<int64_t> from(b.shape.size(), 0);
          from[op.dim] = linear * op.shape[op.dim];
          if (from[op.dim] + op.shape[op.dim] > b.shape[op.dim])
            return fail(fmt::format("device {} slices [{}, {}) of an extent of {}", dev, from[op.dim],
                                    from[op.dim] + op.shape[op.dim], b.shape[op.dim]));
          Buffer out{op.shape, std::vector<Tag>(Product(op.shape), 0)};
          CopyBox(b, from, out, std::vector<int64_t>(b.shape.size(), 0), op.shape);
          hold(dev, (Product(b.shape) + Product(out.shape)) * eb);
          b = std::move(out);
        }
        return true;
      case ProgramOp::Kind::kAllToAll:
      case ProgramOp::Kind::kAllGather:
      case ProgramOp::Kind::kReduceScatter:
      case ProgramOp::Kind::kAllReduce: {
        // Each member j's output from every member's input: chunk j of each
        // (all-to-all), the whole of each (all-gather), laid side by side;
        // or combined in member order (reduce-scatter: chunk j; all-reduce:
        // the whole), avg dividing the group's sum by its size.
        if (!mesh) return fail("a grouped collective needs a mesh");
        const bool reduces = op.kind == ProgramOp::Kind::kReduceScatter || op.kind == ProgramOp::Kind::kAllReduce;
        const bool chunked = op.kind == ProgramOp::Kind::kAllToAll || op.kind == ProgramOp::Kind::kReduceScatter;
        for (auto& [dev, b] : buffers_) {
          if (next.count(dev)) continue;
          const std::vector<int64_t> group = Group(PositionOf(dev), op.axes);
          const int64_t k = static_cast<int64_t>(group.size());
          for (int64_t pos : group) {
            const Buffer& in = buffers_.at(mesh->device(pos));
            if (in.data.size() != b.data.size()) return fail("group members hold buffers of different sizes");
            if (op.kind != ProgramOp::Kind::kAllReduce && (in.shape.empty() || in.shape[0] != (chunked ? k : 1)))
              return fail("leading dim is not the group size");
          }
          const int64_t chunk = static_cast<int64_t>(b.data.size()) / (chunked ? k : 1);
          for (int64_t j = 0; j < k; ++j) {
            Buffer out{op.shape, std::vector<Tag>(Product(op.shape))};
            if (static_cast<int64_t>(out.data.size()) != (reduces ? chunk : chunk * k))
              return fail(reduces ? "output size is not one chunk" : "output size is not group x chunk");
            const int64_t from = chunked ? j * chunk : 0;
            for (int64_t i = 0; i < k; ++i) {
              const Buffer& in = buffers_.at(mesh->device(group[i]));
              if (!reduces) {
                std::copy(in.data.begin() + from, in.data.begin() + from + chunk, out.data.begin() + i * chunk);
                continue;
              }
              for (int64_t e = 0; e < chunk; ++e)
                out.data[e] = i == 0 ? in.data[from + e] : CombineNumbers(out.data[e], in.data[from + e], op.reduce);
            }
            if (reduces && op.reduce == ReduceOp::kAvg)
              for (Tag& t : out.data) t /= static_cast<Tag>(k);
            const int64_t dj = mesh->device(group[j]);
            hold(dj, (static_cast<int64_t>(buffers_.at(dj).data.size()) + Product(op.shape)) * eb);
            next[dj] = std::move(out);
          }
        }
        buffers_ = std::move(next);
        return true;
      }
      case ProgramOp::Kind::kCollectivePermute: {
        // Positions are mesh positions, or indices into the plan's devices without a mesh.
        auto device_at = [&](int64_t p) { return mesh ? mesh->device(p) : plan_.devices().at(p); };
        next = buffers_;
        std::map<int64_t, int> targeted;
        for (const auto& [s, t] : op.pairs) {
          if (++targeted[t] > 1) return fail(fmt::format("position {} is targeted twice", t));
          next[device_at(t)] = buffers_.at(device_at(s));
        }
        for (auto& [dev, b] : buffers_) hold(dev, 2 * static_cast<int64_t>(b.data.size()) * eb);
        buffers_ = std::move(next);
        return true;
      }
      case ProgramOp::Kind::kExchange: {
        // The minimal exchange; from or to partial sums, one per source part
        // (Exchange::CreateReducing), each device combining the parts routed
        // to it in part order; a partial target's devices no part reaches
        // hold the identity.
        std::vector<Exchange> exchanges;
        const bool reducing = (step.input.partial() || step.output.partial()) && !(step.input == step.output);
        if (reducing) {
          Result<std::vector<Exchange>> parts = Exchange::CreateReducing(step.input, step.output);
          if (!parts.ok()) return fail(parts.status().message());
          exchanges = std::move(parts).value();
        } else {
          Result<Exchange> ex = Exchange::Create(step.input.WithoutReduction(), step.output.WithoutReduction());
          if (!ex.ok()) return fail(ex.status().message());
          exchanges.push_back(std::move(ex).value());
        }
        const PartRoutes routes = Exchange::RouteParts(step.input, step.output);
        // Relays (relay.h): round 1 combines each relay's piece of its
        // donor's part into its helper's values, which round 2 reads.
        if (!step.relays.empty()) {
          const Status held = RelaysHold(step.relays, exchanges, step.input, step.output);
          if (!reducing || !held.ok()) return fail(reducing ? held.message() : "relays on a step that does not reduce");
          const ReduceOp op = step.input.reduction().op == ReduceOp::kAvg ? ReduceOp::kSum : step.input.reduction().op;
          std::map<int64_t, Buffer> relayed = buffers_;
          std::map<int64_t, int64_t> round_one;  // per device, the bytes of pieces it sends or receives
          for (const Relay& r : step.relays) {
            const std::optional<DonorTransfer> piece = DonorTransferOf(exchanges, r);
            if (!piece) return fail("a relay's donor sends its keeper nothing");
            const Buffer& from = buffers_.at(r.donor);
            Buffer got = buffers_.at(r.helper);
            std::fill(got.data.begin(), got.data.end(), kNeverWritten);
            CopyRuns(TransferRuns(piece->plan, piece->transfer(), CopyKind::kLocal, RoundOneClip(r), /*into_source_tile=*/true),
                     reinterpret_cast<const std::byte*>(from.data.data()), from.shape,
                     reinterpret_cast<std::byte*>(got.data.data()), got.shape, sizeof(Tag));
            Buffer& helper = relayed.at(r.helper);
            int64_t moved = 0;
            for (size_t e = 0; e < got.data.size(); ++e)
              if (got.data[e] != kNeverWritten) helper.data[e] = CombineNumbers(helper.data[e], got.data[e], op), ++moved;
            if (moved != r.elements) return fail("a relay moves other elements than it states");
            // Its input, its copy, and every piece it receives (a donor: stages) this round.
            round_one[r.helper] += r.elements * eb;
            round_one[r.donor] += r.elements * eb;
          }
          for (const auto& [dev, bytes] : round_one)
            hold(dev, static_cast<int64_t>(2 * buffers_.at(dev).data.size()) * eb + bytes);
          buffers_ = std::move(relayed);
        }
        for (int64_t dev : plan_.devices()) {
          Buffer out;
          out.shape = Padded(step) ? step.output_shard : step.output.LocalShape(dev);
          const bool filled = reducing && routes.Fills(step.output, dev);
          // Not 0 where a partial target is made: 0 is also the identity of sum and max, so a fill left out would pass.
          const Tag blank = filled ? Identity(routes.fill) : step.output.partial() ? kNeverWritten : 0;
          if (Padded(step) || step.output.TileOf(dev) >= 0) out.data.assign(Product(out.shape), blank);
          next[dev] = std::move(out);
          hold(dev, static_cast<int64_t>(buffers_[dev].data.size() + next[dev].data.size()) * eb);
        }
        std::map<int64_t, int64_t> staged;
        StagedBoxes boxes;  // the whole plan's transfers: (sender, box) pairs
        // Per device, the elements some part has written: the first part at
        // an element writes it, later ones combine (with tile routes the
        // parts reaching a device differ from element to element).
        std::map<int64_t, std::vector<char>> written;
        for (size_t part = 0; part < exchanges.size(); ++part) {
          const ExchangePlan xp = exchanges[part].Plan();
          std::map<int64_t, Buffer> got;
          for (const Transfer& t : xp.transfers()) {
            const Buffer& in = buffers_.at(t.from);
            if (reducing && got.find(t.to) == got.end()) {
              got[t.to] = next.at(t.to);
              std::fill(got[t.to].data.begin(), got[t.to].data.end(), kNeverWritten);
            }
            Buffer& out = reducing ? got.at(t.to) : next.at(t.to);
            // A relay's donor sends its keeper what the helper does not carry.
            const RoundTwoTransfer kept = RoundTwoOf(step.relays, t);
            const int64_t elements = kept.elements;
            CopyRuns(TransferRuns(xp, t, CopyKind::kLocal, kept.clip),
                     reinterpret_cast<const std::byte*>(in.data.data()), in.shape,
                     reinterpret_cast<std::byte*>(out.data.data()), out.shape, sizeof(Tag));
            if (t.from != t.to && elements > 0) {
              if (kept.relay != nullptr || boxes.Add(t)) staged[t.from] += elements * eb;
              staged[t.to] += elements * eb;
            }
          }
          if (!reducing) continue;
          for (auto& [dev, g] : got) {
            Buffer& b = next.at(dev);
            std::vector<char>& w = written[dev];
            w.resize(b.data.size(), 0);
            for (size_t e = 0; e < b.data.size(); ++e) {
              if (g.data[e] == kNeverWritten) continue;  // not this part's here
              b.data[e] = w[e] ? CombineNumbers(b.data[e], g.data[e], routes.combine) : g.data[e];
              w[e] = 1;
            }
          }
        }
        // avg divides what the parts wrote; an avg target's parts then hold
        // their share times its part count.
        const bool divides = reducing && routes.combine == ReduceOp::kAvg;
        if (divides || (reducing && routes.scale != 1))
          for (auto& [dev, w] : written)
            for (size_t e = 0; e < w.size(); ++e) {
              if (!w[e]) continue;
              Tag& v = next.at(dev).data[e];
              if (divides) v /= static_cast<Tag>(exchanges.size());
              v *= static_cast<Tag>(routes.scale);
            }
        for (auto& [dev, s] : staged) peak[dev] += s;
        buffers_ = std::move(next);
        return true;
      }
    }
    return fail("unknown op");
  }

  // Structured steps keep padded shards of one shape on every device; a
  // ragged exchange between explicit layouts works on exact local buffers.
  static bool Padded(const PlanStep& s) { return s.op != StepOp::kExchange || !s.input_spec.empty(); }

  void Execute() {
    if (!stated_) {
      ++report_.mismatches;
      Problem("a partial target's values are stated by the routes of the plan's last step, from the source, from a "
              "layout without a pending reduction, or from one whose devices hold their source parts, or by every "
              "step's routes composed (parts routed whole, under one op: sum, max or min)");
      return;
    }
    const bool padded0 = !plan_.steps().empty() && Padded(plan_.steps()[0]);
    if (!Load(plan_.source(), padded0 ? plan_.steps()[0].input_shard : std::vector<int64_t>{})) return;
    for (size_t si = 0; si < plan_.steps().size(); ++si) {
      const PlanStep& step = plan_.steps()[si];
      std::map<int64_t, int64_t> peak;
      for (const ProgramOp& op : step.program) {
        if (!Run(op, step, si, peak)) return;
        for (auto& [dev, b] : buffers_)
          if (b.shape != op.shape && op.kind != ProgramOp::Kind::kExchange) {
            ++report_.mismatches;
            Problem(fmt::format("step {}: op {} left shape [{}], not its stated [{}]", si, ProgramOpName(op.kind),
                                fmt::join(b.shape, ","), fmt::join(op.shape, ",")));
            return;
          }
      }
      Check(&step, step.output, Padded(step), si);
      for (size_t i = 0; i < plan_.devices().size(); ++i) {
        const int64_t dev = plan_.devices()[i];
        const int64_t held =
            std::max(peak[dev], static_cast<int64_t>(buffers_[dev].data.size()) * plan_.source().element_bytes());
        report_.peak_bytes = std::max(report_.peak_bytes, held);
        if (held > step.peak_bytes[i]) {
          ++report_.peak_excess_devices;
          Problem(fmt::format("step {}: device {} held {} bytes; the plan claims {}", si, dev, held, step.peak_bytes[i]));
        }
      }
    }
    // The end state is the target layout.
    const bool padded = !plan_.steps().empty() && Padded(plan_.steps().back());
    Check(nullptr, plan_.target(), padded, plan_.steps().size());
    report_.devices = static_cast<int64_t>(plan_.devices().size());
  }

 private:
  const CollectivePlan& plan_;
  SimulationReport& report_;
  std::optional<MeshPositions> positions_;  // device id -> mesh position (plans over a mesh)
  // The device's mesh position; the plan's devices are the mesh's.
  int64_t PositionOf(int64_t dev) const {
    const int64_t pos = positions_ ? positions_->Of(dev) : -1;
    if (pos < 0) throw std::out_of_range("device " + std::to_string(dev) + " is not on the plan mesh");
    return pos;
  }
  std::map<int64_t, Buffer> buffers_;
  Layout via_;         // the last step's input (the source, where routes_ are composed)
  PartRoutes routes_;  // where a partial target's values come from: routed from via_
  bool stated_ = false;  // ValueRoutesOf states the target's values (via_ and routes_ are its)
  PartsIntoMemo into_{routes_};  // (declared after routes_, which it points to)
};

}  // namespace

SimulationReport SimulatePlan(const CollectivePlan& plan) {
  SimulationReport report;
  int64_t largest = 0;
  for (const PlanStep& s : plan.steps())
    for (const ProgramOp& op : s.program) largest = std::max(largest, Product(op.shape));
  largest = std::max({largest, Product(plan.source().shape()) / std::max<int64_t>(1, static_cast<int64_t>(plan.devices().size()))});
  const int64_t elements = 3 * largest * static_cast<int64_t>(plan.devices().size());
  if (elements > kMaxSimulatedElements) {
    report.too_large = true;
    report.first_problem = fmt::format("too large to simulate: about {} elements in all buffers, more than {}", elements,
                                       kMaxSimulatedElements);
    return report;
  }
  PlanRun(plan, report).Execute();
  return report;
}

}  // namespace reshard
