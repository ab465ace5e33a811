// The step runner over threads as ranks: the code MPI runs, in one process.
// Each test runs one body per rank on its own thread, as mpirun runs ranks.
#include "reshard/rank_reshard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "exec/exec_checker.h"
#include "reshard/notation.h"
#include "reshard/planner.h"
#include "reshard/thread_comm.h"

namespace reshard {
namespace {

// Runs body(rank, comm) on `ranks` threads; returns each rank's status.
// `as_mpi`: comms whose box messages say they copy twice, as MPI's do, so
// the runner chooses as over MPI (thread_comm.h).
std::vector<Status> OnRanks(int ranks, const std::function<Status(int, std::unique_ptr<Comm>)>& body,
                            bool as_mpi = false) {
  std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(ranks, 20, 0, /*boxes_copy_once=*/!as_mpi);
  std::vector<Status> out(static_cast<size_t>(ranks), Status::Ok());
  std::vector<std::thread> threads;
  for (int k = 0; k < ranks; ++k)
    threads.emplace_back([&, k] { out[static_cast<size_t>(k)] = body(k, std::move(comms[static_cast<size_t>(k)])); });
  for (std::thread& t : threads) t.join();
  return out;
}

Mesh XY() { return Mesh::Create({{"x", 4}, {"y", 2}}).value(); }

// The canonical case's array under a JAX spec over mesh x=4, y=2.
Layout Canonical(const char* spec) { return ParseLayout(spec, {16, 16, 16}, DType::kF32, XY()).value().layout; }

// Runs source -> target on every rank with tagged data and checks each rank's target.
Status RunTagged(int rank, std::unique_ptr<Comm> comm, const Layout& source, const Layout& target,
                 const RankOptions& options, std::vector<std::string>* transports = nullptr,
                 RankRunStats* stats_out = nullptr) {
  RESHARD_ASSIGN_OR_RETURN(RankReshard r, RankReshard::Create(std::move(comm), source, target, options));
  if (transports != nullptr && rank == 0) *transports = r.step_transports();
  std::vector<std::byte> src(static_cast<size_t>(r.source_bytes())), dst(static_cast<size_t>(r.target_bytes()));
  FillTags(source, rank, src);
  RESHARD_ASSIGN_OR_RETURN(RankRunStats stats, r.Execute(src, dst));
  if (stats_out != nullptr) *stats_out = stats;
  const TagCheck c = CheckTags(target, rank, dst);
  if (c.mismatches != 0) return Status::Internal(c.first_problem);
  if (r.step_ops().size() == 1 && stats.bytes_moved != target.LocalBytes(rank))
    return Status::Internal(std::to_string(stats.bytes_moved) + " bytes moved into a " +
                            std::to_string(target.LocalBytes(rank)) + "-byte target");
  return Status::Ok();
}

TEST(RankReshard, CanonicalCaseEveryTransport) {
  const Layout source = Canonical("P('y', None, 'x')"), target = Canonical("P(None, ('x', 'y'), None)");
  for (StepTransport t : {StepTransport::kAuto, StepTransport::kAlltoallv, StepTransport::kPointToPoint,
                          StepTransport::kDatatypes}) {
    RankOptions o;
    o.transport = t;
    std::vector<std::string> transports;
    for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
           return RunTagged(rank, std::move(c), source, target, o, &transports);
         }))
      EXPECT_TRUE(s.ok()) << StepTransportName(t) << ": " << s;
    // Threads have box messages, and every message here is one box: auto
    // takes them, as it does over MPI.
    const char* expected = t == StepTransport::kPointToPoint ? "p2p"
                           : t == StepTransport::kAlltoallv  ? "alltoallv"
                                                             : "alltoallw";
    EXPECT_EQ(transports, std::vector<std::string>{expected}) << StepTransportName(t);
  }
}

TEST(RankReshard, PlannedStructuredStepsRunOverTheirGroups) {
  const Layout source = Canonical("P('y', None, 'x')"), target = Canonical("P(None, ('x', 'y'), None)");
  // As over MPI (box messages copy twice there).
  constexpr bool kAsMpi = true;
  RankOptions o;
  o.planner = PlannerOptions{};
  o.planner->meshes = {XY()};
  std::vector<std::string> transports;
  for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
         return RunTagged(rank, std::move(c), source, target, o, &transports);
       }, kAsMpi))
    EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(transports, std::vector<std::string>{"alltoallv over groups"});
  // Over shared memory, box messages, each byte copied once, come first.
  for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
         return RunTagged(rank, std::move(c), source, target, o, &transports);
       }))
    EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(transports, std::vector<std::string>{"alltoallw"});
  RankOptions priced = o;
  priced.priced_chunks = true;
  for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
         return RunTagged(rank, std::move(c), source, target, priced, &transports);
       }))
    EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(transports, std::vector<std::string>{"alltoall over groups"});  // the equal-chunk all-to-all
  // An all-gather over y: every message is the sender's whole input.
  const Layout gathered = Canonical("P(None, None, 'x')");
  for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
         return RunTagged(rank, std::move(c), source, gathered, o, &transports);
       }, kAsMpi))
    EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(transports, std::vector<std::string>{"allgather over groups"});  // even shards: equal chunks
  // Uneven shards (15 rows over x=4: 4, 4, 4, 3): the v-forms, or with
  // priced chunks the equal-chunk collectives, each message padded to the
  // chunk the plan priced.
  const Layout uneven = ParseLayout("P('x', 'y')", {15, 6}, DType::kF32, XY()).value().layout;
  const Layout uneven_gathered = ParseLayout("P(None, 'y')", {15, 6}, DType::kF32, XY()).value().layout;
  // (Collectives only: at this size the cost model takes the exchange.)
  const Layout uneven_moved = ParseLayout("P(None, 'x')", {15, 6}, DType::kF32, XY()).value().layout;
  RankOptions oc = o;
  oc.planner->strategy = Strategy::kCollectives;
  for (const Layout* to : {&uneven_gathered, &uneven_moved}) {
    for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
           return RunTagged(rank, std::move(c), uneven, *to, oc, &transports);
         }, kAsMpi))
      EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(transports.back(), to == &uneven_gathered ? "allgatherv over groups" : "alltoallv over groups");
  }
  oc.priced_chunks = true;
  int structured = 0;
  for (const Layout* to : {&uneven_gathered, &uneven_moved}) {
    std::vector<RankRunStats> stats(8);
    for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
           return RunTagged(rank, std::move(c), uneven, *to, oc, &transports, &stats[static_cast<size_t>(rank)]);
         }))
      EXPECT_TRUE(s.ok()) << s;
    const PlanResult plan = PlanReshard(uneven, *to, *oc.planner).value();
    ASSERT_EQ(plan.plan.steps().size(), transports.size());
    for (size_t i = 0; i < transports.size(); ++i) {
      const PlanStep& step = plan.plan.steps()[i];
      if (step.op == StepOp::kAllGather) {
        EXPECT_EQ(transports[i], "allgather over groups");
      }
      if (step.op == StepOp::kAllToAll) {
        EXPECT_EQ(transports[i], "alltoall over groups");
      }
      // Padded chunks: what moves is what the plan priced, device by device.
      if (step.op == StepOp::kAllGather || step.op == StepOp::kAllToAll) {
        ++structured;
        for (int rank = 0; rank < 8; ++rank) {
          EXPECT_EQ(stats[static_cast<size_t>(rank)].step_bytes_received[i], step.recv_bytes[static_cast<size_t>(rank)])
              << StepOpName(step.op) << ", rank " << rank;
          EXPECT_EQ(stats[static_cast<size_t>(rank)].step_bytes_sent[i], step.send_bytes[static_cast<size_t>(rank)])
              << StepOpName(step.op) << ", rank " << rank;
        }
      }
    }
  }
  EXPECT_EQ(structured, 3);  // the all-gather; an all-gather over y, then an all-to-all over x
  // 3 rows over x=4 (1, 1, 1, 0): a member with nothing to give sends a
  // chunk of padding alone; each rank still moves the priced bytes.
  const Layout thin = ParseLayout("P('x', 'y')", {3, 6}, DType::kF32, XY()).value().layout;
  const Layout thin_gathered = ParseLayout("P(None, 'y')", {3, 6}, DType::kF32, XY()).value().layout;
  std::vector<RankRunStats> stats(8);
  for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
         return RunTagged(rank, std::move(c), thin, thin_gathered, oc, &transports, &stats[static_cast<size_t>(rank)]);
       }))
    EXPECT_TRUE(s.ok()) << s;
  const PlanResult thin_plan = PlanReshard(thin, thin_gathered, *oc.planner).value();
  ASSERT_EQ(thin_plan.plan.OpNames(), std::vector<std::string>{"all-gather"});
  EXPECT_EQ(transports, std::vector<std::string>{"allgather over groups"});
  for (int rank = 0; rank < 8; ++rank)
    EXPECT_EQ(stats[static_cast<size_t>(rank)].step_bytes_received[0],
              thin_plan.plan.steps()[0].recv_bytes[static_cast<size_t>(rank)])
        << "rank " << rank;
}

// A backend that passes every call to another (threads as ranks); the
// backends below change what they name.
class Forwarding : public Comm {
 public:
  explicit Forwarding(std::unique_ptr<Comm> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int64_t max_count() const override { return inner_->max_count(); }
  Status AllReduce(std::span<int64_t> v, ReduceOp op) override { return inner_->AllReduce(v, op); }
  Status AllGather(std::span<const uint64_t> mine, std::span<uint64_t> all) override { return inner_->AllGather(mine, all); }
  Status Broadcast(std::span<std::byte> bytes, int root) override { return inner_->Broadcast(bytes, root); }
  Status Barrier() override { return inner_->Barrier(); }
  Result<std::unique_ptr<Comm>> Split(int color, int key) override { return inner_->Split(color, key); }
  Status StartAlltoallv(const std::byte* send, std::span<const int64_t> sc, std::span<const int64_t> sd, std::byte* recv,
                        std::span<const int64_t> rc, std::span<const int64_t> rd, int64_t& request) override {
    return inner_->StartAlltoallv(send, sc, sd, recv, rc, rd, request);
  }
  Status StartAllgatherv(const std::byte* send, int64_t bytes, std::byte* recv, std::span<const int64_t> rc,
                         std::span<const int64_t> rd, int64_t& request) override {
    return inner_->StartAllgatherv(send, bytes, recv, rc, rd, request);
  }
  Status StartAllgather(const std::byte* send, int64_t bytes, std::byte* recv, int64_t& request) override {
    return inner_->StartAllgather(send, bytes, recv, request);
  }
  Status StartAlltoall(const std::byte* send, int64_t chunk, std::byte* recv, int64_t& request) override {
    return inner_->StartAlltoall(send, chunk, recv, request);
  }
  Status StartReduceScatter(const std::byte* send, int64_t chunk, std::byte* recv, DType dtype, reshard::ReduceOp op,
                            int64_t& request) override {
    return inner_->StartReduceScatter(send, chunk, recv, dtype, op, request);
  }
  Status StartAllReduce(const std::byte* send, int64_t bytes, std::byte* recv, DType dtype, reshard::ReduceOp op,
                        int64_t& request) override {
    return inner_->StartAllReduce(send, bytes, recv, dtype, op, request);
  }
  Status StartSend(const std::byte* d, int64_t b, int peer, int64_t& r) override { return inner_->StartSend(d, b, peer, r); }
  Status StartRecv(std::byte* d, int64_t b, int peer, int64_t& r) override { return inner_->StartRecv(d, b, peer, r); }
  Status WaitSome(std::span<int64_t> r, bool block, std::vector<int>& done) override { return inner_->WaitSome(r, block, done); }
  Status WaitAll(std::span<int64_t> r) override { return inner_->WaitAll(r); }

 private:
  std::unique_ptr<Comm> inner_;
};

// A backend whose calls carry at most `limit` bytes (as MPI's int counts).
class Limited : public Forwarding {
 public:
  Limited(std::unique_ptr<Comm> inner, int64_t limit) : Forwarding(std::move(inner)), limit_(limit) {}
  std::string_view name() const override { return "limited"; }
  int64_t max_count() const override { return limit_; }

 private:
  int64_t limit_;
};

// Only threads' ranks are joined by their caller (RankOptions::
// joined_by_caller): over any other backend the option is refused on every
// rank, before anything moves.
TEST(RankReshard, JoinedByCallerIsForThreadsAlone) {
  const Layout source = Canonical("P('y', None, 'x')"), target = Canonical("P(None, ('x', 'y'), None)");
  RankOptions joined;
  joined.joined_by_caller = true;
  for (const Status& s : OnRanks(8, [&](int, std::unique_ptr<Comm> c) {
         return RankReshard::Create(std::make_unique<Limited>(std::move(c), int64_t{1} << 30), source, target, joined)
             .status();
       }))
    EXPECT_EQ(s, Status::InvalidArgument(
                     "joined_by_caller is for threads as ranks, whose caller joins them; this comm is limited"));
  for (const Status& s : OnRanks(8, [&](int, std::unique_ptr<Comm> c) {
         return RankReshard::Create(std::move(c), source, target, joined).status();
       }))
    EXPECT_TRUE(s.ok()) << s;
}

// Runs `source` -> `target` planned under `o` on 8 threads as ranks, every
// rank's source tagged (laid out in o.source_format's order, 2-D), every
// target element checked: each rank's stats and rank 0's transports.
void RunTaggedPlan(const Layout& source, const Layout& target, const RankOptions& o, const TagScheme& scheme,
                   const std::string& what, std::vector<std::string>& transports, std::vector<RankRunStats>& stats) {
  stats.assign(8, RankRunStats{});
  const bool column_major = o.source_format.order == BufferFormat::Order::kColumnMajor;
  for (const Status& st : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) -> Status {
         RESHARD_ASSIGN_OR_RETURN(RankReshard r, RankReshard::Create(std::move(c), source, target, o));
         if (rank == 0) transports = r.step_transports();
         std::vector<std::byte> src(static_cast<size_t>(r.source_bytes())), dst(static_cast<size_t>(r.target_bytes()));
         std::vector<std::byte> rows(src.size());
         FillTags(source, rank, rows, scheme);
         if (column_major) {  // the tags row-major, then laid out column by column
           const std::vector<int64_t> shape = source.LocalShape(rank);
           const size_t eb = static_cast<size_t>(source.element_bytes());
           for (int64_t i = 0; i < shape[0]; ++i)
             for (int64_t j = 0; j < shape[1]; ++j)
               std::memcpy(src.data() + static_cast<size_t>(j * shape[0] + i) * eb,
                           rows.data() + static_cast<size_t>(i * shape[1] + j) * eb, eb);
         } else {
           src = rows;
         }
         RESHARD_ASSIGN_OR_RETURN(stats[static_cast<size_t>(rank)], r.Execute(src, dst));
         const TagCheck check = CheckTags(target, rank, dst, scheme);
         return check.mismatches == 0 ? Status::Ok() : Status::Internal(check.first_problem);
       }))
    EXPECT_TRUE(st.ok()) << what << (o.priced_chunks ? ", priced chunks: " : ": ") << st;
}

// Planned reduce-scatters with priced chunks run as the backend's
// (Comm::StartReduceScatter), even shards and uneven ones padded, in the
// dtypes and ops whose arithmetic differs (f32, wrapping s8, bf16 through
// f32; sum, avg, max): every element checked, each rank's bytes the plan's
// chunk times the other members. Without priced chunks they combine after
// the messages arrive, as before.
TEST(RankReshard, PlannedReduceScattersRunAsTheBackendsWithPricedChunks) {
  struct Pair {
    const char* from;
    const char* to;
    std::vector<int64_t> shape;
    DType dtype;
  };
  const std::vector<Pair> pairs = {
      {"[Partial(), Replicate()]", "[Shard(0), Replicate()]", {16, 16}, DType::kF32},
      {"[Partial(\"avg\"), Replicate()]", "[Shard(0), Replicate()]", {16, 8}, DType::kF32},
      {"[Partial(\"max\"), Shard(1)]", "[Shard(0), Shard(1)]", {8, 6}, DType::kBF16},
      {"[Partial(), Shard(1)]", "[Shard(0), Shard(1)]", {16, 4}, DType::kS8},
      {"P(None, 'y', unreduced={'x'})", "P('x', 'y')", {15, 6}, DType::kF32},  // uneven: 4, 4, 4, 3 rows
  };
  for (const Pair& pair : pairs) {
    const Layout source = ParseLayout(pair.from, pair.shape, pair.dtype, XY()).value().layout;
    const Layout target = ParseLayout(pair.to, pair.shape, pair.dtype, XY()).value().layout;
    RankOptions o;
    o.planner = PlannerOptions{};
    o.planner->meshes = {XY()};
    const PlanResult planned = PlanReshard(source, target, *o.planner).value();
    ASSERT_EQ(planned.plan.OpNames(), std::vector<std::string>{"reduce-scatter"}) << pair.from;
    const TagScheme scheme = TagSchemeFor(planned.plan);
    for (const bool priced : {false, true}) {
      o.priced_chunks = priced;
      std::vector<std::string> transports;
      std::vector<RankRunStats> stats;
      RunTaggedPlan(source, target, o, scheme, pair.from, transports, stats);
      // (Without: an all-to-all-v over each group of 4, the parts combined
      // once they have arrived.)
      EXPECT_EQ(transports, std::vector<std::string>{priced ? "reduce_scatter over groups" : "alltoallv over groups"})
          << pair.from;
      const PlanStep& step = planned.plan.steps()[0];
      const int64_t chunk = step.recv_bytes.Max() / 3;  // groups of 4
      for (int rank = 0; rank < 8; ++rank) {
        const int64_t received = stats[static_cast<size_t>(rank)].step_bytes_received[0];
        if (priced) {
          EXPECT_EQ(received, 3 * chunk) << pair.from << ", rank " << rank;
        } else {
          EXPECT_LE(received, step.recv_bytes[static_cast<size_t>(rank)]) << pair.from << ", rank " << rank;
        }
      }
    }
  }
}

// Planned all-reduces with priced chunks run as one backend all-reduce
// (Comm::StartAllReduce) on the ring's buffer, even shards and uneven ones
// (45 elements over 4 members: chunks of 12, the buffer padded with the
// identity), in sum, avg, max and min, f32, wrapping s8 and bf16: every
// element checked, each rank's bytes the ring's 2 (k - 1) chunks, the
// plan's. A column-major source, whose buffer differs from the row-major
// target's, runs it as two program steps instead; so does every pair
// without priced chunks.
TEST(RankReshard, PlannedAllReducesRunAsTheBackendsWithPricedChunks) {
  struct Pair {
    const char* from;
    const char* to;
    std::vector<int64_t> shape;
    DType dtype;
    BufferFormat source_format = {};
  };
  const std::vector<Pair> pairs = {
      {"[Partial(), Replicate()]", "[Replicate(), Replicate()]", {16, 16}, DType::kF32},
      {"[Partial(\"avg\"), Shard(0)]", "[Replicate(), Shard(0)]", {16, 8}, DType::kF32},
      {"[Partial(\"max\"), Shard(1)]", "[Replicate(), Shard(1)]", {8, 6}, DType::kBF16},
      {"[Partial(\"min\"), Replicate()]", "[Replicate(), Replicate()]", {5, 4}, DType::kS8},
      {"[Partial(), Shard(1)]", "[Replicate(), Shard(1)]", {16, 4}, DType::kS8},
      {"P(None, 'y', unreduced={'x'})", "P(None, 'y')", {15, 6}, DType::kF32},  // 45 elements a device
      {"[Partial(), Replicate()]", "[Replicate(), Replicate()]", {8, 4}, DType::kF32, BufferFormat::ColumnMajor()},
  };
  for (const Pair& pair : pairs) {
    const Layout source = ParseLayout(pair.from, pair.shape, pair.dtype, XY()).value().layout;
    const Layout target = ParseLayout(pair.to, pair.shape, pair.dtype, XY()).value().layout;
    RankOptions o;
    o.planner = PlannerOptions{};
    o.planner->meshes = {XY()};
    o.source_format = pair.source_format;
    const PlanResult planned = PlanReshard(source, target, *o.planner).value();
    ASSERT_EQ(planned.plan.OpNames(), std::vector<std::string>{"all-reduce"}) << pair.from;
    const TagScheme scheme = TagSchemeFor(planned.plan);
    const bool column_major = pair.source_format.order == BufferFormat::Order::kColumnMajor;
    for (const bool priced : {false, true}) {
      o.priced_chunks = priced;
      std::vector<std::string> transports;
      std::vector<RankRunStats> stats;
      RunTaggedPlan(source, target, o, scheme, pair.from, transports, stats);
      ASSERT_EQ(transports.size(), 2u) << pair.from;  // the ring's two program steps
      const bool one_call = priced && !column_major;
      if (one_call) {
        EXPECT_EQ(transports, (std::vector<std::string>{"allreduce over groups", "in the allreduce"})) << pair.from;
      } else {
        EXPECT_NE(transports[0], "allreduce over groups") << pair.from;
      }
      const PlanStep& step = planned.plan.steps()[0];
      for (int rank = 0; rank < 8; ++rank) {
        const int64_t received = stats[static_cast<size_t>(rank)].step_bytes_received[0];
        if (one_call) {
          EXPECT_EQ(received, step.recv_bytes[static_cast<size_t>(rank)]) << pair.from << ", rank " << rank;
          EXPECT_EQ(stats[static_cast<size_t>(rank)].step_bytes_sent[0], step.send_bytes[static_cast<size_t>(rank)])
              << pair.from << ", rank " << rank;
        }
      }
    }
  }
}

// An all-gather whose gathered buffer one call cannot carry (each member's
// 2048 bytes fit a 3000-byte call, the 4096 gathered do not) runs as an
// all-to-all-v over its groups instead, on every rank alike.
TEST(RankReshard, AnAllGatherTooLargeForOneCallRunsAsAnAllToAll) {
  const Layout source = Canonical("P('y', None, 'x')"), gathered = Canonical("P(None, None, 'x')");
  RankOptions o;
  o.planner = PlannerOptions{};
  o.planner->meshes = {XY()};
  std::vector<std::string> transports;
  for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
         return RunTagged(rank, std::make_unique<Limited>(std::move(c), 3000), source, gathered, o, &transports);
       }))
    EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(transports, std::vector<std::string>{"alltoallv over groups"});
}

TEST(RankReshard, MessagesAboveTheLimitGoAsChunks) {
  const Layout source = Canonical("P('y', None, 'x')"), target = Canonical("P(None, ('x', 'y'), None)");
  RankOptions o;
  o.transport = StepTransport::kAlltoallv;
  o.max_message_bytes = 100;  // each 256-byte message in three chunks
  std::vector<std::string> transports;
  for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
         return RunTagged(rank, std::move(c), source, target, o, &transports);
       }))
    EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(transports, std::vector<std::string>{"p2p"});
}

// A backend that counts what the runner asks of it, over threads as ranks:
// the request handles its waits scan (a wait looks at every request it is
// given) and the most sends started and not yet completed.
class Counting : public Forwarding {
 public:
  explicit Counting(std::unique_ptr<Comm> inner) : Forwarding(std::move(inner)) {}
  std::string_view name() const override { return "counting"; }
  Status StartSend(const std::byte* d, int64_t b, int peer, int64_t& r) override {
    RESHARD_RETURN_IF_ERROR(Forwarding::StartSend(d, b, peer, r));
    ++sends;
    if (r != kNoRequest) open_sends_.insert(r);
    most_open_sends = std::max(most_open_sends, open_sends_.size());
    return Status::Ok();
  }
  Status StartRecv(std::byte* d, int64_t b, int peer, int64_t& r) override {
    ++recvs;
    return Forwarding::StartRecv(d, b, peer, r);
  }
  Status WaitSome(std::span<int64_t> r, bool block, std::vector<int>& done) override {
    scanned += r.size();
    const std::vector<int64_t> ids(r.begin(), r.end());
    const size_t before = done.size();
    RESHARD_RETURN_IF_ERROR(Forwarding::WaitSome(r, block, done));
    for (size_t k = before; k < done.size(); ++k) open_sends_.erase(ids[static_cast<size_t>(done[k])]);
    return Status::Ok();
  }
  Status WaitAll(std::span<int64_t> r) override {
    scanned += r.size();
    const std::vector<int64_t> ids(r.begin(), r.end());
    RESHARD_RETURN_IF_ERROR(Forwarding::WaitAll(r));
    for (int64_t id : ids) open_sends_.erase(id);
    return Status::Ok();
  }

  size_t sends = 0, recvs = 0, scanned = 0, most_open_sends = 0;

 private:
  std::set<int64_t> open_sends_;
};

// Tens of thousands of chunks cost the runner work linear in their number:
// its waits scan each request a bounded number of times (waiting on every
// chunk's request at once had made time grow with their square), and sends
// in flight stay bounded (OpenMPI's progress engine walks every pending send
// on every call: 80,000 posted at once took 20 s). Counted, not timed.
TEST(RankReshard, ManyChunksCostLinearWork) {
  const std::vector<int64_t> shape = {32, 2500};
  const Layout rows = ParseLayout("{devices=[2,1]<=[2]}", shape, DType::kU8, std::nullopt)->layout;
  const Layout cols = ParseLayout("{devices=[1,2]<=[2]}", shape, DType::kU8, std::nullopt)->layout;
  RankOptions o;
  o.transport = StepTransport::kPointToPoint;
  o.max_message_bytes = 1;  // each byte a chunk: 20,000 each way
  std::vector<Counting*> counted(2, nullptr);
  for (const Status& s : OnRanks(2, [&](int rank, std::unique_ptr<Comm> c) {
         auto counting = std::make_unique<Counting>(std::move(c));
         counted[static_cast<size_t>(rank)] = counting.get();
         RESHARD_ASSIGN_OR_RETURN(RankReshard r, RankReshard::Create(std::move(counting), rows, cols, o));
         std::vector<std::byte> src(static_cast<size_t>(r.source_bytes())), dst(static_cast<size_t>(r.target_bytes()));
         FillTags(rows, rank, src);
         RESHARD_ASSIGN_OR_RETURN(RankRunStats stats, r.Execute(src, dst));
         const TagCheck check = CheckTags(cols, rank, dst);
         if (check.mismatches != 0) return Status::Internal(check.first_problem);
         const Counting& n = *counted[static_cast<size_t>(rank)];
         if (n.sends != 20000 || n.recvs != 20000 || stats.messages_sent != 20000)
           return Status::Internal(std::to_string(n.sends) + " sends, " + std::to_string(n.recvs) + " receives, " +
                                   std::to_string(stats.messages_sent) + " chunks counted");
         if (n.scanned > 2 * (n.sends + n.recvs) + 1000)
           return Status::Internal("waits scanned " + std::to_string(n.scanned) + " requests for " +
                                   std::to_string(n.sends + n.recvs) + " chunks");
         if (n.most_open_sends > 256) return Status::Internal(std::to_string(n.most_open_sends) + " sends in flight");
         return Status::Ok();
       }))
    EXPECT_TRUE(s.ok()) << s;
}

TEST(RankReshard, LayoutsThatDifferOnOneRankAreAnErrorOnEveryRank) {
  const Layout source = Canonical("P('y', None, 'x')"), target = Canonical("P(None, ('x', 'y'), None)");
  const Layout other = Canonical("P('x', None, None)");
  std::vector<Status> out = OnRanks(4 * 2, [&](int rank, std::unique_ptr<Comm> c) {
    return RankReshard::Create(std::move(c), source, rank == 5 ? other : target).status();
  });
  for (const Status& s : out) {
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("rank 5's layouts or options differ"), std::string::npos) << s;
  }
}

// The runner packs and unpacks: a program compiled with the direct copies
// alone is refused on every rank, and one rank holding the other form is a
// mismatch everywhere; the staged form alone runs.
TEST(RankReshard, AProgramWithoutStagedCopiesIsRefusedOnEveryRank) {
  const Layout source = Canonical("P('y', None, 'x')"), target = Canonical("P(None, ('x', 'y'), None)");
  const Exchange ex = Exchange::Create(source, target).value();
  CompileOptions direct, staged;
  direct.copies = CopyForms::kDirect;
  staged.copies = CopyForms::kStaged;
  const PlanProgram direct_only = PlanProgram::Compile(ex, direct).value();
  const PlanProgram staged_only = PlanProgram::Compile(ex, staged).value();
  for (const Status& s : OnRanks(8, [&](int, std::unique_ptr<Comm> c) {
         return RankReshard::Create(std::move(c), direct_only).status();
       })) {
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("without the staged copies"), std::string::npos) << s;
  }
  for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) {
         return RankReshard::Create(std::move(c), rank == 3 ? direct_only : staged_only).status();
       }))
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  for (const Status& s : OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) -> Status {
         RESHARD_ASSIGN_OR_RETURN(RankReshard r, RankReshard::Create(std::move(c), staged_only));
         std::vector<std::byte> src(static_cast<size_t>(r.source_bytes())), dst(static_cast<size_t>(r.target_bytes()));
         FillTags(source, rank, src);
         RESHARD_RETURN_IF_ERROR(r.Execute(src, dst).status());
         const TagCheck check = CheckTags(target, rank, dst);
         return check.mismatches == 0 ? Status::Ok() : Status::Internal(check.first_problem);
       }))
    EXPECT_TRUE(s.ok()) << s;
}

TEST(RankReshard, AWrongBufferOnOneRankIsAnErrorOnEveryRankAndNothingMoves) {
  const Layout source = Canonical("P('y', None, 'x')"), target = Canonical("P(None, ('x', 'y'), None)");
  std::vector<Status> out = OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) -> Status {
    RESHARD_ASSIGN_OR_RETURN(RankReshard r, RankReshard::Create(std::move(c), source, target));
    std::vector<std::byte> src(static_cast<size_t>(r.source_bytes() - (rank == 3 ? 4 : 0)));
    std::vector<std::byte> dst(static_cast<size_t>(r.target_bytes()), std::byte{7});
    Status s = r.Execute(src, dst).status();
    for (std::byte b : dst)
      if (b != std::byte{7}) return Status::Internal("a target was written");
    return s;
  });
  for (const Status& s : out) {
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("rank 3: its source buffer holds 2044 bytes"), std::string::npos) << s;
  }
}

TEST(RankReshard, AFailingHookOnOneRankStopsEveryRank) {
  const Layout source = Canonical("P('y', None, 'x')"), target = Canonical("P(None, ('x', 'y'), None)");
  std::vector<Status> out = OnRanks(8, [&](int rank, std::unique_ptr<Comm> c) -> Status {
    RESHARD_ASSIGN_OR_RETURN(RankReshard r, RankReshard::Create(std::move(c), source, target));
    std::vector<std::byte> src(static_cast<size_t>(r.source_bytes())), dst(static_cast<size_t>(r.target_bytes()));
    return r.Execute(src, dst, [&](size_t, std::span<const std::byte>) {
              return rank == 6 ? Status::Internal("checker failed") : Status::Ok();
            }).status();
  });
  for (const Status& s : out) EXPECT_EQ(s.message(), "rank 6: checker failed") << s;
}

TEST(RankReshard, ADeviceOutsideTheGroupIsAnError) {
  const Layout source = Canonical("P('y', None, 'x')"), target = Canonical("P(None, ('x', 'y'), None)");
  for (const Status& s : OnRanks(4, [&](int, std::unique_ptr<Comm> c) {
         return RankReshard::Create(std::move(c), source, target).status();
       })) {
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("device 7, but the communicator has 4 ranks"), std::string::npos) << s;
  }
}

// An avg of partial values into a column-major target with a leading
// dimension: the values come out exact, and the bytes between the columns,
// which are the caller's, are left as they were (avg divides only what its
// copies wrote).
TEST(RankReshard, PartialAvgLeavesTheGapsOfALeadingDimension) {
  const Mesh m = Mesh::Create({{"x", 2}, {"y", 2}}).value();
  const Layout source = ParseLayout("[Partial(\"avg\"), Shard(0)]", {8, 6}, DType::kS32, m).value().layout;
  const Layout target = ParseLayout("P('x', None)", {8, 6}, DType::kS32, m).value().layout;
  for (bool planned : {false, true}) {
    for (const Status& s : OnRanks(4, [&](int rank, std::unique_ptr<Comm> c) -> Status {
           RankOptions o;
           o.target_format = BufferFormat::ColumnMajor(/*leading_dim=*/7);  // local [4,6] column-major: 7 x 6 slots
           if (planned) {
             o.planner = PlannerOptions{};
             o.planner->meshes = {m};
           }
           RESHARD_ASSIGN_OR_RETURN(RankReshard r, RankReshard::Create(std::move(c), source, target, o));
           std::vector<std::byte> src(static_cast<size_t>(r.source_bytes()));
           std::vector<std::byte> dst(static_cast<size_t>(r.target_bytes()), std::byte{0x5A});
           const TagScheme scheme = TagSchemeFor(source, target);
           FillTags(source, rank, src, scheme);
           RESHARD_RETURN_IF_ERROR(r.Execute(src, dst).status());
           // Back to tight row-major to check; the gap rows stay 0x5A.
           std::vector<std::byte> tight(static_cast<size_t>(target.LocalBytes(rank)));
           const std::vector<int64_t> shape = target.LocalShape(rank);
           for (int64_t i = 0; i < shape[0]; ++i)
             for (int64_t j = 0; j < shape[1]; ++j)
               std::memcpy(tight.data() + (i * shape[1] + j) * 4, dst.data() + (j * 7 + i) * 4, 4);
           for (int64_t j = 0; j < shape[1]; ++j)
             for (int64_t i = shape[0]; i < 7; ++i)
               for (int b = 0; b < 4; ++b)
                 if (dst[static_cast<size_t>((j * 7 + i) * 4 + b)] != std::byte{0x5A})
                   return Status::Internal("a gap byte of column " + std::to_string(j) + " changed");
           const TagCheck check = CheckTags(target, rank, tight, scheme);
           return check.mismatches == 0 ? Status::Ok() : Status::Internal(check.first_problem);
         }))
      EXPECT_TRUE(s.ok()) << (planned ? "planned: " : "exchange: ") << s;
  }
}

}  // namespace
}  // namespace reshard
