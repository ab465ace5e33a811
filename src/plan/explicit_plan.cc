#include "plan/explicit_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/cost_model.h"
#include "plan/named_planner.h"
#include "plan/plan_builder.h"
#include "plan/search_state.h"
#include "reshard/exchange.h"
#include "reshard/plan_stats.h"

namespace reshard {

std::vector<int64_t> LargestTile(const Layout& l) {
  std::vector<int64_t> s(l.rank(), 0);
  for (int64_t t = 0; t < l.num_tiles(); ++t) {
    if (l.Holders(t).empty()) continue;
    const std::vector<int64_t> ls = l.LocalShape(l.Holders(t)[0]);
    for (int64_t i = 0; i < l.rank(); ++i) s[i] = std::max(s[i], ls[i]);
  }
  return s;
}

namespace {

// XLA's fallback without a common mesh: every target device receives the
// source shards it lacks, one message per source tile from the tile's first
// holder; priced as every step is (cost_model.h): per device, the larger of
// its send and receive sums (full duplex), so a holder sending its tile to
// every device pays for each message. Devices evaluated: up to 32 of the
// target's, spread evenly (all where there are at most 256), and the 32
// senders with the most bytes to send; a sender's sum over the devices
// lacking a tile is the sampled devices' mean times their count.
BaselineCost ExplicitRemat(const Layout& source, const Layout& target, const Topology& topo) {
  BaselineCost b{"full_rematerialization"};
  const Baseline base = FullRematerialization(source, target);
  b.max_recv_bytes = base.max_recv_bytes;
  b.total_bytes = base.total_bytes;
  b.peak_bytes = base.peak_bytes;
  b.collectives = 1;
  b.ops = {"all-gather", "slice"};
  const int64_t eb = source.element_bytes();
  const auto& devs = target.devices();
  const int64_t n = static_cast<int64_t>(devs.size()), samples = n <= 256 ? n : 32;
  const int64_t tiles = source.num_tiles();
  std::vector<int64_t> sampled;
  for (int64_t i = 0; i < samples; ++i) sampled.push_back(devs[static_cast<size_t>(i * n / samples)]);
  // Per source tile, the target devices lacking it (their own source tile is another).
  std::vector<int64_t> lacking(static_cast<size_t>(tiles), n);
  for (int64_t dev : devs)
    if (const int64_t own = source.TileOf(dev); own >= 0) --lacking[static_cast<size_t>(own)];
  auto holder = [&](int64_t tile) { return source.Holders(tile).empty() ? int64_t{-1} : source.Holders(tile)[0]; };
  // Per sender, its bytes to send, to find the busiest.
  std::vector<std::pair<int64_t, int64_t>> senders;  // (bytes, device)
  {
    std::vector<std::pair<int64_t, int64_t>> by_tile;  // (device, bytes)
    for (int64_t tile = 0; tile < tiles; ++tile)
      if (holder(tile) >= 0 && lacking[static_cast<size_t>(tile)] > 0)
        by_tile.emplace_back(holder(tile), lacking[static_cast<size_t>(tile)] * source.TileElements(tile) * eb);
    std::sort(by_tile.begin(), by_tile.end());
    for (const auto& [dev, bytes] : by_tile)
      if (!senders.empty() && senders.back().second == dev)
        senders.back().first += bytes;
      else
        senders.emplace_back(bytes, dev);
    std::sort(senders.begin(), senders.end(), std::greater<>());
  }
  std::vector<int64_t> evaluated = sampled;
  for (size_t i = 0; i < senders.size() && i < 32; ++i) evaluated.push_back(senders[i].second);
  std::sort(evaluated.begin(), evaluated.end());
  evaluated.erase(std::unique(evaluated.begin(), evaluated.end()), evaluated.end());
  for (const int64_t dev : evaluated) {
    // A device holds one source tile, its own: it receives every other and,
    // as its first holder, sends its own to every device lacking it.
    const int64_t own = source.TileOf(dev);
    // Every target device receives the whole array, as the baseline's bytes count.
    const bool receives = PositionIn(devs, dev) >= 0;
    double recv_us = 0, send_us = 0;
    for (int64_t tile = 0; receives && tile < tiles; ++tile)
      if (holder(tile) >= 0 && tile != own)
        recv_us += topo.MessageTime(holder(tile), dev, source.TileElements(tile) * eb);
    if (own >= 0 && holder(own) == dev && lacking[static_cast<size_t>(own)] > 0) {
      const int64_t bytes = source.TileElements(own) * eb;
      double sum = 0;
      int64_t k = 0;
      for (int64_t d : sampled)
        if (source.TileOf(d) != own) sum += topo.MessageTime(dev, d, bytes), ++k;
      const double each = k > 0 ? sum / static_cast<double>(k) : topo.LeastMessageTime(bytes);
      send_us = each * static_cast<double>(lacking[static_cast<size_t>(own)]);
    }
    // Lay out the gathered array, then slice the target shard from it.
    const int64_t copied = receives ? source.num_elements() * eb + target.LocalBytes(dev) : 0;
    b.time_us = std::max(b.time_us, StepTime(topo, DeviceMessageTime(topo, send_us, recv_us), copied,
                                             b.max_recv_bytes > 0));
  }
  return b;
}

// Where both layouts cut the array alike and only the devices holding each
// tile differ: one collective-permute over explicit device pairs (positions
// index plan.devices()); each tile's new holders take it from its old ones
// that no longer hold it, in ascending order.
std::optional<PlanStep> ExplicitPermute(const PlanBuilder& b, const Layout& source, const Layout& target,
                                        const Topology& topo) {
  if (source.rank() != target.rank() || source.devices().size() != target.devices().size()) return std::nullopt;
  for (int64_t d = 0; d < source.rank(); ++d)
    if (!(source.dim(d) == target.dim(d))) return std::nullopt;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (int64_t tile = 0; tile < source.num_tiles(); ++tile) {
    const auto h = source.Holders(tile), r = target.Holders(tile);
    if (h.size() != r.size()) return std::nullopt;
    std::vector<int64_t> senders, receivers;
    std::set_difference(h.begin(), h.end(), r.begin(), r.end(), std::back_inserter(senders));
    std::set_difference(r.begin(), r.end(), h.begin(), h.end(), std::back_inserter(receivers));
    for (size_t i = 0; i < senders.size(); ++i)
      pairs.push_back({static_cast<int32_t>(b.Index(senders[i])), static_cast<int32_t>(b.Index(receivers[i]))});
  }
  PlanStep step{StepOp::kCollectivePermute, source, target};
  step.input_shard = LargestTile(source);
  step.output_shard = step.input_shard;
  const int64_t bytes = [&] {
    int64_t n = source.element_bytes();
    for (int64_t e : step.input_shard) n *= e;
    return n;
  }();
  std::sort(pairs.begin(), pairs.end());
  ProgramOp op{ProgramOp::Kind::kCollectivePermute, step.input_shard};
  op.pairs = pairs;
  step.program = {op};
  const size_t n = b.num_devices();
  step.send_bytes = step.recv_bytes = step.sends = step.recvs = DeviceValues::Uniform(n, 0);
  step.peak_bytes = DeviceValues::Uniform(n, 2 * bytes);
  for (const auto& [s, t] : pairs) {
    step.send_bytes.Set(s, bytes);
    step.recv_bytes.Set(t, bytes);
    step.sends.Set(s, 1);
    step.recvs.Set(t, 1);
    step.time_us = std::max(step.time_us, topo.MessageTime(b.device(s), b.device(t), bytes));
  }
  step.time_us = StepTime(topo, step.time_us, StepCopiedBytes(step.op, bytes, bytes), /*communicates=*/true);
  return step;
}

}  // namespace

Result<PlanResult> PlanExplicit(const Layout& source, const Layout& target, const PlannerOptions& options, int64_t cap,
                                PlanResult result) {
  const bool ragged = options.strategy != Strategy::kCollectives && HasRaggedExchange(options.target);
  PlanBuilder builder(source, target);
  // Explicit layouts (other device sets, non-mesh tile lists, block-cyclic):
  // a collective-permute where only the devices differ, else the exchange.
  result.baselines.push_back(ExplicitRemat(source, target, options.topology));
  if (source == target) {
    result.plan = builder.Finish();
    return result;
  }
  std::optional<PlanStep> permute;
  if (options.strategy != Strategy::kExchange) permute = ExplicitPermute(builder, source, target, options.topology);
  std::optional<PlanStep> exchange;
  if (ragged) {
    PlanStep step{StepOp::kExchange, source, target};
    step.input_shard = LargestTile(source);
    step.output_shard = LargestTile(target);
    NamedPlanner::FillExchange(step, Exchange::Create(source, target).value(), options.topology);
    exchange = std::move(step);
  }
  auto price = [](const PlanStep& st) {
    return Cost{Picoseconds(st.time_us), st.recv_bytes.Max(), st.recv_bytes.Sum(), st.op == StepOp::kExchange ? 1 : 0, 1};
  };
  auto peak = [](const PlanStep& st) { return st.peak_bytes.Max(); };
  std::optional<PlanStep> chosen;
  for (std::optional<PlanStep>* c : {&permute, &exchange}) {
    if (!*c) continue;
    result.candidates.push_back(PlanCandidate{{std::string(StepOpName((*c)->op))}, (*c)->time_us,
                                              (*c)->recv_bytes.Max(),
                                              peak(**c), peak(**c) > cap ? "over the memory cap" : "priced"});
    if (peak(**c) <= cap && (!chosen || price(**c) < price(*chosen))) chosen = **c;
  }
  if (!chosen && options.memory_cap_bytes == 0) {
    // The default cap is soft (as for named layouts): take the cheapest.
    for (std::optional<PlanStep>* c : {&permute, &exchange})
      if (*c && (!chosen || price(**c) < price(*chosen))) chosen = **c;
    if (chosen) {
      result.candidates.push_back(CapLiftedCandidate(cap));
      result.memory_cap_bytes = 0;
      result.memory_cap_lifted = true;
    }
  }
  if (!chosen) {
    if (!permute && !exchange)
      return Status::NotSupported(
          "the layouts are not named shardings over one mesh and differ in more than their devices, so only the "
          "ragged exchange moves this data, and " +
          std::string(options.strategy == Strategy::kCollectives
                          ? "the collectives strategy excludes it"
                          : fmt::format("the target {} has none", PlanTargetName(options.target))));
    return Status::InvalidArgument(fmt::format(
        "no plan fits the memory cap of {} bytes per device: the only plans for these layouts need {}", cap,
        std::min(permute ? peak(*permute) : INT64_MAX, exchange ? peak(*exchange) : INT64_MAX)));
  }
  for (PlanCandidate& c : result.candidates)
    if (!c.steps.empty() && c.steps[0] == StepOpName(chosen->op)) c.note = "chosen";
  builder.Add(std::move(*chosen));
  result.plan = builder.Finish();
  return result;
}

}  // namespace reshard
