// Property test: plans from layouts with a pending reduction (random
// unreduced axes and ops, uneven extents, replication, permuted device ids)
// to random named shardings. Every plan is executed by the simulator, which
// checks the reduced values exactly (each part a distinct pseudo-random
// integer whose reduction is the element's tag), and the default plan again,
// in one of nine element types, by the in-process executor (exec_checker.h's
// numbers, exact in any order; threads as ranks with priced chunks every
// other time, reduce-scatters and all-reduces then the backend's); no plan is costlier than
// reducing first with an all-reduce; by bytes alone, plans meet the lower
// bound where their target has each element on one device, and the largest
// gap elsewhere is reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <tuple>
#include <utility>

#include "reshard/emit.h"
#include "reshard/named_sharding.h"
#include "reshard/notation.h"
#include "reshard/planner.h"
#include "exec/exec_checker.h"
#include "exec/simulator.h"
#include "plan/exchange_step.h"
#include "plan/reduction_bound.h"
#include "plan/relay.h"
#include "plan/tile_routes.h"
#include "reshard/plan_stats.h"
#include "reshard/topology.h"
#include "testing/planned_traffic.h"
#include "testing/random_layouts.h"
#include "testing/random_partial.h"

namespace reshard {
namespace {

// The rule RouteTiles replaced, kept as its oracle: every source tile pair
// against every target device and part (quadratic in devices). Its cap
// (parts x source tiles x (target tiles + devices) at most 2^22) was what
// dropped tile routes at a few thousand devices.
void QuadraticRouteTiles(const Layout& source, const Layout& target, bool together, PartRoutes& r) {
  const int64_t S = source.num_tiles(), T = target.num_tiles(), rank = source.rank();
  const int64_t P = source.reduction().parts, Q = target.reduction().parts;
  const int64_t devices = static_cast<int64_t>(target.devices().size());
  if (S < 2 || source.shape() != target.shape() ||
      static_cast<double>(P) * static_cast<double>(S) * static_cast<double>(T + devices) >
          static_cast<double>(int64_t{1} << 28))
    return;
  // The per-dim overlap table: every pair of tile coordinates, each over its cells.
  double table = 0;
  for (int64_t d = 0; d < rank; ++d)
    table += static_cast<double>(source.dim(d).tiles) * target.dim(d).tiles *
             static_cast<double>(source.dim(d).cuts.size() + target.dim(d).cuts.size());
  if (table > static_cast<double>(int64_t{1} << 24)) return;
  // Per dim, the overlap of source tile coordinate a and target coordinate b at [a * tiles_b + b].
  std::vector<std::vector<int64_t>> overlap(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    const int32_t a = source.dim(d).tiles, b = target.dim(d).tiles;
    std::vector<std::vector<Interval>> ti(static_cast<size_t>(b));
    for (int32_t y = 0; y < b; ++y) ti[static_cast<size_t>(y)] = target.TileIntervals(d, y);
    for (int32_t x = 0; x < a; ++x) {
      const std::vector<Interval> si = source.TileIntervals(d, x);
      for (int32_t y = 0; y < b; ++y) overlap[static_cast<size_t>(d)].push_back(OverlapLength(si, ti[static_cast<size_t>(y)]));
    }
  }
  std::vector<std::vector<int32_t>> target_coords;
  for (int64_t t = 0; t < T; ++t) target_coords.push_back(target.TileCoords(t));
  auto index = [&](int64_t dev) {
    return std::lower_bound(target.devices().begin(), target.devices().end(), dev) - target.devices().begin();
  };
  std::vector<int64_t> recv(static_cast<size_t>(devices), 0), covered(static_cast<size_t>(devices), 0);
  std::vector<int64_t> tile_to(static_cast<size_t>(P * S * T), -1);
  struct Reach {
    int64_t device, part, elements;
    int64_t held;  // the source part whose tile the device holds (it keeps these elements of it), or -1
  };
  std::vector<Reach> reach;
  std::vector<int64_t> cost(static_cast<size_t>(Q)), worst(static_cast<size_t>(Q));
  std::vector<bool> into(static_cast<size_t>(Q));
  // Each (source tile, target tile) pair that overlaps on its own: parts
  // are numbered per target tile, so one target part number may hold other
  // devices in another tile.
  for (int64_t s = 0; s < S; ++s) {
    std::span<const int64_t> holders = source.Holders(s);
    const std::vector<int32_t> sc = source.TileCoords(s);
    for (int64_t t = 0; t < T; ++t) {
      int64_t v = 1;
      for (int64_t d = 0; d < rank && v > 0; ++d)
        v *= overlap[static_cast<size_t>(d)][static_cast<size_t>(sc[d] * target.dim(d).tiles + target_coords[t][d])];
      if (v == 0) continue;
      reach.clear();
      for (int64_t h : target.Holders(t))
        reach.push_back({h, target.PartOf(h), v,
                         std::binary_search(holders.begin(), holders.end(), h) ? source.PartOf(h) : int64_t{-1}});
      // Elements of part p's tile s that x receives (none where it holds them).
      auto gets = [&](const Reach& x, int64_t p) {
        if (!together) return x.held == p ? int64_t{0} : x.elements;
        return x.elements * (P - (x.held >= 0 ? 1 : 0));
      };
      // For each part (all at once, together): the target part receiving the
      // fewest elements, then the least busiest device after, then the lowest.
      std::fill(into.begin(), into.end(), false);
      for (int64_t p = 0; p < (together ? 1 : P); ++p) {
        std::fill(cost.begin(), cost.end(), 0);
        std::fill(worst.begin(), worst.end(), 0);
        for (const Reach& x : reach)
          if (const int64_t n = gets(x, p); n > 0) {
            cost[static_cast<size_t>(x.part)] += n;
            worst[static_cast<size_t>(x.part)] =
                std::max(worst[static_cast<size_t>(x.part)], recv[static_cast<size_t>(index(x.device))] + n);
          }
        int64_t q = 0;
        for (int64_t c = 1; c < Q; ++c)
          if (std::pair(cost[static_cast<size_t>(c)], worst[static_cast<size_t>(c)]) <
              std::pair(cost[static_cast<size_t>(q)], worst[static_cast<size_t>(q)]))
            q = c;
        for (int64_t pp = together ? 0 : p; pp < (together ? P : p + 1); ++pp)
          tile_to[static_cast<size_t>((pp * S + s) * T + t)] = q;
        into[static_cast<size_t>(q)] = true;
        for (const Reach& x : reach)
          if (x.part == q) recv[static_cast<size_t>(index(x.device))] += gets(x, p);
      }
      for (const Reach& x : reach)
        if (into[static_cast<size_t>(x.part)]) covered[static_cast<size_t>(index(x.device))] += x.elements;
    }
  }
  // Against parts routed whole (r.to): each device of a part's target part
  // receives its tile but what it holds of that part. For a source with no
  // reduction every target part is a candidate, and the best replaces
  // r.to[0] where it beats both.
  int64_t tiles_max = 0, tiles_total = 0;
  for (int64_t n : recv) {
    tiles_max = std::max(tiles_max, n);
    tiles_total += n;
  }
  std::vector<int64_t> whole_max(static_cast<size_t>(Q), 0), whole_total(static_cast<size_t>(Q), 0);
  for (size_t i = 0; i < recv.size(); ++i) {
    const int64_t dev = target.devices()[i], t = target.TileOf(dev);
    if (t < 0) continue;
    const int64_t q = target.PartOf(dev);
    int64_t kept = 0;
    if (const int64_t s = source.TileOf(dev); s >= 0) {
      kept = 1;
      const std::vector<int32_t> sc = source.TileCoords(s);
      for (int64_t d = 0; d < rank; ++d)
        kept *= overlap[static_cast<size_t>(d)][static_cast<size_t>(sc[d] * target.dim(d).tiles + target_coords[t][d])];
    }
    // P == 1: the device's cost were the source routed into its part; else
    // its cost under r.to, booked at slot 0.
    int64_t got = 0;
    if (P == 1) {
      got = target.TileElements(t) - kept;
    } else {
      for (int64_t p = 0; p < P; ++p)
        if (r.to[static_cast<size_t>(p)] < 0 || r.to[static_cast<size_t>(p)] == q)
          got += target.TileElements(t) - (source.TileOf(dev) >= 0 && source.PartOf(dev) == p ? kept : 0);
    }
    const size_t slot = P == 1 ? static_cast<size_t>(q) : 0;
    whole_max[slot] = std::max(whole_max[slot], got);
    whole_total[slot] += got;
  }
  auto whole = [&](int64_t q) { return std::pair(whole_max[static_cast<size_t>(q)], whole_total[static_cast<size_t>(q)]); };
  int64_t best = P == 1 ? r.to[0] : 0;
  if (P == 1)
    for (int64_t q = 0; q < Q; ++q)
      if (whole(q) < whole(best)) best = q;
  if (std::pair(tiles_max, tiles_total) >= whole(best)) {
    if (P == 1) r.to[0] = best;
    return;
  }
  std::fill(r.to.begin(), r.to.end(), -1);
  r.tile_to = std::make_shared<const std::vector<int64_t>>(std::move(tile_to));
  r.tiles = S;
  r.target_tiles = T;
  for (size_t i = 0; i < covered.size(); ++i) {
    const int64_t dev = target.devices()[i], t = target.TileOf(dev);
    if (t >= 0 && covered[i] < target.TileElements(t)) r.partly_filled.push_back(dev);
  }
}


// `plan` simulated (or too large to), compiled and run in-process over the
// transport `iter` picks, every element checked and every step's bytes
// against the plan's.
void ExpectExactRun(const CollectivePlan& plan, int iter, const std::string& text) {
  const SimulationReport sim = SimulatePlan(plan);
  ASSERT_TRUE(sim.ok() || sim.too_large) << text << ": " << sim.first_problem;
  Result<PlanProgram> program = PlanProgram::Compile(plan);
  ASSERT_TRUE(program.ok()) << text << ": " << program.status();
  const Transport transport = std::vector<Transport>{Transport::kStaged, Transport::kDirect, Transport::kRanks}[iter % 3];
  Result<CheckReport> report = RunChecked(*program, 2, transport);
  ASSERT_TRUE(report.ok()) << text << ": " << report.status();
  ASSERT_TRUE(report->ok()) << text << ", plan " << ::testing::PrintToString(plan.OpNames()) << ": "
                            << report->first_problem;
  testing::ExpectPlannedTraffic(plan, program->devices(), report->stats.steps, text);
}

TEST(ReductionPlanProperty, RandomPartialPairsAreExactAndBounded) {
  std::mt19937_64 rng(2026120206);
  int planned = 0, at_bound = 0, single_keeper = 0, single_at_bound = 0;
  double worst_gap = 1.0, worst_even_gap = 1.0;
  int even_planned = 0, even_at_bound = 0;
  std::string worst, worst_even;
  int pairs = 0, executed = 0, backend_reduce_scatters = 0, backend_all_reduces = 0, priced_reduce_scatters = 0,
      priced_all_reduces = 0;
  int dtensor_priced = 0, dtensor_priced_bytes = 0, dtensor_faster = 0, dtensor_fewer_bytes = 0, dtensor_more_bytes = 0;
  int dtensor_taken_default = 0, dtensor_taken_bytes = 0, relayed_plans = 0;
  std::map<std::string, int> dtensor_faster_why;
  for (int iter = 0; pairs < 3000 && iter < 30000; ++iter) {
    const std::optional<testing::PartialPair> drawn = testing::DrawPartialPair(rng);
    if (!drawn) continue;
    ++pairs;
    const Mesh& mesh = drawn->mesh;
    const std::vector<int64_t>& shape = drawn->shape;
    const Layout& source = drawn->source;
    const Layout& target = drawn->target;
    const std::string text = "iter " + std::to_string(iter) + ": " + drawn->text;
    for (bool bytes_only : {false, true}) {
      PlannerOptions o;
      o.meshes = {mesh};  // the mesh the layouts were stated over, as callers pass it
      if (bytes_only) o.topology = o.topology.BandwidthOnly();
      Result<PlanResult> r = PlanReshard(source, target, o);
      ASSERT_TRUE(r.ok()) << text << ": " << r.status();
      ++planned;
      const SimulationReport sim = SimulatePlan(r->plan);
      ASSERT_TRUE(sim.ok()) << text << ": " << sim.first_problem;
      // Never above reducing first with an all-reduce, as priced. DTensor's
      // order is a real sequence of steps: never below the bound.
      for (const BaselineCost& b : r->baselines) {
        if (b.name == "all_reduce_first" && !bytes_only) {
          EXPECT_LE(r->plan.totals().time_us, b.time_us * (1 + 1e-9) + 1e-9) << text;
        }
        if (b.name != "dtensor_order") continue;
        EXPECT_GE(b.max_recv_bytes, r->lower_bound.max_recv_bytes) << text;
        if (r->memory_cap_bytes > 0 && b.peak_bytes > r->memory_cap_bytes) continue;  // compared where it fits the cap
        ++(bytes_only ? dtensor_priced_bytes : dtensor_priced);
        if (bytes_only) {
          dtensor_fewer_bytes += b.max_recv_bytes < r->plan.totals().max_recv_bytes;
          dtensor_more_bytes += b.max_recv_bytes > r->plan.totals().max_recv_bytes;
        } else if (b.time_us * (1 + 1e-9) + 1e-9 < r->plan.totals().time_us) {
          ++dtensor_faster;
          // Why it is not the plan: the candidate's note.
          for (const PlanCandidate& c : r->candidates)
            if (!c.steps.empty() && c.steps[0].starts_with("DTensor's order")) ++dtensor_faster_why[c.note];
        }
      }
      // DTensor's order taken as the plan (it keeps the reduction pending
      // over some axes between steps): run it, whichever model chose it.
      bool dtensor_taken = false;
      for (const PlanCandidate& c : r->candidates)
        dtensor_taken |= c.note == "chosen" && !c.steps.empty() && c.steps[0].starts_with("DTensor's order");
      if (dtensor_taken) {
        ++(bytes_only ? dtensor_taken_bytes : dtensor_taken_default);
        ASSERT_NO_FATAL_FAILURE(ExpectExactRun(r->plan, iter, text));
      }
      // A relayed exchange (relay.h) taken as the plan: run it too, over
      // each transport in turn.
      bool relays = false;
      for (const PlanStep& st : r->plan.steps()) relays |= !st.relays.empty();
      if (relays) {
        ASSERT_NO_FATAL_FAILURE(ExpectExactRun(r->plan, relayed_plans, text));
        ++relayed_plans;
      }
      const int64_t got = r->plan.totals().max_recv_bytes, bound = r->lower_bound.max_recv_bytes;
      ASSERT_GE(got, bound) << text;  // a bound below every plan the simulator accepted
      if (!bytes_only) continue;
      bool single = true;
      for (int64_t tile = 0; tile < target.num_tiles() && single; ++tile) single = target.Holders(tile).size() <= 1;
      at_bound += got == bound;
      if (single) {
        ++single_keeper;
        single_at_bound += got == bound;
      }
      bool even = true;
      for (int64_t e : shape) even = even && e % mesh.num_devices() == 0;
      if (getenv("RESHARD_SHOW_GAPS") && got != bound && even) std::cout << "gap " << got << " / " << bound << " " << text << "\n";
      if (even) {
        ++even_planned;
        even_at_bound += got == bound;
        if (bound > 0 && static_cast<double>(got) / bound > worst_even_gap) {
          worst_even_gap = static_cast<double>(got) / bound;
          worst_even = text + ": " + std::to_string(got) + " B against " + std::to_string(bound);
        }
      }
      if (bound > 0 && static_cast<double>(got) / bound > worst_gap) {
        worst_gap = static_cast<double>(got) / bound;
        worst = text + ": " + std::to_string(got) + " B against " + std::to_string(bound);
      }
    }
    // Executed: the default plan, in an element type of its own, by the
    // in-process executor over each transport in turn, every element
    // checked and every step's bytes against the plan's.
    const DType types[] = {DType::kF32, DType::kS32, DType::kBF16, DType::kF16, DType::kS8,
                           DType::kU8,  DType::kU64, DType::kF64,  DType::kC64};
    DType dtype = types[pairs % 9];
    const ReduceOp op = source.reduction().op;
    if (!CheckReducible(dtype, op).ok()) dtype = DType::kF64;
    const Layout typed_source = testing::Retyped(source, dtype), typed_target = testing::Retyped(target, dtype);
    PlannerOptions o;
    o.meshes = {mesh};
    Result<PlanResult> r = PlanReshard(typed_source, typed_target, o);
    ASSERT_TRUE(r.ok()) << text << " as " << DTypeName(dtype) << ": " << r.status();
    Result<PlanProgram> program = PlanProgram::Compile(r->plan);
    ASSERT_TRUE(program.ok()) << text << " as " << DTypeName(dtype) << ": " << program.status();
    const Transport transport = std::vector<Transport>{Transport::kStaged, Transport::kDirect, Transport::kRanks}[pairs % 3];
    // Threads as ranks with priced chunks every other time: planned
    // reduce-scatters and all-reduces then run as the backend's
    // (Comm::StartReduceScatter, StartAllReduce).
    RankChoice ranks;
    ranks.priced_chunks = transport == Transport::kRanks && (pairs / 3) % 2 == 1;
    Result<CheckReport> report = RunChecked(*program, 2, transport, ranks);
    ASSERT_TRUE(report.ok()) << text << ": " << report.status();
    ASSERT_TRUE(report->ok()) << text << " as " << DTypeName(dtype) << ", plan " << ::testing::PrintToString(r->plan.OpNames()) << ": "
                              << report->first_problem;
    testing::ExpectPlannedTraffic(r->plan, program->devices(), report->stats.steps, text, ranks.priced_chunks);
    for (const std::string& t : report->stats.rank_transports) {
      backend_reduce_scatters += t == "reduce_scatter over groups";
      backend_all_reduces += t == "allreduce over groups";
    }
    if (ranks.priced_chunks)
      for (const PlanStep& st : r->plan.steps())
        (st.op == StepOp::kReduceScatter ? priced_reduce_scatters : priced_all_reduces) +=
            st.op == StepOp::kReduceScatter || st.op == StepOp::kAllReduce;
    ++executed;
  }
  EXPECT_EQ(pairs, 3000);
  std::cout << "relayed exchanges taken as the plan and run: " << relayed_plans << "\n";
  std::cout << "DTensor's order (baseline dtensor_order) within the memory cap on " << dtensor_priced
            << " pairs; taken as the plan (and run) on " << dtensor_taken_default << ", by bytes on "
            << dtensor_taken_bytes << "; still faster than the plan on " << dtensor_faster << " (";
  for (auto it = dtensor_faster_why.begin(); it != dtensor_faster_why.end(); ++it)
    std::cout << (it == dtensor_faster_why.begin() ? "" : "; ") << it->second << " " << it->first;
  std::cout << "); priced by bytes, fewer bytes into the busiest device on " << dtensor_fewer_bytes
            << " of " << dtensor_priced_bytes << ", more on " << dtensor_more_bytes << "\n";
  std::cout << "partial plans executed in-process (staged, direct and threads as ranks in turn): " << executed
            << " pairs, every element checked; with priced chunks (threads as ranks), " << backend_reduce_scatters
            << " of the " << priced_reduce_scatters << " planned reduce-scatters reduced by the backend's reduce-scatter, "
            << backend_all_reduces << " of the " << priced_all_reduces << " all-reduces by its all-reduce\n";
  EXPECT_GT(backend_reduce_scatters, 50);
  EXPECT_GT(backend_all_reduces, 20);
  std::cout << "partial plans: " << planned << " planned and simulated; priced by bytes, " << at_bound
            << " at the lower bound; of those whose target keeps each element once, " << single_at_bound << " of "
            << single_keeper << "; largest gap " << worst_gap << "x (" << worst << "); even shapes: " << even_at_bound
            << " of " << even_planned << " at the bound, largest gap " << worst_even_gap << "x (" << worst_even << ")\n";
}

// The reducing exchange's floors, by which the planners draft it only where
// it could win (its transfers are every part into every device), never
// exceed its draft: time and peak, on every topology kind, into plain and
// partial targets (those whose parts are routed whole).
TEST(ReductionPlanProperty, ReducingExchangeFloorsNeverExceedItsDraft) {
  std::mt19937_64 rng(2026120501);
  int checked = 0, into_partial = 0, relayed = 0;
  for (int iter = 0; checked < 2000 && iter < 40000; ++iter) {
    const std::optional<testing::PartialPair> drawn = testing::DrawPartialPair(rng, /*partial_target=*/iter % 2 == 1);
    if (!drawn || !drawn->source.partial()) continue;
    const Layout& source = drawn->source;
    const Layout& target = drawn->target;
    const int64_t n = drawn->mesh.num_devices();
    const LowerBound lb = ComputeLowerBound(source, target);
    const std::vector<Exchange> parts = Exchange::CreateReducing(source, target).value();
    bool floored = false;
    for (const Topology& topology :
         {Topology::Flat(), Topology::Nodes(2), Topology::Nodes(4), Topology::Torus({n}), Topology::Flat().BandwidthOnly()}) {
      const std::optional<ReducingExchangeFloors> floor = ReducingExchangeFloor(source, target, topology, lb);
      // (None only where parts are routed tile by tile.)
      ASSERT_EQ(floor.has_value(), !Exchange::RouteParts(source, target).tile_to) << drawn->text;
      if (!floor) continue;
      floored = true;
      const ExchangeDraft draft = DraftReducingExchange(parts, target, topology);
      EXPECT_LE(floor->time_us, draft.time_us * (1 + 1e-12)) << drawn->text;
      EXPECT_LE(floor->peak_bytes, draft.peak_bytes) << drawn->text;
      // And its relayed form (relay.h), where relays help.
      const std::vector<Relay> relays = FindRelays(parts, source, target, draft.recv_bytes);
      if (relays.empty()) continue;
      ++relayed;
      const ExchangeDraft with = DraftReducingExchange(parts, target, topology, relays);
      EXPECT_LE(floor->time_us, with.time_us * (1 + 1e-12)) << drawn->text;
      EXPECT_LE(floor->peak_bytes, with.peak_bytes) << drawn->text;
      EXPECT_LT(with.max_recv_bytes, draft.max_recv_bytes) << drawn->text;
      EXPECT_GE(with.max_recv_bytes, lb.max_recv_bytes) << drawn->text;
    }
    checked += floored;
    into_partial += floored && target.partial();
  }
  EXPECT_GE(checked, 2000);
  EXPECT_GE(into_partial, 200);  // (most partial targets here are routed tile by tile)
  std::cout << "relayed drafts: " << relayed << "\n";
  EXPECT_GE(relayed, 100);
}

// Relays (relay.h) on random partial sums into layouts with no reduction:
// the reducing exchange priced by bytes, with memory to spare (a relayed
// exchange holds a copy of each shard), relayed where that lowers the
// busiest receiver; every relayed plan simulated and run over each transport
// in turn, every element checked and every device's bytes against the
// plan's, never below the bound.
TEST(ReductionPlanProperty, RelayedExchangesAreExactAndLowerTheBusiestReceive) {
  std::mt19937_64 rng(2026120502);
  int pairs = 0, relayed = 0, at_bound = 0, direct_at_bound = 0;
  for (int iter = 0; relayed < 300 && iter < 20000; ++iter) {
    const std::optional<testing::PartialPair> drawn = testing::DrawPartialPair(rng);
    if (!drawn || !drawn->source.partial() || drawn->target.partial()) continue;
    ++pairs;
    PlannerOptions o;
    o.meshes = {drawn->mesh};
    o.topology = o.topology.BandwidthOnly();
    o.strategy = Strategy::kExchange;
    o.memory_cap_bytes = int64_t{1} << 40;
    Result<PlanResult> r = PlanReshard(drawn->source, drawn->target, o);
    ASSERT_TRUE(r.ok()) << drawn->text << ": " << r.status();
    ASSERT_EQ(r->plan.steps().size(), 1u) << drawn->text;
    const PlanStep& step = r->plan.steps()[0];
    if (step.relays.empty()) continue;
    ++relayed;
    const std::string text = "iter " + std::to_string(iter) + ": " + drawn->text;
    // Fewer bytes into the busiest device than the exchange without relays, never below the bound.
    const std::vector<Exchange> parts = Exchange::CreateReducing(step.input, step.output).value();
    ASSERT_TRUE(RelaysHold(step.relays, parts, step.input, step.output).ok()) << text;
    const ExchangeDraft direct = DraftReducingExchange(parts, step.output, o.topology);
    const int64_t got = r->plan.totals().max_recv_bytes, bound = r->lower_bound.max_recv_bytes;
    EXPECT_LT(got, direct.max_recv_bytes) << text;
    EXPECT_GE(got, bound) << text;
    at_bound += got == bound;
    direct_at_bound += direct.max_recv_bytes == bound;
    ASSERT_NO_FATAL_FAILURE(ExpectExactRun(r->plan, relayed, text));
  }
  std::cout << "relayed exchanges: " << relayed << " of " << pairs << " random partial sums into plain layouts, "
            << at_bound << " of them at the lower bound (" << direct_at_bound << " without relays)\n";
  EXPECT_GE(relayed, 300);
  EXPECT_GT(at_bound, direct_at_bound);
}

// The part matching of Exchange::RouteParts stated pair by pair, every
// source part against every target part, as it was computed before it
// matched parts through the devices they share: the oracle for the faster
// rule. Source part -> target part (-1: none); parts routed whole.
std::vector<int64_t> PairwiseRoutes(const Layout& source, const Layout& target) {
  const int64_t P = source.reduction().parts, Q = target.reduction().parts;
  const ReduceOp sop = source.reduction().op, top = target.reduction().op;
  std::vector<int64_t> to(static_cast<size_t>(P), -1);
  if (!target.partial()) return to;
  std::vector<std::vector<int64_t>> overlap(static_cast<size_t>(P), std::vector<int64_t>(static_cast<size_t>(Q), 0));
  for (int64_t dev : target.devices())
    if (target.TileOf(dev) >= 0 && source.TileOf(dev) >= 0)
      ++overlap[static_cast<size_t>(source.PartOf(dev))][static_cast<size_t>(target.PartOf(dev))];
  std::vector<int64_t> load(static_cast<size_t>(Q), 0);
  std::vector<bool> taken(static_cast<size_t>(Q), false);
  auto best = [&](int64_t p) {
    int64_t b = -1;
    for (int64_t q = 0; q < Q; ++q) {
      if (taken[static_cast<size_t>(q)]) continue;
      const int64_t o = overlap[static_cast<size_t>(p)][static_cast<size_t>(q)];
      if (b < 0 || o > overlap[static_cast<size_t>(p)][static_cast<size_t>(b)] ||
          (o == overlap[static_cast<size_t>(p)][static_cast<size_t>(b)] &&
           load[static_cast<size_t>(q)] < load[static_cast<size_t>(b)]))
        b = q;
    }
    return b;
  };
  if (top == ReduceOp::kAvg && P > 1 && sop == ReduceOp::kAvg && P == Q) {
    for (int64_t p = 0; p < P; ++p) taken[static_cast<size_t>(to[static_cast<size_t>(p)] = best(p))] = true;
    return to;
  }
  if (top == ReduceOp::kAvg && target.dtype() == DType::kF16) return to;
  const ReduceOp as = top == ReduceOp::kAvg ? ReduceOp::kSum : top;
  if (P == 1 || sop == as) {
    for (int64_t p = 0; p < P; ++p) ++load[static_cast<size_t>(to[static_cast<size_t>(p)] = best(p))];
    return to;
  }
  int64_t into = 0, most = -1;
  for (int64_t q = 0; q < Q; ++q) {
    int64_t n = 0;
    for (int64_t p = 0; p < P; ++p) n += overlap[static_cast<size_t>(p)][static_cast<size_t>(q)];
    if (n > most) most = n, into = q;
  }
  std::fill(to.begin(), to.end(), into);
  return to;
}

// RouteParts matches source parts to target parts as the pairwise rule
// does, on random partial pairs with more than one source part whose parts
// are routed whole (with one part, or tile routes, its tile routing may
// replace the match).
// RouteTiles (linear in its routes and devices) against the quadratic rule
// it replaced, on random pairs into partial targets (plain and partial
// sources, every op pair, uneven shapes, replicas, permuted device orders)
// with the part routes of RouteParts and random ones, both modes: the same
// routes, the same choice against whole parts, the same partly filled
// devices.
TEST(ReductionPlanProperty, TileRoutesMatchTheQuadraticRule) {
  std::mt19937_64 rng(2026120505);
  int checked = 0, tiled = 0;
  for (int iter = 0; checked < 3000 && iter < 60000; ++iter) {
    const std::optional<testing::PartialPair> drawn =
        iter % 3 == 0 ? testing::DrawSamePartsPair(rng) : testing::DrawPartialPair(rng, /*partial_target=*/true);
    if (!drawn || !drawn->target.partial()) continue;
    const Layout& source = drawn->source;
    const Layout& target = drawn->target;
    const int64_t P = source.reduction().parts, Q = target.reduction().parts;
    for (const bool together : {false, true}) {
      PartRoutes start = Exchange::RouteParts(source, target);
      start.tile_to = nullptr;
      start.tiles = start.target_tiles = 0;
      start.partly_filled.clear();
      if (rng() % 2 == 0)
        for (int64_t& q : start.to) q = static_cast<int64_t>(rng() % static_cast<uint64_t>(Q + 1)) - 1;
      if (P == 1 && start.to[0] < 0) start.to[0] = 0;
      PartRoutes fast = start, slow = start;
      RouteTiles(source, target, together, fast);
      QuadraticRouteTiles(source, target, together, slow);
      const std::string what = drawn->text + (together ? " (together)" : "");
      EXPECT_EQ(fast.to, slow.to) << what;
      ASSERT_EQ(fast.tile_to == nullptr, slow.tile_to == nullptr) << what;
      if (fast.tile_to) {
        EXPECT_EQ(*fast.tile_to, *slow.tile_to) << what;
        ++tiled;
      }
      EXPECT_EQ(fast.tiles, slow.tiles) << what;
      EXPECT_EQ(fast.target_tiles, slow.target_tiles) << what;
      EXPECT_EQ(fast.partly_filled, slow.partly_filled) << what;
    }
    ++checked;
  }
  EXPECT_GE(checked, 3000);
  EXPECT_GT(tiled, 300);
  std::cout << "tile routes equal to the quadratic rule's on " << checked << " pairs, both modes; " << tiled
            << " routed tile by tile\n";
}

// The bound's receptions, summed tile pair by tile pair from every keeper's
// holding (ElementReceptions, as the bound computed them before
// TileKeepers): equal to ReductionLowerBound's total on random pairs into
// partial and plain targets (replicas, uneven shapes, every op pair,
// permuted device orders).
TEST(ReductionPlanProperty, BoundReceptionsMatchEveryKeepersSum) {
  std::mt19937_64 rng(2026120506);
  int checked = 0, partial_targets = 0;
  for (int iter = 0; checked < 3000 && iter < 60000; ++iter) {
    const std::optional<testing::PartialPair> drawn =
        iter % 3 == 0 ? testing::DrawSamePartsPair(rng) : testing::DrawPartialPair(rng, /*partial_target=*/iter % 3 == 1);
    if (!drawn) continue;
    const Layout& a = drawn->source;
    const Layout& b = drawn->target;
    const int64_t P = a.reduction().parts, Q = b.reduction().parts;
    const bool splits = ReductionSplits(P, a.reduction().op, Q, b.reduction().op, a.dtype());
    int64_t receptions = 0;
    std::vector<int64_t> holder_parts, keeper_parts;
    for (int64_t t = 0; t < b.num_tiles(); ++t) {
      const std::span<const int64_t> keepers = b.Holders(t);
      if (b.TileElements(t) == 0 || keepers.empty()) continue;
      const std::vector<int32_t> tc = b.TileCoords(t);
      for (int64_t s = 0; s < a.num_tiles(); ++s) {
        const std::vector<int32_t> sc = a.TileCoords(s);
        int64_t n = 1;
        for (int64_t d = 0; d < a.rank(); ++d) n *= OverlapLength(a.TileIntervals(d, sc[d]), b.TileIntervals(d, tc[d]));
        if (n == 0) continue;
        holder_parts.clear();
        keeper_parts.clear();
        for (int64_t r : keepers) {
          holder_parts.push_back(a.TileOf(r) == s ? a.PartOf(r) : -1);
          keeper_parts.push_back(b.PartOf(r));
        }
        receptions += n * ElementReceptions(P, Q, holder_parts, keeper_parts, splits);
      }
    }
    // (Into a plain target from partial sums every element takes at least
    // one reception a keeper, so the receptions are the whole total.)
    EXPECT_EQ(ReductionLowerBound(a, b).total_bytes, receptions * a.element_bytes()) << drawn->text;
    partial_targets += Q > 1;
    ++checked;
  }
  EXPECT_GE(checked, 3000);
  EXPECT_GT(partial_targets, 1000);
}

TEST(ReductionPlanProperty, RoutePartsMatchesThePairwiseRule) {
  std::mt19937_64 rng(2026120503);
  int checked = 0;
  for (int iter = 0; checked < 1500 && iter < 40000; ++iter) {
    const std::optional<testing::PartialPair> drawn =
        iter % 3 == 0 ? testing::DrawSamePartsPair(rng) : testing::DrawPartialPair(rng, /*partial_target=*/true);
    if (!drawn || drawn->source.reduction().parts < 2) continue;
    for (const DType dtype : {DType::kF32, DType::kF16}) {
      const Layout source = testing::Retyped(drawn->source, dtype), target = testing::Retyped(drawn->target, dtype);
      const PartRoutes routes = Exchange::RouteParts(source, target);
      if (routes.tile_to) continue;
      EXPECT_EQ(routes.to, PairwiseRoutes(source, target)) << drawn->text << " (" << DTypeName(dtype) << ")";
    }
    ++checked;
  }
  EXPECT_GE(checked, 1500);
}

// What a step from partial sums moves is checked against its price by
// ReducingExchangeBytes, which builds each part's exchange among its own
// devices where parts are routed whole (linear in devices): on random pairs
// into partial targets (tile routes and whole parts) and between partial
// sums over the same axes, it equals, device by device, the sends and
// receives of CreateReducing's exchanges over every device, and those of
// DraftReducingExchange; each part on its own devices holds what
// PartLayout gives those devices.
TEST(ReductionPlanProperty, ReducingExchangeBytesEqualItsExchanges) {
  std::mt19937_64 rng(2026120502);
  int checked = 0, whole = 0;
  for (int iter = 0; checked < 1500 && iter < 40000; ++iter) {
    const std::optional<testing::PartialPair> drawn =
        iter % 3 == 0 ? testing::DrawSamePartsPair(rng) : testing::DrawPartialPair(rng, /*partial_target=*/true);
    if (!drawn) continue;
    const Layout& source = drawn->source;
    const Layout& target = drawn->target;
    const Result<std::vector<Exchange>> parts = Exchange::CreateReducing(source, target);
    ASSERT_TRUE(parts.ok()) << drawn->text << ": " << parts.status();
    const Result<ReducingExchangeTraffic> bytes = ReducingExchangeBytes(source, target);
    ASSERT_TRUE(bytes.ok()) << drawn->text << ": " << bytes.status();
    const std::vector<int64_t> devices = DevicesOfBoth(source, target);
    std::vector<int64_t> send(devices.size(), 0), recv(devices.size(), 0);
    for (const Exchange& ex : *parts)
      ex.ForEachTransfer([&](const Transfer& t) {
        if (t.from == t.to) return;
        send[static_cast<size_t>(PositionIn(devices, t.from))] += t.elements * source.element_bytes();
        recv[static_cast<size_t>(PositionIn(devices, t.to))] += t.elements * source.element_bytes();
      });
    EXPECT_EQ(bytes->send_bytes, send) << drawn->text;
    EXPECT_EQ(bytes->recv_bytes, recv) << drawn->text;
    const ExchangeDraft draft = DraftReducingExchange(*parts, target, Topology::Flat());
    EXPECT_EQ(bytes->send_bytes, draft.send_bytes) << drawn->text;
    EXPECT_EQ(bytes->recv_bytes, draft.recv_bytes) << drawn->text;
    const PartRoutes routes = Exchange::RouteParts(source, target);
    whole += !routes.tile_to && std::all_of(routes.to.begin(), routes.to.end(), [](int64_t q) { return q >= 0; });
    for (const Layout* l : {&source, &target}) {
      const std::vector<std::vector<int64_t>> by_part = l->DevicesByPart();
      ASSERT_EQ(static_cast<int64_t>(by_part.size()), l->reduction().parts);
      size_t listed = 0;
      for (int64_t p = 0; p < l->reduction().parts; ++p) {
        const std::vector<int64_t>& mine = by_part[static_cast<size_t>(p)];
        listed += mine.size();
        const Layout alone = l->PartLayoutOn(p, mine).value();
        const Layout full = l->PartLayout(p);
        ASSERT_EQ(alone.devices(), mine);
        for (int64_t dev : mine) {
          EXPECT_EQ(l->PartOf(dev), p) << drawn->text << ", device " << dev;
          EXPECT_EQ(alone.TileOf(dev), full.TileOf(dev)) << drawn->text << ", device " << dev;
        }
      }
      EXPECT_EQ(listed, l->devices().size()) << drawn->text;
    }
    ++checked;
  }
  EXPECT_GE(checked, 1500);
  EXPECT_GE(whole, 500);
  std::fprintf(stderr, "ReducingExchangeBytes: %d pairs, %d with parts routed whole\n", checked, whole);
}

// Whether every extent of the pair's shape is a multiple of its devices.
bool EvenShape(const testing::PartialPair& pair) {
  for (int64_t e : pair.shape)
    if (e % pair.mesh.num_devices() != 0) return false;
  return true;
}

// Planner options for collectives only (no ragged exchange), priced by bytes, over `mesh`.
PlannerOptions CollectivesByBytes(const Mesh& mesh) {
  PlannerOptions o;
  o.meshes = {mesh};
  o.strategy = Strategy::kCollectives;
  o.topology = o.topology.BandwidthOnly();
  return o;
}

// Partial sums into partial sums over the same mesh axes and op (issue 17:
// structured plans into partial targets): under Strategy::kCollectives, with
// no ragged exchange, each part moves as the array without its reduction
// would. Every such plan is structured (no exchange step), simulated,
// executed in-process and checked element by element and byte by byte;
// priced by bytes it receives what the plain pair's plan receives (the parts
// move alike; no less where that plan permutes) and never less than the
// bound.
TEST(ReductionPlanProperty, SamePartsMoveAlikeAsCollectives) {
  std::mt19937_64 rng(2026120401);
  int pairs = 0, planned = 0, even = 0, even_planned = 0, at_bound = 0, refused_permuted = 0, refused_permute = 0;
  int above_plain = 0;  // planned alike, above the plain plan (which permutes)
  for (int iter = 0; pairs < 800 && iter < 20000; ++iter) {
    const std::optional<testing::PartialPair> drawn = testing::DrawSamePartsPair(rng);
    if (!drawn) continue;
    ++pairs;
    const bool is_even = EvenShape(*drawn);
    even += is_even;
    const std::string text = "iter " + std::to_string(iter) + ": " + drawn->text;
    const PlannerOptions o = CollectivesByBytes(drawn->mesh);
    Result<PlanResult> r = PlanReshard(drawn->source, drawn->target, o);
    PlannerOptions plain = o;
    Result<PlanResult> p = PlanReshard(drawn->source.WithoutReduction(), drawn->target.WithoutReduction(), plain);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kNotSupported) << text << ": " << r.status();
      // Even pairs over meshes in device order that the plain search plans
      // move alike; not so with the device order permuted (parts are
      // numbered tile by tile in another order, partial_target_planner.cc),
      // nor where the plain plan permutes (its pairs may take a replica of
      // another part).
      bool permutes = false;
      if (p.ok())
        for (const PlanStep& s : p->plan.steps()) permutes |= s.op == StepOp::kCollectivePermute;
      EXPECT_FALSE(is_even && p.ok() && drawn->mesh.is_iota() && !permutes) << text << ": " << r.status();
      refused_permuted += is_even && p.ok() && !drawn->mesh.is_iota();
      refused_permute += is_even && p.ok() && drawn->mesh.is_iota() && permutes;
      continue;
    }
    ++planned;
    even_planned += is_even;
    for (const PlanStep& s : r->plan.steps()) EXPECT_NE(s.op, StepOp::kExchange) << text;
    ASSERT_TRUE(p.ok()) << text << ": " << p.status();
    // The plain plan's bytes, unless it permutes (a permute may pair devices
    // of different parts: then another path, no cheaper).
    bool permutes = false;
    for (const PlanStep& s : p->plan.steps()) permutes |= s.op == StepOp::kCollectivePermute;
    if (permutes) {
      EXPECT_GE(r->plan.totals().max_recv_bytes, p->plan.totals().max_recv_bytes) << text;
      above_plain += r->plan.totals().max_recv_bytes > p->plan.totals().max_recv_bytes;
    } else {
      EXPECT_EQ(r->plan.totals().max_recv_bytes, p->plan.totals().max_recv_bytes) << text;
    }
    EXPECT_GE(r->plan.totals().max_recv_bytes, r->lower_bound.max_recv_bytes) << text;
    at_bound += r->plan.totals().max_recv_bytes == r->lower_bound.max_recv_bytes;
    ASSERT_NO_FATAL_FAILURE(ExpectExactRun(r->plan, iter, text));
  }
  EXPECT_EQ(pairs, 800);
  std::cout << "same parts: " << planned << " of " << pairs << " pairs planned as collectives (" << even_planned << " of "
            << even << " even; of the even ones, " << refused_permuted << " refused over permuted device orders, "
            << refused_permute << " where the plain plan permutes), " << at_bound << " at the lower bound by bytes, "
            << above_plain << " above the plain pair's plan (a permute there)\n";
}

// Partial sums into partial sums over some of the source's partial axes
// (issue 17: partial on several mesh axes at once): under
// Strategy::kCollectives, one reduce-scatter over the dropped axes, first
// (then the parts move alike over the target's axes; the oracles compose
// the steps' routes) or last (after the parts moved alike over all the
// source's). Every
// such plan is structured, simulated, executed in-process and checked
// element by element and byte by byte; priced by bytes it never receives
// less than the bound. Where it is one reduce-scatter, the shape even and
// the source without replicas (which could share the reduction), it is at
// the bound.
TEST(ReductionPlanProperty, FewerPartsReduceOnceAsCollectives) {
  std::mt19937_64 rng(2026120502);
  int pairs = 0, planned = 0, at_bound = 0, one_step = 0, one_step_even = 0, one_step_even_at_bound = 0;
  int reduced_first = 0;  // of plans of several steps
  for (int iter = 0; pairs < 600 && iter < 40000; ++iter) {
    const std::optional<testing::PartialPair> drawn = testing::DrawFewerPartsPair(rng);
    if (!drawn) continue;
    ++pairs;
    const bool is_even = EvenShape(*drawn);
    const std::string text = "iter " + std::to_string(iter) + ": " + drawn->text;
    const PlannerOptions o = CollectivesByBytes(drawn->mesh);
    Result<PlanResult> r = PlanReshard(drawn->source, drawn->target, o);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kNotSupported) << text << ": " << r.status();
      continue;
    }
    ++planned;
    for (const PlanStep& s : r->plan.steps()) EXPECT_NE(s.op, StepOp::kExchange) << text;
    ASSERT_FALSE(r->plan.steps().empty()) << text;
    // One reduce-scatter, first or last.
    int reductions = 0;
    for (const PlanStep& s : r->plan.steps()) reductions += s.op == StepOp::kReduceScatter;
    EXPECT_EQ(reductions, 1) << text;
    const bool first = r->plan.steps().front().op == StepOp::kReduceScatter;
    EXPECT_TRUE(first || r->plan.steps().back().op == StepOp::kReduceScatter) << text;
    reduced_first += first && r->plan.steps().size() > 1;
    EXPECT_GE(r->plan.totals().max_recv_bytes, r->lower_bound.max_recv_bytes) << text;
    at_bound += r->plan.totals().max_recv_bytes == r->lower_bound.max_recv_bytes;
    if (r->plan.steps().size() == 1) {
      ++one_step;
      // (Replicas of the partial values, over axes that neither split the
      // source nor hold its parts, could share the reduction: a lower bound.)
      const Layout& src = drawn->source;
      const bool no_replicas = src.num_tiles() * src.reduction().parts == drawn->mesh.num_devices();
      one_step_even += is_even && no_replicas;
      one_step_even_at_bound +=
          is_even && no_replicas && r->plan.totals().max_recv_bytes == r->lower_bound.max_recv_bytes;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectExactRun(r->plan, iter, text));
  }
  EXPECT_EQ(pairs, 600);
  EXPECT_GE(planned, 150);
  EXPECT_GE(one_step_even, 20);
  EXPECT_EQ(one_step_even_at_bound, one_step_even);
  EXPECT_GE(reduced_first, 10);
  std::cout << "fewer parts: " << planned << " of " << pairs << " pairs planned as collectives, " << at_bound
            << " at the lower bound by bytes; " << reduced_first << " of several steps reducing first; " << one_step << " one reduce-scatter (" << one_step_even_at_bound
            << " of " << one_step_even << " even ones from sources without replicas at the bound)\n";
}

// Partial layouts in every notation (random_layouts.h: DTensor Partial with
// uneven splits, JAX, Shardy and HLO V3 unreduced axes, sub-axes) to random
// layouts in every notation, on the same devices or others: every pair is
// planned (structured where the layouts allow, else the reducing exchange),
// simulated, executed in-process in one of nine element types and checked
// element by element and byte by byte against the plan; and once more as
// the reducing exchange alone.
TEST(ReductionPlanProperty, PartialLayoutsInEveryNotationRun) {
  std::mt19937_64 rng(2026120207);
  const DType types[] = {DType::kF32, DType::kS32, DType::kBF16, DType::kF16, DType::kS8,
                         DType::kU8,  DType::kU64, DType::kF64,  DType::kC64};
  int pairs = 0, exchanges = 0, structured = 0;
  for (int iter = 0; pairs < 1000 && iter < 20000; ++iter) {
    const std::vector<int64_t> shape = testing::RandomShape(rng, 3, 400);
    const Mesh mesh = testing::RandomMesh(rng, 0, 16);
    int64_t parts = 1;
    const testing::RandomLayout a = testing::RandomPartialLayoutText(rng, shape, mesh, &parts);
    const Mesh other = rng() % 3 == 0 ? testing::RandomMesh(rng, static_cast<int64_t>(rng() % 4), 16) : mesh;
    const testing::RandomLayout b = testing::RandomLayoutText(rng, shape, other);
    DType dtype = types[iter % 9];
    Result<ParsedLayout> src = ParseLayout(a.text, shape, dtype, a.mesh);
    Result<ParsedLayout> dst = ParseLayout(b.text, shape, dtype, b.mesh);
    if (!src.ok() || !dst.ok() || !src->layout.partial()) continue;
    if (!CheckReducible(dtype, src->layout.reduction().op).ok()) {
      dtype = DType::kF64;
      src = ParseLayout(a.text, shape, dtype, a.mesh);
      dst = ParseLayout(b.text, shape, dtype, b.mesh);
    }
    ++pairs;
    const std::string text = "iter " + std::to_string(iter) + " (" + std::string(DTypeName(dtype)) + "): --mesh '" +
                             mesh.ToString() + "' --from '" + a.text + "' --to '" + b.text + "'";
    for (Strategy strategy : {Strategy::kAuto, Strategy::kExchange}) {
      PlannerOptions o;
      o.meshes = {mesh};
      o.strategy = strategy;
      Result<PlanResult> r = PlanReshard(src->layout, dst->layout, o);
      ASSERT_TRUE(r.ok()) << text << ": " << r.status();
      const bool exchange = r->plan.steps().size() == 1 && r->plan.steps()[0].op == StepOp::kExchange;
      if (strategy == Strategy::kExchange) {
        ASSERT_TRUE(exchange || r->plan.steps().empty()) << text;
      } else {
        exchanges += exchange;
        structured += !exchange;
      }
      ASSERT_GE(r->plan.totals().max_recv_bytes, r->lower_bound.max_recv_bytes) << text;
      ASSERT_NO_FATAL_FAILURE(ExpectExactRun(r->plan, iter, text));
    }
  }
  EXPECT_EQ(pairs, 1000);
  std::cout << "partial layouts in every notation: " << pairs << " pairs planned, simulated and executed; by the auto "
            << "strategy " << structured << " structured, " << exchanges << " one reducing exchange\n";
}

// Targets with a pending reduction (issue 17): random partial layouts in
// every notation from random layouts, partial (two thirds) or not, on the
// same devices or others. Each is planned as one reducing exchange (each
// source part, or each tile of a source part, routed into one target part,
// part_routes.h's PartRoutes), after reducing first or not, or, from the same
// partial axes and op, as the parts moved alike by structured steps,
// simulated, executed in-process in one of nine element types and checked
// exactly (each target device holds the source parts routed to its part,
// combined, or the identity; Exchange.RoutedPartsReduceToTheSourcesReduction
// checks that these reduce to the array), every step's bytes against the
// plan's, and never below the bound.
TEST(ReductionPlanProperty, PartialTargetsInEveryNotationRun) {
  std::mt19937_64 rng(2026120208);
  const DType types[] = {DType::kF32, DType::kS32, DType::kBF16, DType::kF16, DType::kS8,
                         DType::kU8,  DType::kU64, DType::kF64,  DType::kC64};
  int pairs = 0, from_partial = 0, moved_nothing = 0, at_bound = 0, zero_bound_moved = 0;
  int plain_at_bound = 0, plain_zero_bound_moved = 0;  // the same, of plain sources
  int partial_tiled = 0;  // partial sources routed tile by tile
  int reduced_first = 0;  // plans that reduce, then route
  int moved_alike = 0;    // plans that move the parts alike, structured
  int bytes_plan_differs = 0;  // the plan priced by bytes is another plan, and runs too
  int above_avg = 0, above_no_avg = 0;  // above the bound, with an avg on either side or not
  double worst_gap = 1.0, plain_worst_gap = 1.0, no_avg_gap = 1.0;
  std::string worst, plain_worst, no_avg_worst;
  for (int iter = 0; pairs < 2000 && iter < 40000; ++iter) {
    const std::vector<int64_t> shape = testing::RandomShape(rng, 3, 400);
    const Mesh mesh = testing::RandomMesh(rng, 0, 16);
    int64_t parts = 1;
    const bool partial_source = rng() % 3 != 0;
    const testing::RandomLayout a = partial_source ? testing::RandomPartialLayoutText(rng, shape, mesh, &parts)
                                                   : testing::RandomLayoutText(rng, shape, mesh);
    const Mesh other = rng() % 3 == 0 ? testing::RandomMesh(rng, static_cast<int64_t>(rng() % 4), 16) : mesh;
    const testing::RandomLayout b = testing::RandomPartialLayoutText(rng, shape, other, &parts);
    DType dtype = types[iter % 9];
    auto parse = [&]() {
      return std::pair(ParseLayout(a.text, shape, dtype, a.mesh), ParseLayout(b.text, shape, dtype, b.mesh));
    };
    auto [src, dst] = parse();
    if (!src.ok() || !dst.ok() || !dst->layout.partial() || src->layout == dst->layout) continue;
    const bool reducible = (!src->layout.partial() || CheckReducible(dtype, src->layout.reduction().op).ok()) &&
                           CheckReducible(dtype, dst->layout.reduction().op).ok();
    if (!reducible) {
      dtype = DType::kF64;
      std::tie(src, dst) = parse();
    }
    ++pairs;
    from_partial += src->layout.partial();
    const std::string text = "iter " + std::to_string(iter) + " (" + std::string(DTypeName(dtype)) + "): --mesh '" +
                             mesh.ToString() + "' --from '" + a.text + "' --to '" + b.text + "'";
    PlannerOptions o;
    o.meshes = {mesh};
    Result<PlanResult> r = PlanReshard(src->layout, dst->layout, o);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    // One reducing exchange (after reducing first), or the parts moved alike
    // (the axes the target drops reduced by one reduce-scatter).
    const bool alike = r->plan.OpNames().back() != "exchange";
    if (alike) {
      ASSERT_TRUE(src->layout.partial() && src->layout.reduction().op == dst->layout.reduction().op &&
                  dst->layout.reduction().parts <= src->layout.reduction().parts)
          << text;
      ++moved_alike;
    }
    reduced_first += !alike && r->plan.steps().size() > 1;
    ASSERT_GE(r->plan.totals().max_recv_bytes, r->lower_bound.max_recv_bytes) << text;
    moved_nothing += r->plan.totals().max_recv_bytes == 0;
    partial_tiled += src->layout.partial() && Exchange::RouteParts(src->layout, dst->layout).tile_to != nullptr;
    {  // Priced by bytes: how far from the bound.
      PlannerOptions b = o;
      b.topology = b.topology.BandwidthOnly();
      Result<PlanResult> rb = PlanReshard(src->layout, dst->layout, b);
      ASSERT_TRUE(rb.ok()) << text << ": " << rb.status();
      const int64_t got = rb->plan.totals().max_recv_bytes, bound = rb->lower_bound.max_recv_bytes;
      ASSERT_GE(got, bound) << text;
      at_bound += got == bound;
      if (bound > 0 && static_cast<double>(got) / bound > worst_gap) {
        worst_gap = static_cast<double>(got) / bound;
        worst = text + ": " + std::to_string(got) + " B against " + std::to_string(bound);
      }
      zero_bound_moved += bound == 0 && got > 0;
      const bool avg = dst->layout.reduction().op == ReduceOp::kAvg ||
                       (src->layout.partial() && src->layout.reduction().op == ReduceOp::kAvg);
      (avg ? above_avg : above_no_avg) += got > bound;
      if (!avg && bound > 0 && static_cast<double>(got) / bound > no_avg_gap) {
        no_avg_gap = static_cast<double>(got) / bound;
        no_avg_worst = text + ": " + std::to_string(got) + " B against " + std::to_string(bound);
      }
      // The plan by bytes runs too where it is another plan (reduce, then
      // route is taken more often when latency is free).
      if (rb->plan.OpNames() != r->plan.OpNames()) {
        ++bytes_plan_differs;
        ASSERT_NO_FATAL_FAILURE(ExpectExactRun(rb->plan, iter + 1, text + " (priced by bytes)"));
      }
      if (!src->layout.partial()) {
        plain_at_bound += got == bound;
        plain_zero_bound_moved += bound == 0 && got > 0;
        if (bound > 0 && static_cast<double>(got) / bound > plain_worst_gap) {
          plain_worst_gap = static_cast<double>(got) / bound;
          plain_worst = text + ": " + std::to_string(got) + " B against " + std::to_string(bound);
        }
      }
    }
    ASSERT_NO_FATAL_FAILURE(ExpectExactRun(r->plan, iter, text));
  }
  EXPECT_EQ(pairs, 2000);
  EXPECT_GT(partial_tiled, 20);
  std::cout << "partial targets in every notation: " << pairs << " pairs (" << from_partial
            << " from partial sources, " << partial_tiled << " of them routed tile by tile) planned, simulated and executed, " << reduced_first
            << " reducing first, " << moved_alike << " moving the parts alike, the rest as one reducing exchange; "
            << bytes_plan_differs
            << " other plans when priced by bytes, also executed; " << moved_nothing
            << " moved nothing between devices; priced by bytes, " << at_bound << " at the lower bound, "
            << zero_bound_moved << " moving bytes where the bound is 0, largest gap where it is not " << worst_gap
            << "x (" << worst << "); of the " << pairs - from_partial << " from plain sources, " << plain_at_bound
            << " at the lower bound, " << plain_zero_bound_moved << " moving bytes where the bound is 0, largest gap "
            << plain_worst_gap << "x (" << plain_worst << "); above the bound: " << above_avg
            << " with an avg on either side, " << above_no_avg << " without, their largest gap " << no_avg_gap << "x ("
            << no_avg_worst << ")\n";
}

}  // namespace
}  // namespace reshard
