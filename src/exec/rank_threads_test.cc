// RankThreads: the in-process executor's persistent ranks. A rank that
// fails alone ends the others' waits at once, and the run returns its error.
#include "exec/rank_threads.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/exec_checker.h"
#include "reshard/device_program.h"
#include "reshard/host_buffer.h"
#include "reshard/notation.h"
#include "reshard/planner.h"

namespace reshard {
namespace {

// The canonical reshard's plan, compiled (both forms of the copies).
PlanProgram CanonicalProgram() {
  const std::vector<int64_t> shape = {16, 16, 16};
  const Layout src = ParseLayout("{devices=[2,1,4]<=[4,2]T(1,0)}", shape, DType::kF32, std::nullopt).value().layout;
  const Layout dst = ParseLayout("{devices=[1,8,1]<=[8]}", shape, DType::kF32, std::nullopt).value().layout;
  return PlanProgram::Compile(PlanReshard(src, dst, PlannerOptions{}).value().plan).value();
}

// Every device's source and target buffer of `p`, and their spans.
struct Buffers {
  std::vector<HostBuffer> in, out;
  std::vector<std::span<const std::byte>> sources;
  std::vector<std::span<std::byte>> targets;
  explicit Buffers(const PlanProgram& p) {
    for (int64_t d : p.devices()) {
      in.emplace_back(p.source().LocalBytes(d));
      out.emplace_back(p.target().LocalBytes(d));
    }
    for (size_t i = 0; i < in.size(); ++i) {
      sources.push_back(in[i].span());
      targets.push_back(out[i].span());
    }
  }
};

// The checker's hook runs in rank 0 between two barriers of every rank: when
// it throws (out of memory, say), rank 0 fails alone while the others wait
// at the second barrier. They end at once (not at the comms' 600 s), and
// Run returns rank 0's error; the ranks then run no more.
TEST(RankThreads, ARankFailingAloneEndsTheRunAtOnce) {
  const PlanProgram p = CanonicalProgram();
  int hooked = 0;
  RankThreads::Hook hook = [&](size_t, std::span<const std::span<const std::byte>>) {
    ++hooked;
    throw std::runtime_error("the checker ran out of memory");
  };
  Result<std::unique_ptr<RankThreads>> ranks =
      RankThreads::Start(p, RankOptions{}, hook, RankThreads::CommSettings{.timeout_seconds = 600, .copiers = 2});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  Buffers buffers(p);
  std::vector<std::span<const std::byte>>& sources = buffers.sources;
  std::vector<std::span<std::byte>>& targets = buffers.targets;
  const auto start = std::chrono::steady_clock::now();
  Result<std::vector<RankRunStats>> run = (*ranks)->Run(sources, targets);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_EQ(hooked, 1);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), Status::Code::kInternal);
  EXPECT_NE(run.status().message().find("rank 0: the checker ran out of memory"), std::string::npos) << run.status();
  EXPECT_TRUE((*ranks)->broken());
  EXPECT_FALSE((*ranks)->Run(sources, targets).ok());
}

// A wrong buffer size on one rank is not agreed across the ranks (the
// caller joins them: RankOptions::joined_by_caller): it is that rank's
// InvalidArgument, naming it, and the others' waits for it end at once.
TEST(RankThreads, AWrongBufferSizeOnOneRankEndsTheRunAtOnce) {
  const PlanProgram p = CanonicalProgram();
  Result<std::unique_ptr<RankThreads>> ranks =
      RankThreads::Start(p, RankOptions{}, nullptr, RankThreads::CommSettings{.timeout_seconds = 600, .copiers = 2});
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  Buffers buffers(p);
  std::vector<std::span<const std::byte>>& sources = buffers.sources;
  std::vector<std::span<std::byte>>& targets = buffers.targets;
  targets[3] = targets[3].first(targets[3].size() - 4);
  const auto start = std::chrono::steady_clock::now();
  Result<std::vector<RankRunStats>> run = (*ranks)->Run(sources, targets);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status(), Status::InvalidArgument("rank 3: its target buffer holds 2044 bytes; its part of the target "
                                                  "layout needs 2048"))
      << run.status();
  EXPECT_TRUE((*ranks)->broken());
}

// An error every rank meets alike at creation is agreed, and Start returns
// it as every rank has it (naming no rank), at once.
TEST(RankThreads, ACreationErrorEveryRankMeetsIsStartsError) {
  const PlanProgram p = CanonicalProgram();
  RankOptions options;
  options.max_message_bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<RankThreads>> ranks =
      RankThreads::Start(p, options, nullptr, RankThreads::CommSettings{.timeout_seconds = 600, .copiers = 2});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status(), Status::InvalidArgument("max_message_bytes is 0; it must be at least 1")) << ranks.status();
}

}  // namespace
}  // namespace reshard
