// Property test: the in-process executor runs random plans exactly. Every
// plan is compiled to the flat program (bounds-checked), its coverage
// checked (every output element of every step written once), and executed
// with tagged data, each step's result compared element by element.
// Generators: random layouts in every notation (tests/testing), through
// the exchange and through the planner; and random named pairs (the
// collective-plan property test's generator, repeated here) through the
// planner, so structured steps (all-to-all, all-gather, permute, slice) run.
#include <gtest/gtest.h>

#include "testing/random_named.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "reshard/device_program.h"
#include "exec/exec_checker.h"
#include "reshard/named_sharding.h"
#include "reshard/notation.h"
#include "reshard/planner.h"
#include "testing/planned_traffic.h"
#include "testing/random_layouts.h"

namespace reshard {
namespace {

constexpr DType kDTypes[] = {DType::kU8, DType::kBF16, DType::kF32, DType::kF64, DType::kC128};

// The step runner's choices under Transport::kRanks, taken in turn: each
// transport (no transport forced: as in one process, box messages first,
// or as over MPI), and messages cut into chunks of a few bytes.
RankChoice NextRankChoice() {
  static int turn = 0;
  constexpr StepTransport kTransports[] = {StepTransport::kAuto, StepTransport::kAlltoallv, StepTransport::kPointToPoint,
                                           StepTransport::kDatatypes};
  RankChoice c;
  c.transport = kTransports[turn % 4];
  if (turn % 7 == 6) c.max_message_bytes = 1 + turn % 13;
  c.priced_chunks = turn % 5 < 2;
  c.choose_as_mpi = turn % 8 == 4;
  ++turn;
  return c;
}

// Whether a rank run under `c` ran every all-gather and all-to-all over
// groups as its equal-chunk collective padded to the priced chunk: asked
// for, with no transport forced and no message above the limit.
bool RanPricedChunks(Transport transport, const RankChoice& c) {
  return transport == Transport::kRanks && c.priced_chunks && c.transport == StepTransport::kAuto &&
         c.max_message_bytes == RankChoice{}.max_message_bytes;
}

// The transports the step runner ran program steps with under
// Transport::kRanks, counted over every ExpectExact.
std::map<std::string, int>& RankTransportsSeen() {
  static std::map<std::string, int> seen;
  return seen;
}

// Runs `p` checked under every transport (the runner MPI runs among them);
// with `plan`, also checks that each step's messages carried the bytes the
// plan priced.
void ExpectExact(const PlanProgram& p, const std::string& what, const CollectivePlan* plan = nullptr) {
  for (Transport transport : {Transport::kStaged, Transport::kDirect, Transport::kRanks}) {
    const RankChoice choice = transport == Transport::kRanks ? NextRankChoice() : RankChoice{};
    Result<CheckReport> r = RunChecked(p, 2, transport, choice);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status();
    EXPECT_TRUE(r->ok()) << what << ": " << r->first_problem;
    if (plan) testing::ExpectPlannedTraffic(*plan, p.devices(), r->stats.steps, what, RanPricedChunks(transport, choice));
    for (const std::string& t : r->stats.rank_transports) ++RankTransportsSeen()[t];
    int64_t target = 0;
    for (int64_t d : p.target().devices()) target += p.target().LocalBytes(d);
    EXPECT_EQ(r->elements_checked * p.element_bytes(), target) << what;
  }
}

TEST(ExecutorProperty, RandomLayoutsEveryNotation) {
  std::mt19937_64 rng(7);
  int steps = 0;
  for (int iter = 0; iter < 600; ++iter) {
    const std::vector<int64_t> shape = testing::RandomShape(rng, 3, 512);
    const Mesh src_mesh = testing::RandomMesh(rng);
    const Mesh dst_mesh = iter % 3 == 0 ? testing::RandomMesh(rng, iter % 5) : src_mesh;
    const testing::RandomLayout a = testing::RandomLayoutText(rng, shape, src_mesh);
    const testing::RandomLayout b = testing::RandomLayoutText(rng, shape, dst_mesh);
    const DType dtype = kDTypes[iter % 5];
    const std::string what = "iter " + std::to_string(iter) + ": " + a.text + " -> " + b.text;
    Result<ParsedLayout> src = ParseLayout(a.text, shape, dtype, a.mesh);
    Result<ParsedLayout> dst = ParseLayout(b.text, shape, dtype, b.mesh);
    ASSERT_TRUE(src.ok() && dst.ok()) << what;
    Result<Exchange> ex = Exchange::Create(src->layout, dst->layout);
    ASSERT_TRUE(ex.ok()) << what;
    Result<PlanProgram> p = PlanProgram::Compile(*ex);
    ASSERT_TRUE(p.ok()) << what << ": " << p.status();
    ExpectExact(*p, "exchange " + what);
    PlannerOptions o;
    o.meshes = {src_mesh, dst_mesh};
    Result<PlanResult> planned = PlanReshard(src->layout, dst->layout, o);
    ASSERT_TRUE(planned.ok()) << what << ": " << planned.status();
    Result<PlanProgram> pp = PlanProgram::Compile(planned->plan);
    ASSERT_TRUE(pp.ok()) << what << ": " << pp.status();
    steps += static_cast<int>(planned->plan.steps().size());
    ExpectExact(*pp, "plan " + what, &planned->plan);
  }
  EXPECT_GT(steps, 300);
  // Threads as ranks ran each of the runner's transports, box messages
  // (MPI's default for tiled and block-cyclic layouts) among them.
  const std::map<std::string, int>& seen = RankTransportsSeen();
  for (const char* t : {"alltoallw", "alltoallv", "p2p"})
    EXPECT_GT(seen.count(t) ? seen.at(t) : 0, 50) << t << " in " << ::testing::PrintToString(seen);
  // (The counts docs/execution.md quotes.)
  std::cout << "program steps by the runner's transport: " << ::testing::PrintToString(seen) << "\n";
}

using testing::RandomNamedMesh;
using testing::RandomSpec;

// Two random named shardings over a random mesh, of a small random shape.
struct NamedPair {
  Mesh mesh;
  Layout source, target;
};
NamedPair RandomNamedPair(std::mt19937_64& rng, DType dtype) {
  Mesh mesh = RandomNamedMesh(rng);
  const size_t rank = 1 + rng() % 3;
  std::vector<int64_t> shape;
  for (size_t d = 0; d < rank; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % (rng() % 2 ? 12 : 5)));
  const NamedSharding s = RandomSpec(rng, mesh, rank), t = RandomSpec(rng, mesh, rank);
  Layout source = s.ToLayout(shape, dtype).value(), target = t.ToLayout(shape, dtype).value();
  return {std::move(mesh), std::move(source), std::move(target)};
}

TEST(ExecutorProperty, RandomNamedPairsEveryStep) {
  std::mt19937_64 rng(20261130);
  std::map<StepOp, int> seen;
  for (int iter = 0; iter < 800; ++iter) {
    const NamedPair pair = RandomNamedPair(rng, kDTypes[iter % 5]);
    const Mesh& mesh = pair.mesh;
    const Layout &src = pair.source, &dst = pair.target;
    for (PlanTarget target : {PlanTarget::kAny, PlanTarget::kJaxCpu}) {
      PlannerOptions o;
      o.meshes = {mesh};
      o.target = target;
      Result<PlanResult> planned = PlanReshard(src, dst, o);
      ASSERT_TRUE(planned.ok()) << planned.status();
      for (const PlanStep& st : planned->plan.steps()) ++seen[st.op];
      Result<PlanProgram> p = PlanProgram::Compile(planned->plan);
      ASSERT_TRUE(p.ok()) << p.status();
      ExpectExact(*p, "iter " + std::to_string(iter) + " over " + mesh.ToString(), &planned->plan);
    }
  }
  EXPECT_GT(seen[StepOp::kAllToAll], 100);
  EXPECT_GT(seen[StepOp::kAllGather], 50);
  EXPECT_GT(seen[StepOp::kCollectivePermute], 10);
  EXPECT_GT(seen[StepOp::kSlice], 50);
}

// A random sharding of a 2-D array over `mesh`: each mesh axis sharding
// dim 0, dim 1 or neither, in a random order.
Layout RandomSharding(std::mt19937_64& rng, const Mesh& mesh, const std::vector<int64_t>& shape) {
  std::vector<NamedSharding::Dim> dims(2);
  std::vector<int64_t> axes(mesh.axes().size());
  std::iota(axes.begin(), axes.end(), 0);
  std::shuffle(axes.begin(), axes.end(), rng);
  for (int64_t a : axes)
    if (const uint64_t d = rng() % 3; d < 2) dims[d].axes.push_back(AxisRef{.axis = a});
  return NamedSharding::Create(mesh, dims).value().ToLayout(shape, DType::kF32).value();
}

// Threads as ranks, the default in process up to kAutoRankDevices devices,
// over thousands of ranks: random shardings of uneven arrays over meshes of
// 2048 and 4096 devices, planned and run exactly through the step runner,
// each step's bytes the plan's; kAuto takes the ranks unless the program's
// messages are too many (AutoTransport).
TEST(ExecutorProperty, ThreadsAsRanksOverThousandsOfDevices) {
  std::mt19937_64 rng(20261206);
  const Mesh meshes[] = {Mesh::Create({{"a", 16}, {"b", 16}, {"c", 8}}).value(),
                         Mesh::Create({{"a", 8}, {"b", 32}, {"c", 16}}).value()};
  int ranks = 0;
  for (int iter = 0; iter < 8; ++iter) {
    const Mesh& mesh = meshes[iter % 2];
    const std::vector<int64_t> shape = {64 + static_cast<int64_t>(rng() % 80), 96 + static_cast<int64_t>(rng() % 80)};
    const Layout src = RandomSharding(rng, mesh, shape), dst = RandomSharding(rng, mesh, shape);
    PlannerOptions o;
    o.meshes = {mesh};
    Result<PlanResult> planned = PlanReshard(src, dst, o);
    ASSERT_TRUE(planned.ok()) << planned.status();
    const PlanProgram p = PlanProgram::Compile(planned->plan).value();
    const std::string what = "iter " + std::to_string(iter) + " over " + mesh.ToString();
    const Transport automatic = AutoTransport(static_cast<int64_t>(p.devices().size()), ProgramMessages(p));
    // (The ranks asked for only where auto gives them: beyond, their
    // messages would take gigabytes, 5.4 GB for a replicated target here.)
    for (Transport transport : {Transport::kRanks, Transport::kAuto}) {
      if (transport == Transport::kRanks && automatic != Transport::kRanks) continue;
      Result<CheckReport> r = RunChecked(p, 2, transport);
      ASSERT_TRUE(r.ok()) << what << ": " << r.status();
      EXPECT_TRUE(r->ok()) << what << ": " << r->first_problem;
      EXPECT_EQ(r->stats.transport, transport == Transport::kAuto ? automatic : Transport::kRanks) << what;
      testing::ExpectPlannedTraffic(planned->plan, p.devices(), r->stats.steps, what, false);
      int64_t target = 0;  // every copy of every element
      for (int64_t d : p.target().devices()) target += p.target().LocalBytes(d);
      EXPECT_EQ(r->elements_checked * p.element_bytes(), target) << what;
    }
    ranks += automatic == Transport::kRanks;
  }
  EXPECT_GE(ranks, 4);  // most of them run as ranks by default
}

// A program compiled with one form of the copies (CompileOptions::copies)
// runs exactly, at the planned bytes, under the transports of that form,
// holds no copies of the other, and is refused (InvalidArgument) by the
// transports of the other; its messages are the full program's.
TEST(ExecutorProperty, OneCopyFormRunsItsTransports) {
  std::mt19937_64 rng(20261204);
  int grouped = 0, collectives = 0;  // all-gathers and all-to-alls in either form; of them, written per group pattern
  for (int iter = 0; iter < 300; ++iter) {
    const NamedPair pair = RandomNamedPair(rng, kDTypes[iter % 5]);
    const Mesh& mesh = pair.mesh;
    const Layout &src = pair.source, &dst = pair.target;
    PlannerOptions o;
    o.meshes = {mesh};
    Result<PlanResult> planned = PlanReshard(src, dst, o);
    ASSERT_TRUE(planned.ok()) << planned.status();
    const std::string what = "iter " + std::to_string(iter) + " over " + mesh.ToString();
    CompileOptions reference;  // both forms, every step per message
    reference.group_patterns = false;
    const PlanProgram both = PlanProgram::Compile(planned->plan, reference).value();
    for (CopyForms form : {CopyForms::kDirect, CopyForms::kStaged}) {
      CompileOptions co;
      co.copies = form;
      Result<PlanProgram> p = PlanProgram::Compile(planned->plan, co);
      ASSERT_TRUE(p.ok()) << what << ": " << p.status();
      const bool direct = form == CopyForms::kDirect;
      EXPECT_EQ(p->has_direct_copies(), direct);
      EXPECT_EQ(p->has_staged_copies(), !direct);
      ASSERT_EQ(p->steps().size(), both.steps().size()) << what;
      for (size_t si = 0; si < both.steps().size(); ++si)
        if (p->steps()[si].op == StepOp::kAllGather || p->steps()[si].op == StepOp::kAllToAll) {
          ++collectives;
          grouped += p->steps()[si].group_copies != nullptr;
        }
      for (size_t si = 0; si < both.steps().size(); ++si)
        for (size_t i = 0; i < both.devices().size(); ++i) {
          const DeviceProgram &a = p->steps()[si].devices[i], &b = both.steps()[si].devices[i];
          if (const GroupCopies* gc = p->steps()[si].group_copies.get()) {
            // Written per group pattern: no messages, the same bytes as the
            // full program's messages into and out of every device; in the
            // staged form, a device's expanded program (what a rank runs)
            // has the full program's messages and staging.
            ASSERT_TRUE(a.recv_peer.empty() && a.send_peer.empty() && a.direct.ops.empty() && a.pack.ops.empty())
                << what;
            ASSERT_EQ(gc->has_staged(), !direct) << what;
            ASSERT_EQ(a.recv_bytes, b.recv_bytes) << what;
            const size_t m = static_cast<size_t>(gc->member[i]);
            ASSERT_EQ(gc->PatternOf(i).received[m], b.recv_bytes) << what;
            ASSERT_EQ(gc->PatternOf(i).sent[m], std::accumulate(b.send_count.begin(), b.send_count.end(), int64_t{0}))
                << what;
            if (direct) continue;
            ASSERT_EQ(a.send_bytes, b.send_bytes) << what;
            const DeviceProgram e = GroupDeviceProgram(*gc, a, i);
            ASSERT_EQ(e.send_peer, b.send_peer) << what;
            ASSERT_EQ(e.send_count, b.send_count) << what;
            ASSERT_EQ(e.send_offset, b.send_offset) << what;
            ASSERT_EQ(e.pack_owner, b.pack_owner) << what;
            ASSERT_EQ(e.send_bytes, b.send_bytes) << what;
            ASSERT_EQ(e.recv_peer, b.recv_peer) << what;
            ASSERT_EQ(e.recv_count, b.recv_count) << what;
            ASSERT_EQ(e.recv_offset, b.recv_offset) << what;
            ASSERT_EQ(e.recv_bytes, b.recv_bytes) << what;
            ASSERT_EQ(e.pack.bytes, b.pack.bytes) << what;
            ASSERT_EQ(e.unpack.bytes, b.unpack.bytes) << what;
            ASSERT_EQ(e.local.bytes, b.local.bytes) << what;
            continue;
          }
          ASSERT_EQ(a.send_count, b.send_count) << what;
          ASSERT_EQ(a.recv_peer, b.recv_peer) << what;
          ASSERT_EQ(a.recv_count, b.recv_count) << what;
          ASSERT_EQ(a.local.bytes, b.local.bytes) << what;
          ASSERT_EQ(a.direct.ops.size(), direct ? b.direct.ops.size() : 0) << what;
          ASSERT_EQ(a.pack.ops.size() + a.unpack.ops.size(), direct ? 0 : b.pack.ops.size() + b.unpack.ops.size())
              << what;
          ASSERT_EQ(a.direct_begin.size(), b.direct_begin.size()) << what;
          ASSERT_EQ(a.unpack_begin.size(), b.unpack_begin.size()) << what;
        }
      const Transport runs[] = {Transport::kStaged, Transport::kDirect, Transport::kRanks, Transport::kDirect};
      for (int run = 0; run < 4; ++run) {
        const Transport transport = runs[run];
        RankChoice choice = transport == Transport::kRanks ? NextRankChoice() : RankChoice{};
        // One run of each in-process form takes every pattern step device by device.
        if (run == 3 || (run == 0 && iter % 2 == 0)) choice.max_scheduled_group_copies = 0;
        Result<CheckReport> r = RunChecked(*p, 2, transport, choice);
        if ((transport == Transport::kDirect) != direct) {
          ASSERT_FALSE(r.ok()) << what;
          EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << what;
          continue;
        }
        ASSERT_TRUE(r.ok()) << what << ": " << r.status();
        EXPECT_TRUE(r->ok()) << what << ": " << r->first_problem;
        testing::ExpectPlannedTraffic(planned->plan, p->devices(), r->stats.steps, what, RanPricedChunks(transport, choice));
      }
    }
  }
  // Every all-gather and all-to-all written per group pattern but those
  // whose uneven shards fall unlike from group to group.
  EXPECT_GT(collectives, 30);
  EXPECT_GE(grouped, collectives * 9 / 10) << collectives;
}

}  // namespace
}  // namespace reshard
