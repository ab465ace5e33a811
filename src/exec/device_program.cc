// Compiles plans into DeviceProgram's flat form: every step lowered through
// the minimal exchange between its input and output layouts.
#include "reshard/device_program.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <optional>
#include <tuple>
#include <fmt/format.h>

#include "exec/group_copies.h"
#include "exec/reduce_kernel.h"  // StoreIdentity
#include "plan/relay.h"

namespace reshard {
namespace {

// A run along one dim after merging segments adjacent on the sides that matter.
struct DimRun {
  int64_t src = 0, dst = 0, length = 0;
};

enum class Side { kPack, kUnpack, kLocal };

// Per dim, the transfer's runs: pack reads the input buffer at the segment's
// source offset and writes staging positions; unpack reads staging and writes
// the output buffer; local copies input to output. Runs adjacent on both
// sides merge (block-cyclic tiles give many segments that merge here).
// Written into `runs`, whose vectors are reused from call to call: an
// all-gather over thousands of devices compiles millions of messages, and
// allocating per message was a fifth of the compile time.
// With `clip`, only the transfer's elements it keeps (a relayed step's
// pieces: relay.h); `into_source_tile` writes them where they sit in the
// sender's tile (a relay's round 1: the helper holds the donor's tile).
void Runs(const ExchangePlan& plan, const Transfer& t, Side side, std::vector<std::vector<DimRun>>& runs,
          const TransferClip& clip = {}, bool into_source_tile = false) {
  runs.resize(static_cast<size_t>(plan.source().rank()));
  for (int64_t d = 0; d < plan.source().rank(); ++d) {
    auto& v = runs[static_cast<size_t>(d)];
    v.clear();
    int64_t staged = 0;
    for (const Segment& whole : plan.Segments(t, d)) {
      const Segment s = clip.Apply(whole, d);
      if (s.length == 0) continue;
      DimRun r;
      r.length = s.length;
      r.src = side == Side::kUnpack ? staged : s.src_offset;
      r.dst = side == Side::kPack ? staged : into_source_tile ? s.src_offset : s.dst_offset;
      staged += s.length;
      if (!v.empty() && v.back().src + v.back().length == r.src && v.back().dst + v.back().length == r.dst)
        v.back().length += r.length;
      else
        v.push_back(r);
    }
  }
}

// Adds the cross product of `runs` as boxes.
void AddRuns(CopyProgram& p, const std::vector<std::vector<DimRun>>& runs, int64_t src_base,
             std::span<const int64_t> src_strides, int64_t dst_base, std::span<const int64_t> dst_strides, int64_t eb) {
  const size_t rank = runs.size();
  for (const auto& r : runs)
    if (r.empty()) return;
  size_t idx[kMaxRank + 1] = {};
  int64_t extent[kMaxRank + 1];
  while (true) {
    int64_t so = src_base, dof = dst_base;
    for (size_t d = 0; d < rank; ++d) {
      const DimRun& r = runs[d][idx[d]];
      extent[d] = r.length;
      so += r.src * src_strides[d] * eb;
      dof += r.dst * dst_strides[d] * eb;
    }
    p.AddBox(std::span<const int64_t>(extent, rank), so, src_strides, dof, dst_strides, eb);
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++idx[d] < runs[d].size()) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

Status CheckCopies(const CopyProgram& p, int64_t src_bytes, int64_t dst_bytes, int64_t step, int64_t device,
                   const char* what) {
  for (const CopyOp& op : p.ops) {
    if (op.src_offset < 0 || op.dst_offset < 0 || op.run_bytes <= 0 || p.SrcEnd(op) > src_bytes ||
        p.DstEnd(op) > dst_bytes)
      return Status::Internal(fmt::format(
          "step {}: device {}'s {} copy reads [{}, {}) of {} bytes and writes [{}, {}) of {} bytes: out of bounds", step,
          device, what, op.src_offset, p.SrcEnd(op), src_bytes, op.dst_offset, p.DstEnd(op), dst_bytes));
  }
  return Status::Ok();
}

// Messages follow one another in the buffer; with `owner` (sends), a
// message of a box staged already lies exactly where its owner's does.
Status CheckMessages(std::span<const int64_t> count, std::span<const int64_t> offset, int64_t bytes, int64_t step,
                     int64_t device, const char* what, std::span<const int32_t> owner = {}) {
  int64_t end = 0;
  for (size_t m = 0; m < count.size(); ++m) {
    const size_t o = owner.empty() ? m : static_cast<size_t>(owner[m]);
    const bool placed = o == m ? offset[m] == end : o < m && offset[m] == offset[o] && count[m] == count[o];
    if (count[m] <= 0 || !placed || offset[m] + count[m] > bytes)
      return Status::Internal(fmt::format("step {}: device {}'s {} message {} ({} bytes at {}) does not fit its {}-byte buffer",
                                          step, device, what, m, count[m], offset[m], bytes));
    if (o == m) end += count[m];
  }
  return Status::Ok();
}

}  // namespace

uint64_t PlanProgram::InstanceId::Next() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

int64_t PlanProgram::IndexOf(int64_t device) const {
  // Devices 0..n-1, the common case: the index is the id.
  if (!devices_.empty() && devices_.back() == static_cast<int64_t>(devices_.size()) - 1)
    return device >= 0 && device < static_cast<int64_t>(devices_.size()) ? device : -1;
  auto it = std::lower_bound(devices_.begin(), devices_.end(), device);
  return it != devices_.end() && *it == device ? it - devices_.begin() : -1;
}

std::vector<int64_t> BufferFormat::Strides(std::span<const int64_t> shape) const {
  const size_t rank = shape.size();
  std::vector<int64_t> s(rank, 1);
  if (rank == 0) return s;
  if (order == Order::kRowMajor) {
    for (size_t d = rank - 1; d-- > 0;) {
      s[d] = s[d + 1] * shape[d + 1];
      if (d + 2 == rank && leading_dim > 0) s[d] = leading_dim;
    }
  } else {
    for (size_t d = 1; d < rank; ++d) {
      s[d] = s[d - 1] * shape[d - 1];
      if (d == 1 && leading_dim > 0) s[d] = leading_dim;
    }
  }
  return s;
}

Result<int64_t> BufferFormat::Bytes(std::span<const int64_t> shape, int64_t element_bytes) const {
  const size_t rank = shape.size();
  if (leading_dim < 0) return Status::InvalidArgument(fmt::format("leading dimension {} is negative", leading_dim));
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return int64_t{0};
  if (rank == 0) return element_bytes;
  const size_t inner = order == Order::kRowMajor ? rank - 1 : 0;
  if (leading_dim > 0 && rank > 1 && leading_dim < shape[inner])
    return Status::InvalidArgument(fmt::format("leading dimension {} is below the local extent {} of dim {}",
                                               leading_dim, shape[inner], inner));
  const size_t outer = order == Order::kRowMajor ? 0 : rank - 1;
  return Strides(shape)[outer] * shape[outer] * element_bytes;
}

Result<PlanProgram> PlanProgram::CompileDevice(const CollectivePlan& plan, int64_t device) {
  CompileOptions options;
  options.only_device = device;
  return Compile(plan, options);
}

std::vector<Layout> PlanProgram::StepLayouts(const CollectivePlan& plan, std::vector<int64_t>* plan_steps) {
  std::vector<Layout> layouts = {plan.source()};
  for (size_t i = 0; i < plan.steps().size(); ++i) {
    const PlanStep& s = plan.steps()[i];
    // An all-reduce as a ring moves it: reduce the pieces, then gather them.
    std::optional<Layout> pieces = RingPieces(s);
    if (pieces) {
      layouts.push_back(*pieces);
      if (plan_steps) plan_steps->push_back(static_cast<int64_t>(i));
    }
    // A relayed exchange: round 1 into a copy of its input, then round 2.
    if (!s.relays.empty()) {
      layouts.push_back(s.input);
      if (plan_steps) plan_steps->push_back(static_cast<int64_t>(i));
    }
    layouts.push_back(s.output);
    if (plan_steps) plan_steps->push_back(static_cast<int64_t>(i));
  }
  // A plan with no steps still fills the target buffers: one step of local copies.
  if (layouts.size() == 1) {
    layouts.push_back(plan.target());
    if (plan_steps) plan_steps->push_back(0);
  }
  return layouts;
}

Result<PlanProgram> PlanProgram::Compile(const CollectivePlan& plan, const CompileOptions& options) {
  const Layout* at = &plan.source();
  for (size_t i = 0; i < plan.steps().size(); ++i) {
    if (!(plan.steps()[i].input == *at))
      return Status::Internal(fmt::format("step {} starts from a layout the previous step did not leave", i));
    at = &plan.steps()[i].output;
  }
  if (!(*at == plan.target())) return Status::Internal("the plan's last step does not end at its target layout");
  std::vector<int64_t> plan_steps;
  std::vector<Layout> layouts = StepLayouts(plan, &plan_steps);
  return Build(std::move(layouts), options, nullptr, &plan, plan_steps);
}

Result<PlanProgram> PlanProgram::Compile(const Exchange& exchange, const CompileOptions& options) {
  return Build({exchange.source(), exchange.target()}, options, &exchange, nullptr, {0});
}

Result<PlanProgram> PlanProgram::Build(std::vector<Layout> layouts, const CompileOptions& options,
                                       const Exchange* exchange, const CollectivePlan* plan,
                                       const std::vector<int64_t>& plan_steps) {
  const int64_t only_device = options.only_device;
  PlanProgram p;
  p.source_format_ = options.source_format;
  p.target_format_ = options.target_format;
  p.only_device_ = options.only_device;
  p.copies_ = options.copies;
  const bool staged_copies = p.has_staged_copies(), direct_copies = p.has_direct_copies();
  for (const Layout& l : layouts) p.devices_.insert(p.devices_.end(), l.devices().begin(), l.devices().end());
  std::sort(p.devices_.begin(), p.devices_.end());
  p.devices_.erase(std::unique(p.devices_.begin(), p.devices_.end()), p.devices_.end());
  p.layouts_ = std::move(layouts);
  if (plan != nullptr) p.mesh_ = plan->mesh();
  if (p.mesh_) p.mesh_positions_ = std::make_shared<const MeshPositions>(*p.mesh_);
  const int64_t eb = p.layouts_.front().element_bytes();
  const size_t n = p.devices_.size();
  if (n > static_cast<size_t>(INT32_MAX)) return Status::InvalidArgument("a program over 2^31 devices or more");
  // A relayed exchange's reducing exchange: built in round 1, whose pieces
  // it cuts, and lowered again in round 2 (not built twice).
  std::vector<Exchange> relay_parts;
  for (size_t si = 0; si + 1 < p.layouts_.size(); ++si) {
    const Layout& in = p.layouts_[si];
    const Layout& out = p.layouts_[si + 1];
    const bool first = si == 0;
    auto in_format = [&](int64_t device) { return p.FormatOf(si, device); };
    auto out_format = [&](int64_t device) { return p.FormatOf(si + 1, device); };
    // Each device's buffer strides, computed once per step: every message
    // asks for its sender's and receiver's (an all-gather over thousands of
    // devices has millions of messages and thousands of buffers).
    // (Empty until asked; a rank-0 array's are empty and recomputed, at no cost.)
    std::vector<std::vector<int64_t>> in_strides_cache(n), out_strides_cache(n);
    auto strides_of = [&](int64_t device, const Layout& l, const BufferFormat& format,
                          std::vector<std::vector<int64_t>>& cache) -> const std::vector<int64_t>& {
      std::vector<int64_t>& strides = cache[static_cast<size_t>(p.IndexOf(device))];
      if (strides.empty()) strides = format.Strides(l.LocalShape(device));
      return strides;
    };
    auto in_strides_of = [&](int64_t device) -> const std::vector<int64_t>& {
      return strides_of(device, in, in_format(device), in_strides_cache);
    };
    auto out_strides_of = [&](int64_t device) -> const std::vector<int64_t>& {
      return strides_of(device, out, out_format(device), out_strides_cache);
    };
    // Messages are staged in the source buffers' order, so that packing a
    // column-major source copies whole columns; every device must then hold
    // its source in the same order (MpiReshard checks that ranks agree).
    const BufferFormat staging = first ? BufferFormat{options.source_format.order, 0} : BufferFormat{};
    // The step's exchanges: one, or one per part of a reducing step, each
    // transfer with the exchange plan it belongs to.
    std::vector<Exchange> made;
    StepProgram step;
    step.plan_step = plan_steps.at(si);
    // The plan step this program step runs (all of it, or a half of an all-reduce).
    const PlanStep* ps = plan != nullptr && step.plan_step < static_cast<int64_t>(plan->steps().size())
                             ? &plan->steps()[static_cast<size_t>(step.plan_step)] : nullptr;
    // A relayed exchange's round (Relay, collective_plan.h): 1 into a copy
    // of its input, 2 into its output.
    if (ps != nullptr && exchange == nullptr && !ps->relays.empty()) step.relay_round = out == ps->output ? 2 : 1;
    std::optional<PartRoutes> routes;  // a step compiled part by part
    std::optional<GroupCopies> group_copies;  // a step written per group pattern
    // Writes the step's copies once per group pattern where it is of a kind
    // that repeats from group to group and its layouts do (no exchange, no
    // messages); false where it keeps per-message programs.
    auto per_pattern = [&] {
      if (ps == nullptr || exchange != nullptr || !options.group_patterns || only_device >= 0 || !plan->mesh() ||
          !GroupPatternKind(*ps, in))
        return false;
      group_copies = MakeGroupCopies(*plan->mesh(), ps->group_axes, in, out, p.devices_, in_format(-1), out_format(-1),
                                     direct_copies, staged_copies ? &staging : nullptr, /*with_copies=*/true);
      return group_copies.has_value();
    };
    if (in.partial() && in == out) {
      RESHARD_ASSIGN_OR_RETURN(Exchange e, Exchange::Create(in.WithoutReduction(), out.WithoutReduction()));
      made.push_back(std::move(e));
      if (step.relay_round == 1) {
        // A device's own values are part 0 and write; a relay's piece is
        // part 1 and combines (avg as a sum: its division comes at the keeper).
        step.by_parts = true;
        const ReduceOp op = in.reduction().op;
        step.reduction = Reduction{op == ReduceOp::kAvg ? ReduceOp::kSum : op, 2};
        RESHARD_ASSIGN_OR_RETURN(relay_parts, Exchange::CreateReducing(ps->input, ps->output));
        RESHARD_RETURN_IF_ERROR(RelaysHold(ps->relays, relay_parts, ps->input, ps->output));
      }
    } else if (in.partial() || out.partial()) {
      routes = Exchange::RouteParts(in, out);
      step.by_parts = true;
      step.reduction = Reduction{routes->combine, in.reduction().parts};
      step.scale = routes->scale;
      // (A pattern applies parts routed whole.)
      if (step.relay_round == 2 && !relay_parts.empty()) {
        made = std::move(relay_parts);
        relay_parts.clear();
      } else if (routes->tile_to || !per_pattern()) {
        RESHARD_ASSIGN_OR_RETURN(made, Exchange::CreateReducing(in, out));
      }
    } else if (per_pattern()) {
      // The copies once per group pattern.
    } else if (exchange == nullptr && plan != nullptr && ps != nullptr && ps->input == in) {
      RESHARD_ASSIGN_OR_RETURN(Exchange e, StepExchange(*plan, static_cast<size_t>(step.plan_step)));
      made.push_back(std::move(e));
    } else if (exchange == nullptr) {
      RESHARD_ASSIGN_OR_RETURN(Exchange e, Exchange::Create(in, out));
      made.push_back(std::move(e));
    }
    std::vector<ExchangePlan> plans;
    if (exchange != nullptr) plans.push_back(only_device >= 0 ? exchange->DevicePlan(only_device) : exchange->Plan());
    for (const Exchange& e : made) plans.push_back(only_device >= 0 ? e.DevicePlan(only_device) : e.Plan());
    struct Item {
      const ExchangePlan* xp;
      const Transfer* t;
      int32_t from, to;  // the devices' indices (fewer than 2^31, checked above)
      int64_t elements = 0;  // t's, or what `clip` keeps of them
      TransferClip clip = {};  // a relayed transfer's piece (relay.h)
      bool into_source_tile = false;  // a relay's round 1: into the helper's copy of the donor's tile
      int64_t sent_at = -1;  // where the sender stages it, once its program has it
    };
    std::vector<Item> items;
    size_t transfers = 0;
    for (const ExchangePlan& xp : plans) transfers += xp.transfers().size();
    items.reserve(transfers);  // (grown by doubling, up to half of it would be slack)
    // Round 2: each relay's donor-to-keeper transfer, whose piece the helper
    // carries: (plan, transfer, relay), for the checker's part counts.
    std::vector<std::tuple<const ExchangePlan*, const Transfer*, const Relay*>> relay_pieces;
    for (const ExchangePlan& xp : plans)
      for (const Transfer& t : xp.transfers()) {
        const int64_t fi = p.IndexOf(t.from), ti = p.IndexOf(t.to);
        if (fi < 0 || ti < 0) return Status::Internal("a transfer names a device outside the plan");
        Item item{&xp, &t, static_cast<int32_t>(fi), static_cast<int32_t>(ti), t.elements};
        if (step.relay_round == 2) {
          const RoundTwoTransfer kept = RoundTwoOf(ps->relays, t);
          if (kept.relay != nullptr) relay_pieces.emplace_back(&xp, &t, kept.relay);
          item.clip = kept.clip;
          item.elements = kept.elements;
          if (item.elements == 0) continue;  // all of it went to the helper
        }
        items.push_back(item);
      }
    // Round 1: each relay's piece, from the donor's transfer to the keeper.
    std::vector<DonorTransfer> relay_plans;
    relay_plans.reserve(step.relay_round == 1 ? ps->relays.size() : 0);
    if (step.relay_round == 1)
      for (const Relay& r : ps->relays) {
        if (only_device >= 0 && only_device != r.donor && only_device != r.helper) continue;
        std::optional<DonorTransfer> piece = DonorTransferOf(relay_parts, r);
        const int64_t fi = p.IndexOf(r.donor), ti = p.IndexOf(r.helper);
        if (!piece || fi < 0 || ti < 0)
          return Status::Internal(fmt::format("relay from device {} to device {}: no transfer to keeper {}", r.donor,
                                              r.helper, r.keeper));
        relay_plans.push_back(std::move(*piece));
        Item item{&relay_plans.back().plan, &relay_plans.back().transfer(), static_cast<int32_t>(fi),
                  static_cast<int32_t>(ti), r.elements};
        item.clip = RoundOneClip(r);
        item.into_source_tile = true;
        items.push_back(item);
      }
    // The indices of `of`, visited in `order` (empty: 0, 1, ...), stably
    // reordered by a device index: a counting sort, linear in transfers and
    // devices (an all-gather over thousands of devices has millions of
    // transfers).
    auto ordered_by = [n](const std::vector<Item>& of, const std::vector<size_t>& order, int32_t Item::*key) {
      std::vector<size_t> start(n + 1, 0);
      for (const Item& it : of) ++start[static_cast<size_t>(it.*key) + 1];
      for (size_t i = 0; i < n; ++i) start[i + 1] += start[i];
      std::vector<size_t> to(of.size());
      for (size_t j = 0; j < of.size(); ++j) {
        const size_t k = order.empty() ? j : order[j];
        to[start[static_cast<size_t>(of[k].*key)]++] = k;
      }
      return to;
    };
    step.devices.resize(n);
    if (exchange == nullptr && ps != nullptr) {
      step.op = ps->op;
      if (plan->mesh() &&
          (ps->op == StepOp::kAllGather || ps->op == StepOp::kAllToAll || ps->op == StepOp::kReduceScatter)) {
        step.group_axes = ps->group_axes;
        step.chunk_bytes = PricedChunkBytes(*plan, static_cast<size_t>(step.plan_step));
      }
      if (plan->mesh() && ps->op == StepOp::kAllReduce && !ps->group_axes.empty() && in == ps->input) {
        step.all_reduce_axes = ps->group_axes;
        step.all_reduce_chunk = PricedChunkBytes(*plan, static_cast<size_t>(step.plan_step));
      }
      // An all-reduce run as a ring whose pieces are all one size: its
      // halves are a reduce-scatter and an all-gather over its groups, in
      // chunks of a piece.
      if (plan->mesh() && ps->op == StepOp::kAllReduce && !ps->group_axes.empty() && (in != ps->input || out != ps->output)) {
        const Layout& pieces = in == ps->input ? out : in;
        const int64_t piece = pieces.devices().empty() ? 0 : pieces.LocalBytes(pieces.devices().front());
        bool even = piece > 0;
        for (size_t i = 0; i < pieces.devices().size() && even; ++i) even = pieces.LocalBytes(pieces.devices()[i]) == piece;
        if (even) {
          step.group_axes = ps->group_axes;
          step.chunk_bytes = piece;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      DeviceProgram& dp = step.devices[i];
      dp.device = p.devices_[i];
      // A device outside a layout holds nothing, even of a rank-0 array.
      if (in.TileOf(dp.device) >= 0) {
        RESHARD_ASSIGN_OR_RETURN(dp.input_bytes, in_format(dp.device).Bytes(in.LocalShape(dp.device), eb));
      }
      if (out.TileOf(dp.device) >= 0) {
        RESHARD_ASSIGN_OR_RETURN(dp.output_bytes, out_format(dp.device).Bytes(out.LocalShape(dp.device), eb));
      }
    }
    if (group_copies) {
      // A member's buffers are the same sizes in every group of a pattern:
      // each copy stays inside its sender's and its receiver's in the
      // pattern's first group.
      const GroupCopies& gc = *group_copies;
      for (size_t i = 0; i < n; ++i) {
        const GroupCopies::Pattern& pat = gc.PatternOf(i);
        step.devices[i].recv_bytes = pat.received[static_cast<size_t>(gc.member[i])];
        if (staged_copies) step.devices[i].send_bytes = pat.staged[static_cast<size_t>(gc.member[i])];
      }
      RESHARD_RETURN_IF_ERROR(CheckGroupCopyBounds(gc, step.devices, si));
      step.group_copies = std::make_shared<const GroupCopies>(std::move(*group_copies));
    }
    // Transfers by (from, to) for the senders, by (to, from) for the receivers
    // (a sender holds one part, so parts never share a pair).
    // (Indices ascend with ids: sorting by either is the same. Exchange
    // plans list transfers by sender, so the first sort is mostly skipped.)
    const bool sender_order = std::is_sorted(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return std::pair(a.from, a.to) < std::pair(b.from, b.to);
    });
    std::vector<Item> by_sender;
    if (sender_order) {
      by_sender = std::move(items);
    } else {
      for (size_t k : ordered_by(items, ordered_by(items, {}, &Item::to), &Item::from)) by_sender.push_back(items[k]);
    }
    items = {};
    // (by_receiver, below, once the senders' programs say where each message is.)
    // Each device's message arrays sized once: no growth, and no slack left
    // in them (a third of a program's memory where they grew by doubling);
    // its copy lists at least one copy a message.
    {
      std::vector<size_t> sends(n, 0), recvs(n, 0);
      for (const Item& it : by_sender)
        if (it.from != it.to) ++sends[static_cast<size_t>(it.from)], ++recvs[static_cast<size_t>(it.to)];
      for (size_t i = 0; i < n; ++i) {
        DeviceProgram& dp = step.devices[i];
        for (auto* v : {&dp.send_peer, &dp.send_count, &dp.send_offset}) v->reserve(sends[i]);
        dp.pack_owner.reserve(sends[i]);
        dp.pack_begin.reserve(sends[i] + 1);
        if (staged_copies) dp.pack.ops.reserve(sends[i]);
        for (auto* v : {&dp.recv_peer, &dp.recv_count, &dp.recv_offset, &dp.recv_peer_offset}) v->reserve(recvs[i]);
        for (auto* v : {&dp.unpack_begin, &dp.direct_begin}) v->reserve(recvs[i] + 1);
        if (staged_copies) dp.unpack.ops.reserve(recvs[i]);
        if (direct_copies) dp.direct.ops.reserve(recvs[i]);
      }
    }
    if (step.relay_round == 1) {
      for (DeviceProgram& dp : step.devices) dp.local_part = 0;
    } else if (step.reduces()) {
      // With tile routes, the identity goes exactly where no part's tile is
      // routed to the device's target part: the transfers of an exchange
      // filtered by the complement of the routes.
      std::optional<Exchange> elsewhere;
      if (routes->tile_to) {
        // Every part holds every tile: part 0's holders stand for the source.
        RESHARD_ASSIGN_OR_RETURN(elsewhere, Exchange::CreateRouted(in.partial() ? in.PartLayout(0) : in,
                                                                   out.WithoutReduction(),
                                                                   [r = *routes, out](int64_t tile, int64_t to) {
                                                                     return !r.ReachesTile(out, tile, to);
                                                                   }));
      }
      for (DeviceProgram& dp : step.devices) {
        dp.local_part = in.PartOf(dp.device);
        // A partial target's device that no part reaches holds the identity.
        if (!routes->Fills(out, dp.device)) continue;
        const std::vector<int64_t> shape = out.LocalShape(dp.device), strides = out_strides_of(dp.device);
        if (elsewhere && only_device >= 0 && dp.device != only_device) {
          // Compiling one device's program: the others' fills are not needed.
        } else if (elsewhere) {
          const ExchangePlan xp = elsewhere->ReceivePlan(dp.device);
          for (const Transfer& t : xp.transfers()) {
            std::vector<std::vector<DimRun>> runs;
            Runs(xp, t, Side::kLocal, runs);
            for (auto& dim : runs)
              for (DimRun& r : dim) r.src = r.dst;  // the fill reads its one element, not a source
            AddRuns(dp.fill, runs, 0, strides, 0, strides, eb);
          }
        } else {
          dp.fill.AddBox(shape, 0, strides, 0, strides, eb);
        }
        dp.fill_element.resize(static_cast<size_t>(eb));
        StoreIdentity(routes->fill, out.dtype(), dp.fill_element.data());
      }
    }
    std::vector<std::vector<DimRun>> runs;  // Runs' output, reused
    StagedBoxes staged;  // one sender's boxes and the messages that stage them: restarts with each sender
    int64_t sender = -1;
    for (Item& item : by_sender) {
      const ExchangePlan& xp = *item.xp;
      const Transfer* t = item.t;
      if (t->from != sender) {
        staged.Clear();
        sender = t->from;
      }
      const int64_t fi = item.from, ti = item.to;
      DeviceProgram& s = step.devices[fi];
      const std::vector<int64_t>& in_strides = in_strides_of(t->from);
      if (t->from == t->to) {
        Runs(xp, *t, Side::kLocal, runs);
        AddRuns(s.local, runs, 0, in_strides, 0, out_strides_of(t->to), eb);
        continue;
      }
      const int64_t bytes = item.elements * eb;
      const int32_t m = static_cast<int32_t>(s.send_peer.size());
      // (A relay's pieces are staged on their own: no other message moves them.)
      const int32_t owner = item.clip.dim >= 0 ? m : static_cast<int32_t>(staged.Stager(*t, m));
      const bool fresh = owner == m;
      const int64_t offset = fresh ? s.send_bytes : s.send_offset[static_cast<size_t>(owner)];
      s.send_peer.push_back(ti);
      s.send_count.push_back(bytes);
      s.send_offset.push_back(offset);
      s.pack_owner.push_back(owner);
      s.pack_begin.push_back(static_cast<int32_t>(s.pack.ops.size()));
      item.sent_at = offset;
      if (staged_copies) {
        Runs(xp, *t, Side::kPack, runs, item.clip);
        AddRuns(s.pack, runs, 0, in_strides, offset, staging.Strides(item.clip.Shape(xp, *t)), eb);
      }
      if (fresh) s.send_bytes += bytes;
    }
    // By receiver: indices into by_sender (8 bytes a transfer, not a copy of each).
    const std::vector<size_t> by_receiver = ordered_by(by_sender, {}, &Item::to);
    for (size_t k : by_receiver) {
      const Item& item = by_sender[k];
      const ExchangePlan& xp = *item.xp;
      const Transfer* t = item.t;
      if (t->from == t->to) continue;
      const int64_t fi = item.from, ti = item.to;
      DeviceProgram& r = step.devices[ti];
      const int64_t bytes = item.elements * eb;
      // (-1 where the sender's program is not compiled: only_device.)
      const int64_t peer_offset = item.sent_at;
      if (only_device < 0 && peer_offset < 0) return Status::Internal("a received message was never sent");
      r.recv_peer.push_back(fi);
      r.recv_count.push_back(bytes);
      r.recv_offset.push_back(r.recv_bytes);
      r.recv_peer_offset.push_back(peer_offset);
      r.unpack_begin.push_back(static_cast<int32_t>(r.unpack.ops.size()));
      const std::vector<int64_t>& out_strides = out_strides_of(r.device);
      if (staged_copies) {
        Runs(xp, *t, Side::kUnpack, runs, item.clip, item.into_source_tile);
        AddRuns(r.unpack, runs, r.recv_bytes, staging.Strides(item.clip.Shape(xp, *t)), 0, out_strides, eb);
      }
      r.direct_begin.push_back(static_cast<int32_t>(r.direct.ops.size()));
      if (direct_copies) {
        Runs(xp, *t, Side::kLocal, runs, item.clip, item.into_source_tile);
        AddRuns(r.direct, runs, 0, in_strides_of(t->from), 0, out_strides, eb);
      }
      r.recv_bytes += bytes;
      if (step.relay_round == 1) {
        r.recv_part.push_back(1);
        r.recv_writes.push_back(false);
      } else if (step.reduces()) {
        r.recv_part.push_back(in.PartOf(t->from));
        r.recv_writes.push_back(routes->tile_to && routes->FirstInto(in.PartOf(t->from), in.TileOf(t->from), out.TileOf(t->to), out.PartOf(t->to)));
      }
    }
    // Round 2: where each relay's piece lands in its keeper's output.
    for (const auto& [xp, t, r] : relay_pieces) {
      DeviceProgram& dp = step.devices[static_cast<size_t>(p.IndexOf(r->keeper))];
      Runs(*xp, *t, Side::kLocal, runs, RoundOneClip(*r));
      const size_t before = dp.relayed.ops.size();
      AddRuns(dp.relayed, runs, 0, in_strides_of(r->donor), 0, out_strides_of(r->keeper), eb);
      dp.relayed_part.resize(dp.relayed.ops.size(), in.PartOf(r->donor));
      if (dp.relayed.ops.size() == before) return Status::Internal("a relay's piece is empty");
    }
    for (DeviceProgram& dp : step.devices) {
      if (step.group_copies) {
        // (Its parts and writers are the pattern's.)
      } else if (step.reduces() && routes && routes->tile_to) {
        const int64_t tile = in.TileOf(dp.device);
        dp.local_writes = tile >= 0 && out.TileOf(dp.device) >= 0 && routes->FirstInto(dp.local_part, tile, out.TileOf(dp.device), out.PartOf(dp.device));
      } else if (step.reduces()) {
        // Parts routed whole: the device's lowest part writes every element.
        int64_t first = dp.local.ops.empty() ? step.reduction.parts : dp.local_part;
        for (int64_t part : dp.recv_part) first = std::min(first, part);
        dp.local_writes = dp.local_part == first;
        for (size_t m = 0; m < dp.recv_part.size(); ++m) dp.recv_writes[m] = dp.recv_part[m] == first;
      }
      dp.pack_begin.push_back(static_cast<int32_t>(dp.pack.ops.size()));
      dp.unpack_begin.push_back(static_cast<int32_t>(dp.unpack.ops.size()));
      dp.direct_begin.push_back(static_cast<int32_t>(dp.direct.ops.size()));
      const int64_t s = static_cast<int64_t>(si);
      RESHARD_RETURN_IF_ERROR(CheckCopies(dp.pack, dp.input_bytes, dp.send_bytes, s, dp.device, "pack"));
      RESHARD_RETURN_IF_ERROR(CheckCopies(dp.unpack, dp.recv_bytes, dp.output_bytes, s, dp.device, "unpack"));
      RESHARD_RETURN_IF_ERROR(CheckCopies(dp.local, dp.input_bytes, dp.output_bytes, s, dp.device, "local"));
      RESHARD_RETURN_IF_ERROR(CheckCopies(dp.fill, dp.output_bytes, dp.output_bytes, s, dp.device, "fill"));
      RESHARD_RETURN_IF_ERROR(CheckMessages(dp.send_count, dp.send_offset, dp.send_bytes, s, dp.device, "send", dp.pack_owner));
      RESHARD_RETURN_IF_ERROR(CheckMessages(dp.recv_count, dp.recv_offset, dp.recv_bytes, s, dp.device, "receive"));
      if (dp.recv_writes.size() != dp.recv_part.size())
        return Status::Internal("a reducing step's messages lack their parts or write flags");
      for (size_t m = 0; m < dp.recv_peer.size(); ++m) {
        const int64_t sender_input = step.devices[dp.recv_peer[m]].input_bytes;
        for (int32_t k = dp.direct_begin[m]; k < dp.direct_begin[m + 1]; ++k) {
          const CopyOp& op = dp.direct.ops[k];
          if (dp.direct.SrcEnd(op) > sender_input || dp.direct.DstEnd(op) > dp.output_bytes)
            return Status::Internal(fmt::format("step {}: device {}'s direct copy from device {} is out of bounds", si,
                                                dp.device, p.devices_[dp.recv_peer[m]]));
        }
      }
      int64_t packed = 0;  // by the messages that stage their box
      for (size_t m = 0; m < dp.send_peer.size(); ++m)
        if (dp.Packs(m))
          for (int32_t k = dp.pack_begin[m]; k < dp.pack_begin[m + 1]; ++k) packed += dp.pack.OpBytes(dp.pack.ops[k]);
      // (A step written per group pattern holds its copies in the pattern, checked above.)
      if (staged_copies && !step.group_copies && packed != dp.send_bytes)
        return Status::Internal(fmt::format("step {}: device {} packs {} bytes into a {}-byte send buffer", si, dp.device,
                                            packed, dp.send_bytes));
      if (staged_copies && !step.group_copies && dp.unpack.bytes != dp.recv_bytes)
        return Status::Internal(fmt::format("step {}: device {} unpacks {} of {} received bytes", si, dp.device,
                                            dp.unpack.bytes, dp.recv_bytes));
    }
    p.steps_.push_back(std::move(step));
  }
  return p;
}

BufferFormat PlanProgram::FormatOf(size_t layout, int64_t device) const {
  // A format applies to every device's buffers, or to the one compiled
  // device's only (the others are whatever their own processes hold).
  if (only_device_ >= 0 && device != only_device_) return BufferFormat{};
  if (layout == 0) return source_format_;
  return layout + 1 == layouts_.size() ? target_format_ : BufferFormat{};
}

}  // namespace reshard
