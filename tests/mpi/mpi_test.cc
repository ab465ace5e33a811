// The MPI backend under mpirun (tests/mpi/CMakeLists.txt runs this at 1, 2,
// 3, 4 and 8 ranks). Every rank draws the same random layouts (one seed), so
// every rank takes part in every case; each rank fills its source part with
// tags of the global indices and checks its target part element by element.
// A case's result is agreed over all ranks, so a failure anywhere fails
// every rank's test.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <iostream>
#include <map>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "exec/exec_checker.h"
#include "reshard/device_program.h"
#include "reshard/exchange.h"
#include "reshard/mpi.h"
#include "reshard/notation.h"
#include "reshard/planner.h"
#include "testing/planned_traffic.h"
#include "testing/random_layouts.h"
#include "testing/random_partial.h"

namespace reshard {
namespace {

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int Size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// True on every rank when `ok` holds on every rank. Only rank 0 prints
// gtest's report, so another rank prints its own failure here.
bool AllOk(const ::testing::AssertionResult& ok) {
  if (!ok && Rank() != 0) std::cerr << "rank " << Rank() << ": " << ok.message() << "\n";
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

constexpr DType kDTypes[] = {DType::kU8, DType::kBF16, DType::kF32, DType::kF64, DType::kC128};

struct Case {
  Layout source, target;
  std::optional<Mesh> mesh;
  std::string what;
};

// Random layouts whose devices are all ranks of this run: layouts over other
// device ids are drawn again (the same draws on every rank).
Case RandomCase(std::mt19937_64& rng, int iter) {
  const int size = Size();
  while (true) {
    const std::vector<int64_t> shape = testing::RandomShape(rng, 3, 600);
    const Mesh src_mesh = testing::RandomMesh(rng, 0, size);
    const int64_t first = std::min(iter % 4, size - 1);
    const Mesh dst_mesh = iter % 3 == 0 ? testing::RandomMesh(rng, first, size - first) : src_mesh;
    const testing::RandomLayout a = testing::RandomLayoutText(rng, shape, src_mesh);
    const testing::RandomLayout b = testing::RandomLayoutText(rng, shape, dst_mesh);
    const DType dtype = kDTypes[iter % 5];
    Result<ParsedLayout> src = ParseLayout(a.text, shape, dtype, a.mesh);
    Result<ParsedLayout> dst = ParseLayout(b.text, shape, dtype, b.mesh);
    if (!src.ok() || !dst.ok()) continue;
    const auto fits = [&](const Layout& l) { return l.devices().empty() || l.devices().back() < size; };
    if (!fits(src->layout) || !fits(dst->layout)) continue;
    return {src->layout, dst->layout, src_mesh, "iter " + std::to_string(iter) + ": " + a.text + " -> " + b.text};
  }
}

// How many steps ran with each transport ("p2p", "alltoallv over groups", ...).
std::map<std::string, int>& TransportsSeen() {
  static std::map<std::string, int> seen;
  return seen;
}

// Gathers every rank's per-step message bytes and checks them, on rank 0,
// against the plan the run followed (the same PlanReshard call; without
// planner options, the one-step exchange).
Result<PlanResult> PlanOf(const Case& c, const MpiOptions& options) {
  PlannerOptions exchange;
  exchange.strategy = Strategy::kExchange;
  return PlanReshard(c.source, c.target, options.planner ? *options.planner : exchange);
}

void ExpectPlannedTraffic(const Case& c, const MpiOptions& options, const MpiRunStats& stats) {
  const Result<PlanResult> planned = PlanOf(c, options);
  ASSERT_TRUE(planned.ok()) << c.what << ": " << planned.status();
  const size_t steps = stats.step_bytes_sent.size();
  std::vector<int64_t> mine;
  for (size_t s = 0; s < steps; ++s) {
    mine.push_back(stats.step_bytes_sent[s]);
    mine.push_back(stats.step_bytes_received[s]);
  }
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(Size()));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(), static_cast<int>(mine.size()),
                MPI_INT64_T, MPI_COMM_WORLD);
  if (Rank() != 0) return;
  const std::vector<int64_t>& devices = planned->plan.devices();
  std::vector<StepTraffic> traffic(steps);
  for (size_t s = 0; s < steps; ++s) {
    traffic[s].sent.assign(devices.size(), 0);
    traffic[s].received.assign(devices.size(), 0);
    for (int r = 0; r < Size(); ++r) {
      const int64_t sent = all[static_cast<size_t>(r) * mine.size() + 2 * s];
      const int64_t received = all[static_cast<size_t>(r) * mine.size() + 2 * s + 1];
      const auto at = std::lower_bound(devices.begin(), devices.end(), int64_t{r});
      if (at == devices.end() || *at != r) {  // a rank outside the plan moves nothing
        EXPECT_EQ(sent + received, 0) << c.what << ", rank " << r;
        continue;
      }
      traffic[s].sent[static_cast<size_t>(at - devices.begin())] = sent;
      traffic[s].received[static_cast<size_t>(at - devices.begin())] = received;
    }
  }
  // Priced chunks with no transport forced: every all-gather and all-to-all
  // over groups moves its priced chunks exactly.
  const bool priced = options.priced_chunks && options.transport == MpiTransport::kAuto &&
                      options.max_message_bytes == MpiOptions{}.max_message_bytes;
  testing::ExpectPlannedTraffic(planned->plan, devices, traffic, c.what, priced);
}

// Runs `c` on every rank with `options`; true where this rank's target is exact.
::testing::AssertionResult RunCase(const Case& c, const MpiOptions& options) {
  Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, c.source, c.target, options);
  if (!r.ok()) return ::testing::AssertionFailure() << c.what << ": " << r.status();
  for (const std::string& t : r->step_transports()) ++TransportsSeen()[t];
  std::vector<std::byte> src(static_cast<size_t>(r->source_bytes())), dst(static_cast<size_t>(r->target_bytes()));
  const Result<PlanResult> planned = PlanOf(c, options);  // the plan the run follows
  if (!planned.ok()) return ::testing::AssertionFailure() << c.what << ": " << planned.status();
  const TagScheme scheme = TagSchemeFor(planned->plan);
  FillTags(c.source, Rank(), src, scheme);
  // Twice: a persistent plan runs again on the same buffers. Both runs on
  // every rank whatever this rank found, so no rank leaves a collective early.
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (int run = 0; run < 2; ++run) {
    std::fill(dst.begin(), dst.end(), std::byte{0});
    Result<MpiRunStats> s = r->Execute(src, dst);
    if (!s.ok()) return ::testing::AssertionFailure() << c.what << ": " << s.status();  // agreed on every rank
    ExpectPlannedTraffic(c, options, *s);
    const TagCheck check = CheckTags(c.target, Rank(), dst, scheme);
    if (check.mismatches != 0 && result)
      result = ::testing::AssertionFailure() << c.what << " (rank " << Rank() << ", run " << run << ", transports "
                                             << ::testing::PrintToString(r->step_transports()) << "): " << check.first_problem;
  }
  return result;
}

TEST(Mpi, RandomLayoutsEveryTransport) {
  std::mt19937_64 rng(11);
  TransportsSeen().clear();
  for (int iter = 0; iter < 300; ++iter) {
    const Case c = RandomCase(rng, iter);
    for (MpiTransport t :
         {MpiTransport::kAuto, MpiTransport::kAlltoallv, MpiTransport::kPointToPoint, MpiTransport::kDatatypes}) {
      MpiOptions o;
      o.transport = t;
      const ::testing::AssertionResult ok = RunCase(c, o);
      EXPECT_TRUE(AllOk(ok)) << ok.message() << " [" << MpiTransportName(t) << "]";
    }
  }
  // Derived datatypes ran where messages allowed, and the others fell back.
  if (Size() >= 2) {
    EXPECT_GT(TransportsSeen()["alltoallw"], 0) << ::testing::PrintToString(TransportsSeen());
    EXPECT_GT(TransportsSeen()["alltoallv"], 0) << ::testing::PrintToString(TransportsSeen());
  }
}

TEST(Mpi, RandomLayoutsThroughThePlanner) {
  std::mt19937_64 rng(12);
  TransportsSeen().clear();
  for (int iter = 0; iter < 150; ++iter) {
    const Case c = RandomCase(rng, iter);
    MpiOptions o;
    o.planner = PlannerOptions{};
    if (c.mesh) o.planner->meshes = {*c.mesh};
    // Half the cases plan with collectives only, so that group collectives
    // run wherever the ragged exchange would be cheaper.
    if (iter % 2) {
      PlannerOptions structured = *o.planner;
      structured.strategy = Strategy::kCollectives;
      if (PlanReshard(c.source, c.target, structured).ok()) o.planner = structured;  // named pairs only
    }
    // A third run their all-gathers and all-to-alls as equal-chunk
    // collectives padded to the priced chunk.
    o.priced_chunks = iter % 3 == 1;
    const ::testing::AssertionResult ok = RunCase(c, o);
    EXPECT_TRUE(AllOk(ok)) << ok.message();
  }
  // Structured steps ran over their groups' sub-communicators, both kinds.
  if (Size() >= 4) {
    EXPECT_GT(TransportsSeen()["alltoallv over groups"], 0) << ::testing::PrintToString(TransportsSeen());
    EXPECT_GT(TransportsSeen()["alltoall over groups"], 0) << ::testing::PrintToString(TransportsSeen());
    EXPECT_GT(TransportsSeen()["allgather over groups"] + TransportsSeen()["allgatherv over groups"], 0)
        << ::testing::PrintToString(TransportsSeen());
  }
}

// Runs `count` random partial pairs (`draw`: testing::DrawPartialPair, with
// partial targets or not, or another drawer) through the planner under
// `strategy`, each in one of `types` (f64 where the op cannot reduce it) and
// with each MPI transport in turn; `check` sees each plan first. Fails, not
// hangs, where 200,000 draws give fewer cases.
void RunPartialPairs(uint64_t seed, int count, const std::function<std::optional<testing::PartialPair>(std::mt19937_64&)>& draw,
                     std::span<const DType> types, Strategy strategy = Strategy::kAuto,
                     const std::function<bool(const CollectivePlan&, const std::string&)>& check = {},
                     const std::function<void(PlannerOptions&)>& tune = {}) {
  std::mt19937_64 rng(seed);
  int cases = 0;
  for (int iter = 0; cases < count && iter < 200000; ++iter) {
    const std::optional<testing::PartialPair> drawn = draw(rng);
    if (!drawn || drawn->mesh.num_devices() > Size()) continue;
    DType dtype = types[static_cast<size_t>(cases) % types.size()];
    for (const Layout* l : {&drawn->source, &drawn->target})
      if (l->partial() && !CheckReducible(dtype, l->reduction().op).ok()) dtype = DType::kF64;
    Case c{testing::Retyped(drawn->source, dtype), testing::Retyped(drawn->target, dtype), drawn->mesh,
           "case " + std::to_string(cases) + " as " + std::string(DTypeName(dtype)) + ": " + drawn->text};
    MpiOptions o;
    o.planner = PlannerOptions{};
    o.planner->meshes = {drawn->mesh};
    o.planner->strategy = strategy;
    if (tune) tune(*o.planner);
    o.transport = std::vector<MpiTransport>{MpiTransport::kAuto, MpiTransport::kAlltoallv, MpiTransport::kPointToPoint,
                                            MpiTransport::kDatatypes}[cases % 4];
    // Every other kAuto case with priced chunks: reduce-scatters as MPI's.
    o.priced_chunks = cases % 8 == 4;
    // (Under kCollectives some pairs have no plan: refused alike on every rank.)
    if (strategy == Strategy::kCollectives || check) {
      Result<PlanResult> planned = PlanReshard(c.source, c.target, *o.planner);
      if (!planned.ok()) continue;
      if (check && !check(planned->plan, c.what)) continue;  // (the same draws and plans on every rank)
    }
    const ::testing::AssertionResult ok = RunCase(c, o);
    EXPECT_TRUE(AllOk(ok)) << ok.message();
    ++cases;
  }
  EXPECT_EQ(cases, count);
}

// Partial sums (random unreduced axes and ops, uneven shapes, nine element
// types) reduced as planned: 300 pairs, each with every transport the
// runner has for a reducing step, every element checked and every step's
// bytes against the plan's. At 4 and 8 ranks (meshes of up to Size() devices).
TEST(Mpi, PartialSumsThroughThePlanner) {
  if (Size() < 4) GTEST_SKIP() << "partial sums run at 4 and 8 ranks";
  const DType types[] = {DType::kF32, DType::kS32, DType::kBF16, DType::kF16, DType::kS8,
                         DType::kU8,  DType::kU64, DType::kF64,  DType::kC64};
  TransportsSeen().clear();
  RunPartialPairs(17, 300, [](std::mt19937_64& rng) { return testing::DrawPartialPair(rng, false); }, types);
  // Some reduce-scatters ran as MPI_Ireduce_scatter_block, and all-reduces
  // as MPI_Iallreduce (priced chunks).
  if (Size() >= 8) {
    EXPECT_GT(TransportsSeen()["reduce_scatter over groups"], 0) << ::testing::PrintToString(TransportsSeen());
    EXPECT_GT(TransportsSeen()["allreduce over groups"], 0) << ::testing::PrintToString(TransportsSeen());
  }
}

// Targets with a pending reduction (partial or plain sources, other ops):
// 200 pairs through the planner's one reducing exchange, every transport,
// each target device's routed parts checked exactly, bytes as planned.
TEST(Mpi, PartialTargetsThroughThePlanner) {
  if (Size() < 4) GTEST_SKIP() << "partial targets run at 4 and 8 ranks";
  const DType types[] = {DType::kF32, DType::kS32, DType::kBF16, DType::kS8, DType::kU64, DType::kF64};
  RunPartialPairs(18, 200, [](std::mt19937_64& rng) { return testing::DrawPartialPair(rng, true); }, types);
}

// Partial sums into partial sums over fewer axes as collectives: one
// reduce-scatter over the dropped axes, first or last, the parts moved
// alike; 60 planned pairs at 8 ranks (20 at 4, where few meshes have two
// partial axes), every transport, every element against the
// values the oracles state (the last step's routes, or, reducing first, the
// steps' routes composed), bytes as planned.
TEST(Mpi, FewerPartsThroughThePlanner) {
  if (Size() < 4) GTEST_SKIP() << "partial targets run at 4 and 8 ranks";
  const DType types[] = {DType::kF32, DType::kS32, DType::kU8, DType::kF64};
  int reduced_first = 0;
  RunPartialPairs(19, Size() >= 8 ? 60 : 20, testing::DrawFewerPartsPair, types, Strategy::kCollectives,
                  [&](const CollectivePlan& plan, const std::string& name) {
                    int reductions = 0;
                    for (const PlanStep& s : plan.steps()) reductions += s.op == StepOp::kReduceScatter;
                    EXPECT_EQ(reductions, 1) << name;
                    const bool first = plan.steps().front().op == StepOp::kReduceScatter;
                    EXPECT_TRUE(first || plan.steps().back().op == StepOp::kReduceScatter) << name;
                    reduced_first += first && plan.steps().size() > 1;
                    return true;
                  });
  if (Size() >= 8) {
    EXPECT_GE(reduced_first, 3);
  }
}

// Relayed reducing exchanges (relay.h): partial sums into layouts with no
// reduction priced by bytes with memory to spare, kept where the plan
// relays; 60 pairs at 8 ranks (30 at 4), every transport, every element
// checked and both rounds' bytes against the plan's.
TEST(Mpi, RelayedExchangesThroughThePlanner) {
  if (Size() < 4) GTEST_SKIP() << "relays run at 4 and 8 ranks";
  const DType types[] = {DType::kF32, DType::kS32, DType::kBF16, DType::kU8, DType::kF64};
  RunPartialPairs(
      20, Size() >= 8 ? 60 : 30, [](std::mt19937_64& rng) { return testing::DrawPartialPair(rng, false); }, types,
      Strategy::kExchange,
      [](const CollectivePlan& plan, const std::string&) {
        return plan.steps().size() == 1 && !plan.steps()[0].relays.empty();
      },
      [](PlannerOptions& o) {
        o.topology = o.topology.BandwidthOnly();
        o.memory_cap_bytes = int64_t{1} << 40;
      });
}

// Messages larger than the chunk limit go as several chunks; a tiny limit
// stands in for 2^31 bytes.
TEST(Mpi, MessagesAboveTheChunkLimitAreSplit) {
  std::mt19937_64 rng(13);
  for (int iter = 0; iter < 100; ++iter) {
    const Case c = RandomCase(rng, iter);
    MpiOptions o;
    o.transport = MpiTransport::kAlltoallv;  // overridden: an over-limit message goes point-to-point
    o.max_message_bytes = 1 + iter % 7;
    const ::testing::AssertionResult ok = RunCase(c, o);
    EXPECT_TRUE(AllOk(ok)) << ok.message() << " [chunk " << o.max_message_bytes << "]";
  }
}

// Tens of thousands of one-byte chunks over MPI arrive exactly (80000 a
// rank at 2 ranks). That the runner's work stays linear in the chunks is
// counted, not timed, by RankReshard.ManyChunksCostLinearWork (80K chunks
// had taken 7 s, each MPI_Waitsome scanning every chunk's request).
TEST(Mpi, ManyChunksArriveExactly) {
  const int size = Size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  const std::string n = std::to_string(size);
  const std::vector<int64_t> shape = {16 * int64_t{size}, 10000};
  const Layout rows = ParseLayout("{devices=[" + n + ",1]<=[" + n + "]}", shape, DType::kU8, std::nullopt)->layout;
  const Layout cols = ParseLayout("{devices=[1," + n + "]<=[" + n + "]}", shape, DType::kU8, std::nullopt)->layout;
  MpiOptions o;
  o.max_message_bytes = 1;
  Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, rows, cols, o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::byte> src(static_cast<size_t>(r->source_bytes())), dst(static_cast<size_t>(r->target_bytes()));
  FillTags(rows, Rank(), src);
  Result<MpiRunStats> s = r->Execute(src, dst);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->messages_sent, s->bytes_sent);
  const TagCheck check = CheckTags(cols, Rank(), dst);
  EXPECT_TRUE(AllOk(check.mismatches == 0 ? ::testing::AssertionSuccess()
                                          : ::testing::AssertionFailure() << check.first_problem));
}

// Column-major local buffers with a leading dimension (as ScaLAPACK holds
// them): tags are written and read through the same strides.
TEST(Mpi, ColumnMajorBuffersWithALeadingDimension) {
  const int size = Size();
  const std::string n = std::to_string(size);
  // Trials 4 and 5: row blocks of `rows` into row blocks twice as tall, so
  // that each message takes every other row block, its boxes interleaving
  // down every column: box messages that list their runs (8 rows: 64-byte
  // runs; 16 with a short last block: runs of two lengths).
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t rows = trial == 4 ? 8 : 16;  // trials 4, 5: the row block
    const std::vector<int64_t> shape =
        trial < 4 ? std::vector<int64_t>{13, 11} : std::vector<int64_t>{4 * rows * size + (trial == 5 ? 5 : 0), 7};
    std::string from = trial % 2 ? "blockcyclic(block=[2,3], grid=[1," + n + "])" : "{devices=[" + n + ",1]<=[" + n + "]}";
    std::string to = trial < 2 ? "blockcyclic(block=[3,2], grid=[" + n + ",1])" : "{devices=[1," + n + "]<=[" + n + "]}";
    if (trial >= 4) {
      from = "blockcyclic(block=[" + std::to_string(rows) + ",8], grid=[" + n + ",1])";
      to = "blockcyclic(block=[" + std::to_string(2 * rows) + ",8], grid=[" + n + ",1])";
    }
    Result<ParsedLayout> a = ParseLayout(from, shape, DType::kF64, std::nullopt);
    Result<ParsedLayout> b = ParseLayout(to, shape, DType::kF64, std::nullopt);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    MpiOptions o;
    const std::vector<int64_t> src_shape = a->layout.LocalShape(Rank()), dst_shape = b->layout.LocalShape(Rank());
    o.source_format = BufferFormat::ColumnMajor(src_shape[0] + 2 + Rank());  // each rank its own leading dim
    o.transport = trial % 2 ? MpiTransport::kDatatypes : MpiTransport::kAuto;
    o.target_format = BufferFormat::ColumnMajor(trial % 2 ? 0 : dst_shape[0] + 1);
    Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, a->layout, b->layout, o);
    ASSERT_TRUE(r.ok()) << r.status();
    if (trial >= 4 && size >= 2) {
      EXPECT_EQ(r->step_transports().front(), "alltoallw") << from << " -> " << to;
    }
    // Row-major tags, scattered into the column-major buffer.
    std::vector<std::byte> row(static_cast<size_t>(a->layout.LocalBytes(Rank())));
    FillTags(a->layout, Rank(), row);
    std::vector<std::byte> src(static_cast<size_t>(r->source_bytes())), dst(static_cast<size_t>(r->target_bytes()));
    const std::vector<int64_t> ss = o.source_format.Strides(src_shape), ds = o.target_format.Strides(dst_shape);
    for (int64_t i = 0; i < src_shape[0]; ++i)
      for (int64_t j = 0; j < src_shape[1]; ++j)
        std::memcpy(&src[static_cast<size_t>((i * ss[0] + j * ss[1]) * 8)], &row[static_cast<size_t>((i * src_shape[1] + j) * 8)], 8);
    Result<MpiRunStats> s = r->Execute(src, dst);
    ASSERT_TRUE(s.ok()) << s.status();
    std::vector<std::byte> back(static_cast<size_t>(b->layout.LocalBytes(Rank())));
    for (int64_t i = 0; i < dst_shape[0]; ++i)
      for (int64_t j = 0; j < dst_shape[1]; ++j)
        std::memcpy(&back[static_cast<size_t>((i * dst_shape[1] + j) * 8)], &dst[static_cast<size_t>((i * ds[0] + j * ds[1]) * 8)], 8);
    const TagCheck check = CheckTags(b->layout, Rank(), back);
    EXPECT_TRUE(AllOk(check.mismatches == 0 ? ::testing::AssertionSuccess()
                                            : ::testing::AssertionFailure() << check.first_problem))
        << from << " -> " << to << ": " << check.first_problem;
  }
}

// Block-cyclic messages, whose boxes interleave in the staged buffer, run
// as box messages (MPI datatypes listing their runs in staged order) where
// their runs are long enough, exact and with the planned bytes; runs shorter
// than that fall back to staging.
TEST(Mpi, InterleavedBoxesRunAsBoxMessages) {
  const std::string n = std::to_string(Size());
  for (const auto& [block, boxed] : {std::pair{8, true}, std::pair{16, true}, std::pair{2, false}}) {
    const std::string b = std::to_string(block), b2 = std::to_string(2 * block);
    // Each rank's column blocks of b go to the ranks holding their block of
    // 2b: a message takes every other one, each a column strip of the rows.
    // Blocks of 16 end in a short one (runs of two lengths: sorted, not slotted).
    const std::vector<int64_t> shape = {24, 8 * block * Size() + (block == 16 ? 5 : 0)};
    Result<ParsedLayout> a = ParseLayout("blockcyclic(block=[" + b + "," + b + "], grid=[1," + n + "])", shape,
                                         DType::kF64, std::nullopt);
    Result<ParsedLayout> t = ParseLayout("blockcyclic(block=[" + b2 + "," + b2 + "], grid=[1," + n + "])", shape,
                                         DType::kF64, std::nullopt);
    ASSERT_TRUE(a.ok() && t.ok()) << a.status() << " " << t.status();
    const Case c{a->layout, t->layout, std::nullopt, "block " + b};
    // Some message interleaves (so the runs' datatype is what runs).
    const PlanProgram program = PlanProgram::Compile(Exchange::Create(c.source, c.target).value()).value();
    bool interleaved = false;
    for (const DeviceProgram& d : program.steps()[0].devices)
      for (size_t m = 0; m < d.send_peer.size(); ++m)
        interleaved = interleaved || !StagedInOrder(d.pack, d.pack_begin[m], d.pack_begin[m + 1], true);
    EXPECT_EQ(interleaved, Size() >= 2) << c.what;
    for (MpiTransport transport : {MpiTransport::kAuto, MpiTransport::kDatatypes}) {
      MpiOptions o;
      o.transport = transport;
      const ::testing::AssertionResult ok = RunCase(c, o);
      EXPECT_TRUE(AllOk(ok)) << ok.message();
      Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, c.source, c.target, o);
      ASSERT_TRUE(r.ok()) << r.status();
      if (Size() >= 2) {
        EXPECT_EQ(r->step_transports().front() == "alltoallw", boxed)
            << c.what << ": " << ::testing::PrintToString(r->step_transports());
      }
    }
  }
}

Layout Rows(int64_t devices) {
  const std::string n = std::to_string(devices);
  return ParseLayout("{devices=[" + n + ",1]<=[" + n + "]}", {8 * devices, 4}, DType::kF32, std::nullopt)->layout;
}
Layout Cols(int64_t devices) {
  const std::string n = std::to_string(devices);
  return ParseLayout("{devices=[1," + n + "]<=[" + n + "]}", {8 * devices, 4 * devices + 1}, DType::kF32, std::nullopt)->layout;
}

TEST(Mpi, AWrongBufferSizeOnOneRankIsAnErrorOnEveryRank) {
  const int size = Size(), bad = size - 1;
  Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, Rows(size), Rows(size));
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::byte> src(static_cast<size_t>(r->source_bytes() + (Rank() == bad ? 4 : 0)));
  std::vector<std::byte> dst(static_cast<size_t>(r->target_bytes()));
  Result<MpiRunStats> s = r->Execute(src, dst);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument);
  // Named where other ranks did not fail; alone, the error is every rank's and names none.
  const std::string want = (size > 1 ? "rank " + std::to_string(bad) + ": " : std::string()) + "its source buffer holds";
  EXPECT_EQ(s.status().message().rfind(want, 0), 0u) << s.status();
  // The object is still usable with the right sizes.
  src.resize(static_cast<size_t>(r->source_bytes()));
  EXPECT_TRUE(r->Execute(src, dst).ok());
}

TEST(Mpi, LayoutsThatDifferBetweenRanksAreAnErrorOnEveryRank) {
  const int size = Size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  const Layout shape_a = ParseLayout("{devices=[2,1]<=[2]}", {16, 4}, DType::kF32, std::nullopt)->layout;
  const Layout shape_b = ParseLayout("{devices=[1,2]<=[2]}", {16, 4}, DType::kF32, std::nullopt)->layout;
  Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, shape_a, Rank() == 1 ? shape_a : shape_b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  // Two ranks that differ: no majority, so both are named. More: rank 1 alone differs.
  const std::string want = size == 2 ? "rank 0's and rank 1's layouts or options differ (every rank must pass"
                                     : "rank 1's layouts or options differ from the others' (every rank must pass";
  EXPECT_EQ(r.status().message().rfind(want, 0), 0u) << r.status();
}

// The canonical move planned as one all-to-all (collectives) on some ranks and
// as one ragged exchange on others: the step layouts agree, the ops do not.
TEST(Mpi, PlannerOptionsThatDifferBetweenRanksAreAnErrorOnEveryRank) {
  const int size = Size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  const std::string n = std::to_string(size);
  const Layout a = ParseLayout("{devices=[" + n + ",1]<=[" + n + "]}", {8 * int64_t{size}, 8 * int64_t{size}}, DType::kF32,
                               std::nullopt)->layout;
  const Layout b = ParseLayout("{devices=[1," + n + "]<=[" + n + "]}", {8 * int64_t{size}, 8 * int64_t{size}}, DType::kF32,
                               std::nullopt)->layout;
  for (int variant = 0; variant < 3; ++variant) {
    MpiOptions o;
    o.planner = PlannerOptions{};
    if (variant == 0) o.planner->strategy = Rank() == 0 ? Strategy::kCollectives : Strategy::kExchange;
    if (variant == 1) o.planner->topology = Rank() == 0 ? Topology::Flat() : Topology::Nodes(2);
    if (variant == 2) o.transport = Rank() == 0 ? MpiTransport::kAlltoallv : MpiTransport::kPointToPoint;
    Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, a, b, o);
    ASSERT_FALSE(r.ok()) << "variant " << variant;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status();
    // Rank 0 alone differs: named as such where the others are a majority.
    const std::string want = size == 2 ? "rank 0's and rank 1's layouts or options differ"
                                       : "rank 0's layouts or options differ from the others'";
    EXPECT_EQ(r.status().message().rfind(want, 0), 0u) << r.status();
  }
  // Plans given outright: the same layouts step by step, other collectives.
  PlannerOptions collectives, exchange;
  collectives.strategy = Strategy::kCollectives;
  exchange.strategy = Strategy::kExchange;
  Result<PlanResult> p = PlanReshard(a, b, Rank() == 0 ? collectives : exchange);
  ASSERT_TRUE(p.ok()) << p.status();
  Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, p->plan);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status();
}

TEST(Mpi, ADeviceOutsideTheCommunicatorIsAnError) {
  Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, Rows(Size()), Cols(Size() + 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("communicator has " + std::to_string(Size()) + " ranks"), std::string::npos)
      << r.status();
}

TEST(Mpi, MismatchedShapesAreAnError) {
  Result<MpiReshard> r = MpiReshard::Create(MPI_COMM_WORLD, Rows(Size()), Cols(Size()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status();
}

TEST(Mpi, TransformMovesOnce) {
  const int size = Size();
  const Layout a = Rows(size), b = ParseLayout("{devices=[1," + std::to_string(size) + "]<=[" + std::to_string(size) + "]}",
                                               {8 * int64_t{size}, 4}, DType::kF32, std::nullopt)
                                       ->layout;
  std::vector<std::byte> src(static_cast<size_t>(a.LocalBytes(Rank()))), dst(static_cast<size_t>(b.LocalBytes(Rank())));
  FillTags(a, Rank(), src);
  ASSERT_TRUE(MpiTransform(MPI_COMM_WORLD, a, b, src, dst).ok());
  EXPECT_EQ(CheckTags(b, Rank(), dst).mismatches, 0);
}

}  // namespace
}  // namespace reshard

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) delete ::testing::UnitTest::GetInstance()->listeners().Release(
      ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  const int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
