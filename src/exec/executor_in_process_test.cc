// The in-process executor: grouped and sliced phases exact and their
// schedules kept per program, threads as ranks kept between runs, and
// kAuto's choice of transport.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exec/exec_checker.h"
#include "reshard/device_program.h"
#include "reshard/executor.h"
#include "reshard/host_buffer.h"
#include "reshard/notation.h"
#include "reshard/planner.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, std::vector<int64_t> shape, DType dtype = DType::kF32) {
  return ParseLayout(text, shape, dtype, std::nullopt).value().layout;
}

// Boxes that share destination rows run in groups (RunInterleaved), not in
// slices of every copy: block-cyclic pairs, with 2 threads (the boxes share
// target rows) and 16 (fewer rows per box than the executor has slices),
// one with more boxes in a group than kMaxGroup (one column of 4 rows per
// box, 2048 per target), each exact with both transports.
TEST(InProcessExecutor, ShortBoxesRunExactInGroups) {
  struct Case {
    const char *from, *to;
    std::vector<int64_t> shape;
    DType dtype;
  } cases[] = {
      {"blockcyclic(block=[8,8], grid=[2,4])", "blockcyclic(block=[16,16], grid=[4,2])", {512, 512}, DType::kF64},
      {"blockcyclic(block=[4,1], grid=[1,8])", "blockcyclic(block=[4,64], grid=[1,8])", {4, 16384}, DType::kF32},
  };
  for (const Case& c : cases) {
    const Layout src = Parse(c.from, c.shape, c.dtype), dst = Parse(c.to, c.shape, c.dtype);
    Result<PlanResult> planned = PlanReshard(src, dst, PlannerOptions{});
    ASSERT_TRUE(planned.ok()) << planned.status();
    Result<PlanProgram> p = PlanProgram::Compile(planned->plan);
    ASSERT_TRUE(p.ok()) << p.status();
    for (int threads : {2, 16}) {
      for (Transport transport : {Transport::kStaged, Transport::kDirect}) {
        Result<CheckReport> r = RunChecked(*p, threads, transport);
        ASSERT_TRUE(r.ok()) << c.from << ": " << r.status();
        EXPECT_TRUE(r->ok()) << c.from << ": " << r->first_problem;
        EXPECT_EQ(r->elements_checked, c.shape[0] * c.shape[1]) << c.from;
      }
    }
  }
}

// Each device's source (filled with tags for `program`) and target buffer.
struct TaggedBuffers {
  std::vector<std::vector<std::byte>> in, out;
  std::vector<std::span<const std::byte>> sources;
  std::vector<std::span<std::byte>> targets;
};

TaggedBuffers MakeTaggedBuffers(const PlanProgram& program) {
  TaggedBuffers b;
  for (int64_t dev : program.devices()) {
    b.in.emplace_back(static_cast<size_t>(program.source().LocalBytes(dev)));
    b.out.emplace_back(static_cast<size_t>(program.target().LocalBytes(dev)));
  }
  std::vector<std::span<std::byte>> fill(b.in.begin(), b.in.end());
  FillSources(program, fill, 1);
  b.sources.assign(b.in.begin(), b.in.end());
  b.targets.assign(b.out.begin(), b.out.end());
  return b;
}

// Runs `program` into zeroed targets and checks every element; the run's stats.
Result<ExecStats> RunIntoZeroed(Executor& ex, const PlanProgram& program, TaggedBuffers& b, TagCheck& check) {
  for (auto& o : b.out) std::fill(o.begin(), o.end(), std::byte{0});
  Result<ExecStats> r = ex.Run(program, b.sources, b.targets);
  std::vector<std::span<const std::byte>> got(b.out.begin(), b.out.end());
  if (r.ok()) check = CheckTargets(program, got, 1);
  return r;
}

// One executor runs grouped phases again from the order it kept (Run again
// on one program), and after another program of the same sizes into the
// same buffers (a different grouping): every run exact.
TEST(InProcessExecutor, RepeatedRunsReuseGroupsExactly) {
  const std::vector<int64_t> shape = {256, 256};
  const Layout src = Parse("blockcyclic(block=[8,8], grid=[2,4])", shape, DType::kF32);
  const Layout a = Parse("blockcyclic(block=[16,16], grid=[4,2])", shape, DType::kF32);
  const Layout b = Parse("blockcyclic(block=[32,8], grid=[4,2])", shape, DType::kF32);
  const PlanProgram pa = PlanProgram::Compile(Exchange::Create(src, a).value()).value();
  const PlanProgram pb = PlanProgram::Compile(Exchange::Create(src, b).value()).value();
  for (Transport transport : {Transport::kStaged, Transport::kDirect}) {
    std::unique_ptr<Executor> ex = MakeInProcessExecutor(ExecOptions{.threads = 2, .transport = transport});
    TaggedBuffers buffers = MakeTaggedBuffers(pa);
    for (size_t i = 0; i < 8; ++i)
      ASSERT_EQ(buffers.out[i].size(), static_cast<size_t>(b.LocalBytes(static_cast<int64_t>(i))));
    const PlanProgram* last = nullptr;
    for (const PlanProgram* p : {&pa, &pa, &pb, &pb, &pa}) {
      TagCheck c;
      Result<ExecStats> r = RunIntoZeroed(*ex, *p, buffers, c);
      ASSERT_TRUE(r.ok()) << r.status();
      // The boxes run in groups; a run of the program the last run ran
      // takes their order from it, another program sorts afresh.
      if (p == last)
        EXPECT_GT(r->phases_reused, 0);
      else
        EXPECT_EQ(r->phases_reused, 0);
      last = p;
      EXPECT_EQ(c.mismatches, 0) << c.first_problem;
      EXPECT_EQ(c.checked, shape[0] * shape[1]);
    }
  }
}

// Threads as ranks keep their ranks between runs of one program, and the
// thread that asks for a run works as the first of the ranks' threads
// (rank_threads.h): runs asked for from other threads in turn go on with
// the same ranks, some of them now on another thread, every run exact.
TEST(InProcessExecutor, RanksKeptBetweenRunsAskedForFromOtherThreads) {
  const std::vector<int64_t> shape = {256, 256};
  const Layout src = Parse("blockcyclic(block=[8,8], grid=[2,4])", shape, DType::kF32);
  const Layout dst = Parse("blockcyclic(block=[16,16], grid=[4,2])", shape, DType::kF32);
  const PlanProgram p = PlanProgram::Compile(Exchange::Create(src, dst).value()).value();
  for (int threads : {1, 2, 3}) {
    std::unique_ptr<Executor> ex = MakeInProcessExecutor(ExecOptions{.threads = threads, .transport = Transport::kRanks});
    TaggedBuffers buffers = MakeTaggedBuffers(p);
    auto run = [&] {
      TagCheck c;
      Result<ExecStats> r = RunIntoZeroed(*ex, p, buffers, c);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->transport, Transport::kRanks);
      EXPECT_EQ(c.mismatches, 0) << c.first_problem;
      EXPECT_EQ(c.checked, shape[0] * shape[1]);
    };
    for (int k = 0; k < 3; ++k) {
      run();
      std::thread(run).join();
    }
  }
}

// A program's schedule does not depend on where its buffers are: a run of
// the same program into other buffers reuses it and is exact; a program
// compiled in place of the one last run (same address) decides afresh.
TEST(InProcessExecutor, ReusedSchedulesFollowTheProgramNotTheBuffers) {
  const std::vector<int64_t> shape = {256, 256};
  const Layout src = Parse("blockcyclic(block=[8,8], grid=[2,4])", shape, DType::kF32);
  const Layout dst = Parse("blockcyclic(block=[16,16], grid=[4,2])", shape, DType::kF32);
  const Exchange exchange = Exchange::Create(src, dst).value();
  for (Transport transport : {Transport::kStaged, Transport::kDirect}) {
    std::unique_ptr<Executor> ex = MakeInProcessExecutor(ExecOptions{.threads = 2, .transport = transport});
    std::optional<PlanProgram> slot;
    for (int compiled = 0; compiled < 2; ++compiled) {
      slot.reset();
      slot.emplace(PlanProgram::Compile(exchange).value());
      std::vector<TaggedBuffers> kept;  // every run's buffers alive: each run's are at other addresses
      for (int run = 0; run < 3; ++run) {
        TaggedBuffers& buffers = kept.emplace_back(MakeTaggedBuffers(*slot));
        for (size_t earlier = 0; earlier + 1 < kept.size(); ++earlier)
          ASSERT_NE(kept[earlier].targets[0].data(), buffers.targets[0].data());
        TagCheck c;
        Result<ExecStats> r = RunIntoZeroed(*ex, *slot, buffers, c);
        ASSERT_TRUE(r.ok()) << r.status();
        if (run == 0)
          EXPECT_EQ(r->phases_reused, 0) << "compiled " << compiled;
        else
          EXPECT_GT(r->phases_reused, 0) << "compiled " << compiled << ", run " << run;
        EXPECT_EQ(c.mismatches, 0) << c.first_problem;
        EXPECT_EQ(c.checked, shape[0] * shape[1]);
      }
    }
  }
}

// Phases whose copies run sliced (rows to columns: every source row feeds
// every receiver) are kept too: the second run of one program reuses how
// each phase ran, decided in the first, and both runs are exact. The direct
// transport's one phase is the sliced one (the staged transport adds a
// grouped unpack phase).
TEST(InProcessExecutor, RepeatedRunsReuseSlicedPhasesExactly) {
  const std::vector<int64_t> shape = {1024, 1024};
  const Layout src = Parse("{devices=[8,1]<=[8]}", shape, DType::kF32);
  const Layout dst = Parse("{devices=[1,8]<=[8]}", shape, DType::kF32);
  const PlanProgram p = PlanProgram::Compile(Exchange::Create(src, dst).value()).value();
  for (Transport transport : {Transport::kStaged, Transport::kDirect}) {
    std::unique_ptr<Executor> ex = MakeInProcessExecutor(ExecOptions{.threads = 2, .transport = transport});
    TaggedBuffers buffers = MakeTaggedBuffers(p);
    for (int run = 0; run < 2; ++run) {
      TagCheck c;
      Result<ExecStats> r = RunIntoZeroed(*ex, p, buffers, c);
      ASSERT_TRUE(r.ok()) << r.status();
      if (run == 0)
        EXPECT_EQ(r->phases_reused, 0);
      else
        EXPECT_GT(r->phases_reused, 0);
      EXPECT_EQ(c.mismatches, 0) << c.first_problem;
      EXPECT_EQ(c.checked, shape[0] * shape[1]);
    }
  }
}

// A thread count: the hardware's for 0 or less, at most kMaxThreads.
TEST(InProcessExecutor, ThreadCountsResolveOnce) {
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(ResolveThreads(0), std::min(hardware, kMaxThreads));
  EXPECT_EQ(ResolveThreads(-3), ResolveThreads(0));
  EXPECT_EQ(ResolveThreads(3), 3);
  EXPECT_EQ(ResolveThreads(kMaxThreads + 1), kMaxThreads);
}

// kAuto's rule: the ranks up to kAutoRankDevices devices and kMaxRankMessages
// messages, counted alike per message and per group pattern (the canonical
// all-to-all: 8 devices, 7 messages each), and as the plan counts them for
// an all-gather of a 2-D tiling (one group of 8 here: 56 again).
TEST(InProcessExecutor, AutoWeighsDevicesAndMessages) {
  EXPECT_EQ(AutoTransport(8, 56), Transport::kRanks);
  ASSERT_GE(MaxRankDevices(), kAutoRankDevices);
  EXPECT_EQ(AutoTransport(kAutoRankDevices, kMaxRankMessages), Transport::kRanks);
  EXPECT_EQ(AutoTransport(kAutoRankDevices + 1, 0), Transport::kDirect);
  EXPECT_EQ(AutoTransport(8, kMaxRankMessages + 1), Transport::kDirect);
  Layout src = Parse("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16});
  Layout dst = Parse("{devices=[1,8,1]<=[8]}", {16, 16, 16});
  const CollectivePlan plan = PlanReshard(src, dst, PlannerOptions{}).value().plan;
  CompileOptions per_message;
  per_message.group_patterns = false;
  EXPECT_EQ(ProgramMessages(PlanProgram::Compile(plan, per_message).value()), 56);
  const PlanProgram grouped = PlanProgram::Compile(plan).value();
  ASSERT_NE(grouped.steps()[0].group_copies, nullptr);
  EXPECT_EQ(ProgramMessages(grouped), 56);
  const Layout tiled = Parse("{devices=[4,2]<=[8]}", {16, 16});
  const Layout replicated = Parse("{devices=[1,1,8]<=[8] last_tile_dim_replicate}", {16, 16});
  PlannerOptions gathers;
  gathers.strategy = Strategy::kCollectives;
  const CollectivePlan two = PlanReshard(tiled, replicated, gathers).value().plan;
  int64_t planned = 0;
  for (const PlanStep& s : two.steps()) planned += s.sends.Sum();
  EXPECT_EQ(planned, 56);
  EXPECT_EQ(ProgramMessages(PlanProgram::Compile(two).value()), planned);
  EXPECT_EQ(ProgramMessages(PlanProgram::Compile(two, per_message).value()), planned);
}

}  // namespace
}  // namespace reshard
