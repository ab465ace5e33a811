// Audit() on small hand-written inputs: findings, logs, errors, reports.
#include "reshard/audit.h"

#include <gtest/gtest.h>

#include <string>

namespace reshard {
namespace {

// The canonical case as XLA partitions it: two all-gathers, then each device
// slices its target block (offset 2 * partition-id along dim 1).
const char* kCanonical = R"(HloModule canonical, num_partitions=8

ENTRY %main (p: f32[8,16,4]) -> f32[16,2,16] {
  %p = f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}
  %ag = f32[8,16,16]{2,1,0} all-gather(%p), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={2}, use_global_device_ids=true
  %ag2 = f32[16,16,16]{2,1,0} all-gather(%ag), channel_id=2, replica_groups=[4,2]<=[8], dimensions={0}, use_global_device_ids=true
  %pid = u32[] partition-id()
  %two = u32[] constant(2)
  %off = u32[] multiply(%pid, %two)
  %zero = u32[] constant(0)
  ROOT %ds = f32[16,2,16]{2,1,0} dynamic-slice(%ag2, %zero, %off, %zero), dynamic_slice_sizes={16,2,16}
}
)";

const char* kLog =
    "W1130 06:59:12.335303 18087 spmd_partitioner.cc:656] [SPMD] Involuntary full rematerialization. The compiler cannot go "
    "from sharding {devices=[2,1,4]<=[4,2]T(1,0)} to {devices=[1,8,1]<=[8]} efficiently for HLO operation %param = "
    "f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}, metadata={op_name=\"v\"}. As the last resort, "
    "SPMD will replicate the tensor and then partition it to obtain the target sharding, which is inefficient.\n";

AuditReport AuditOk(const std::vector<AuditInput>& inputs, AuditOptions options = {}) {
  Result<AuditReport> r = Audit(inputs, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : AuditReport{};
}

TEST(Audit, FindsTheCanonicalRematerializationInHlo) {
  const AuditReport r = AuditOk({{"canonical.hlo", kCanonical}});
  ASSERT_EQ(r.findings.size(), 1u);
  const AuditFinding& f = r.findings[0];
  EXPECT_EQ(f.kind, AuditKind::kFullRematerialization);
  EXPECT_EQ(f.instruction, "p");
  EXPECT_EQ(f.to_instruction, "ds");
  EXPECT_EQ(f.line, 4);
  EXPECT_EQ(f.shape, (std::vector<int64_t>{16, 16, 16}));
  EXPECT_EQ(f.from, "{devices=[2,1,4]<=[4,2]T(1,0)}");
  EXPECT_EQ(f.to, "{devices=[1,8,1]<=[8]}");
  EXPECT_EQ(f.xla_max_recv_bytes, 14336);
  ASSERT_EQ(f.xla_collectives.size(), 2u);
  EXPECT_EQ(f.xla_collectives[0].max_recv_bytes, 6144);
  EXPECT_EQ(f.xla_collectives[1].max_recv_bytes, 8192);
  EXPECT_EQ(f.reshard_max_recv_bytes, 1792);
  EXPECT_EQ(f.reshard_collectives, std::vector<std::string>{"all-to-all"});
  EXPECT_EQ(f.lower_bound_max_recv_bytes, 1792);
  EXPECT_FALSE(f.logged);
  EXPECT_FALSE(f.estimated);
  ASSERT_EQ(r.modules.size(), 1u);
  EXPECT_EQ(r.modules[0].findings, 1);
  EXPECT_EQ(r.xla_recv_bytes, 14336);
  EXPECT_EQ(r.reshard_recv_bytes, 1792);
  EXPECT_TRUE(r.not_understood.empty());
}

// A collective whose output shape is not what it makes of its operands (a
// dump edited or cut wrong) is not priced: taken as is, this all-gather of
// 8192 B per device into 1.6 PB was a finding saving 1.6e15 B.
TEST(Audit, ACollectiveWhoseShapesDisagreeIsNotUnderstood) {
  std::string text = kCanonical;
  const std::string from = "%ag2 = f32[16,16,16]";
  text.replace(text.find(from), from.size(), "%ag2 = f32[16,16,1600000000000]");
  const std::string slice = "dynamic-slice(%ag2";
  text.replace(text.find(slice), slice.size(), "dynamic-slice(%ag");  // (the slice as before, of a value no longer followed)
  const AuditReport r = AuditOk({{"edited.hlo", text}});
  EXPECT_TRUE(r.findings.empty());
  EXPECT_EQ(r.xla_recv_bytes, 0);
  ASSERT_FALSE(r.not_understood.empty());
  EXPECT_NE(r.not_understood[0].reason.find("is not what all-gather over groups of 2 makes of its operands (2048 elements)"),
            std::string::npos)
      << r.not_understood[0].reason;
  // The same for an all-to-all whose output is not its operand's size, and a reduce-scatter's.
  for (const auto& [line, edited] : std::vector<std::pair<std::string, std::string>>{
           {"%ag = f32[8,16,16]{2,1,0} all-gather(%p), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={2}",
            "%ag = f32[8,16,16]{2,1,0} all-to-all(%p), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={2}"},
           {"%ag = f32[8,16,16]{2,1,0} all-gather(%p), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={2}",
            "%ag = f32[8,16,16]{2,1,0} reduce-scatter(%p), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={2}, to_apply=%add"}}) {
    std::string t = kCanonical;
    t.replace(t.find(line), line.size(), edited);
    const AuditReport e = AuditOk({{"edited.hlo", t}});
    EXPECT_TRUE(e.findings.empty()) << edited;
    ASSERT_FALSE(e.not_understood.empty()) << edited;
    EXPECT_NE(e.not_understood[0].reason.find("is not what"), std::string::npos) << e.not_understood[0].reason;
  }
}

// The same reshard as GPU modules print it: an async all-gather pair, the
// second all-gather inside a fusion, the slice behind an async wrapper.
TEST(Audit, FollowsAsyncPairsFusionsAndWrappers) {
  const char* text = R"(HloModule canonical_async, num_partitions=8

%fused (q: f32[8,16,16]) -> f32[16,16,16] {
  %q = f32[8,16,16]{2,1,0} parameter(0)
  ROOT %g = f32[16,16,16]{2,1,0} all-gather(q), channel_id=2, replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}
}

%wrapped (a: f32[16,16,16], o: u32[]) -> f32[16,2,16] {
  %a = f32[16,16,16]{2,1,0} parameter(0)
  %o = u32[] parameter(1)
  %z = u32[] constant(0)
  ROOT %s = f32[16,2,16]{2,1,0} dynamic-slice(a, z, o, z), dynamic_slice_sizes={16,2,16}
}

ENTRY %main (p: f32[8,16,4]) -> f32[16,2,16] {
  %p = f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}
  %ags = (f32[8,16,4]{2,1,0}, f32[8,16,16]{2,1,0}) all-gather-start(p), channel_id=1, replica_groups=mesh['y'=2,'x'=4], device_ids=([4,2]T(1,0)) {'x'}, dimensions={2}
  %ag = f32[8,16,16]{2,1,0} all-gather-done(ags)
  %ag2 = f32[16,16,16]{2,1,0} fusion(ag), kind=kLoop, calls=%fused
  %pid = u32[] partition-id()
  %two = u32[] constant(2)
  %off = u32[] multiply(pid, two)
  %st = ((f32[16,16,16]{2,1,0}, u32[]), f32[16,2,16]{2,1,0}, s32[]) async-start(ag2, off), calls=%wrapped
  ROOT %d = f32[16,2,16]{2,1,0} async-done(st), sharding={devices=[1,8,1]<=[8]}
}
)";
  const AuditReport r = AuditOk({{"async.hlo", text}});
  ASSERT_EQ(r.findings.size(), 1u) << AuditTable(r);
  EXPECT_EQ(r.findings[0].kind, AuditKind::kFullRematerialization);
  EXPECT_EQ(r.findings[0].xla_max_recv_bytes, 14336);
  EXPECT_EQ(r.findings[0].to, "{devices=[1,8,1]<=[8]}");
  ASSERT_EQ(r.findings[0].xla_collectives.size(), 2u);
  EXPECT_EQ(r.findings[0].xla_collectives[0].instruction, "ags");
  EXPECT_EQ(r.findings[0].xla_collectives[1].instruction, "g");
  EXPECT_TRUE(r.not_understood.empty());
}

// The canonical reshard of an invariant array inside a `while` body, its result
// added into a carry that starts as zeros: the body is followed from the carry's
// layout as later iterations see it, and the reshard carries XLA's trip count.
std::string LoopModule(const std::string& backend_config) {
  return R"(HloModule loop, num_partitions=8

%body (s: (s32[], f32[8,16,4], f32[16,2,16])) -> (s32[], f32[8,16,4], f32[16,2,16]) {
  %s = (s32[], f32[8,16,4]{2,1,0}, f32[16,2,16]{2,1,0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %x = f32[8,16,4]{2,1,0} get-tuple-element(%s), index=1
  %y = f32[16,2,16]{2,1,0} get-tuple-element(%s), index=2
  %ag = f32[8,16,16]{2,1,0} all-gather(%x), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={2}, use_global_device_ids=true
  %ag2 = f32[16,16,16]{2,1,0} all-gather(%ag), channel_id=2, replica_groups=[4,2]<=[8], dimensions={0}, use_global_device_ids=true
  %pid = u32[] partition-id()
  %two = u32[] constant(2)
  %off = u32[] multiply(%pid, %two)
  %zero = u32[] constant(0)
  %ds = f32[16,2,16]{2,1,0} dynamic-slice(%ag2, %zero, %off, %zero), dynamic_slice_sizes={16,2,16}
  %y2 = f32[16,2,16]{2,1,0} add(%ds, %y)
  ROOT %out = (s32[], f32[8,16,4]{2,1,0}, f32[16,2,16]{2,1,0}) tuple(%next, %x, %y2)
}

%cond (c: (s32[], f32[8,16,4], f32[16,2,16])) -> pred[] {
  %c = (s32[], f32[8,16,4]{2,1,0}, f32[16,2,16]{2,1,0}) parameter(0)
  %k = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%k, %n), direction=LT
}

ENTRY %main (p: f32[8,16,4]) -> f32[16,2,16] {
  %p = f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}
  %c0 = s32[] constant(0)
  %z = f32[] constant(0)
  %y0 = f32[16,2,16]{2,1,0} broadcast(%z), dimensions={}
  %init = (s32[], f32[8,16,4]{2,1,0}, f32[16,2,16]{2,1,0}) tuple(%c0, %p, %y0)
  %w = (s32[], f32[8,16,4]{2,1,0}, f32[16,2,16]{2,1,0}) while(%init), condition=%cond, body=%body)" +
         backend_config + R"(
  ROOT %r = f32[16,2,16]{2,1,0} get-tuple-element(%w), index=2
}
)";
}

TEST(Audit, FollowsWhileBodiesWithTheirTripCount) {
  const AuditReport r =
      AuditOk({{"loop.hlo", LoopModule(R"(, backend_config={"known_induction_variable":{"tuple_index":"0"},"known_trip_count":{"n":"3"}})")}});
  ASSERT_EQ(r.findings.size(), 1u) << AuditTable(r);
  const AuditFinding& f = r.findings[0];
  EXPECT_EQ(f.kind, AuditKind::kFullRematerialization);
  EXPECT_EQ(f.instruction, "p");
  EXPECT_EQ(f.to, "{devices=[1,8,1]<=[8]}");
  EXPECT_EQ(f.xla_max_recv_bytes, 14336);  // per run
  EXPECT_EQ(f.reshard_max_recv_bytes, 1792);
  EXPECT_EQ(f.trip_count, 3);
  EXPECT_EQ(f.loop, "w");
  EXPECT_EQ(f.total_saving_bytes(), 3 * 12544);
  EXPECT_EQ(r.xla_recv_bytes, 3 * 14336);
  EXPECT_EQ(r.reshard_recv_bytes, 3 * 1792);
  ASSERT_EQ(r.modules.size(), 1u);
  EXPECT_EQ(r.modules[0].collective_recv_bytes, 3 * 14336);
  EXPECT_TRUE(r.modules[0].not_attributed.empty());
  EXPECT_TRUE(r.notes.empty()) << AuditTable(r);
  EXPECT_NE(AuditTable(r).find("inside %w, which runs 3 times"), std::string::npos) << AuditTable(r);
  EXPECT_EQ(AuditJson(r)["findings"][0]["trip_count"], 3);

  // No known_trip_count: followed all the same, counted once, and said so.
  const AuditReport unknown = AuditOk({{"loop.hlo", LoopModule("")}});
  ASSERT_EQ(unknown.findings.size(), 1u) << AuditTable(unknown);
  EXPECT_EQ(unknown.findings[0].trip_count, 0);
  EXPECT_EQ(unknown.xla_recv_bytes, 14336);
  ASSERT_EQ(unknown.notes.size(), 1u);
  EXPECT_NE(unknown.notes[0].find("XLA states no trip count"), std::string::npos);
}

// Calls and conditional branches are followed like fusions: a reshard inside each is found.
TEST(Audit, FollowsCallsAndConditionals) {
  const char* remat = R"(
%remat (x: f32[8,16,4]) -> f32[16,2,16] {
  %x = f32[8,16,4]{2,1,0} parameter(0)
  %ag = f32[8,16,16]{2,1,0} all-gather(%x), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={2}, use_global_device_ids=true
  %ag2 = f32[16,16,16]{2,1,0} all-gather(%ag), channel_id=2, replica_groups=[4,2]<=[8], dimensions={0}, use_global_device_ids=true
  %pid = u32[] partition-id()
  %two = u32[] constant(2)
  %off = u32[] multiply(%pid, %two)
  %zero = u32[] constant(0)
  ROOT %ds = f32[16,2,16]{2,1,0} dynamic-slice(%ag2, %zero, %off, %zero), dynamic_slice_sizes={16,2,16}
}

%slice (x: f32[8,16,4]) -> f32[16,2,16] {
  %x = f32[8,16,4]{2,1,0} parameter(0)
  %z = f32[] constant(0)
  ROOT %b = f32[16,2,16]{2,1,0} broadcast(%z), dimensions={}
}
)";
  const AuditReport call = AuditOk({{"call.hlo", std::string("HloModule call, num_partitions=8\n") + remat + R"(
ENTRY %main (p: f32[8,16,4]) -> f32[16,2,16] {
  %p = f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}
  ROOT %c = f32[16,2,16]{2,1,0} call(%p), to_apply=%remat
}
)"}});
  ASSERT_EQ(call.findings.size(), 1u) << AuditTable(call);
  EXPECT_EQ(call.findings[0].xla_max_recv_bytes, 14336);
  EXPECT_EQ(call.findings[0].trip_count, 1);
  const AuditReport cond = AuditOk({{"cond.hlo", std::string("HloModule cond, num_partitions=8\n") + remat + R"(
ENTRY %main (p: f32[8,16,4], i: s32[]) -> f32[16,2,16] {
  %p = f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}
  %i = s32[] parameter(1), sharding={replicated}
  ROOT %c = f32[16,2,16]{2,1,0} conditional(%i, %p, %p), branch_computations={%slice, %remat}
}
)"}});
  ASSERT_EQ(cond.findings.size(), 1u) << AuditTable(cond);
  EXPECT_EQ(cond.findings[0].xla_max_recv_bytes, 14336);
  EXPECT_EQ(cond.findings[0].to_instruction, "ds");
  EXPECT_TRUE(cond.modules[0].not_attributed.empty());

  // Two branches that reshard alike and return the result: each branch's
  // reshard is found (none of their collectives left unattributed), and
  // since one branch runs per call, the totals count one, not both.
  std::string other = remat;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"%remat ", "%remat2 "}, {"%ag2 ", "%bg2 "},
                                 {"%ag2,", "%bg2,"}, {"%ag ", "%bg "}, {"(%ag)", "(%bg)"}, {"%ds ", "%ds2 "}, {"%slice ", "%slice2 "}})
    for (size_t at = other.find(from); at != std::string::npos; at = other.find(from, at + to.size()))
      other.replace(at, from.size(), to);
  const AuditReport both = AuditOk({{"both.hlo", std::string("HloModule both, num_partitions=8\n") + remat + other + R"(
ENTRY %main (p: f32[8,16,4], i: s32[]) -> f32[16,2,16] {
  %p = f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}
  %i = s32[] parameter(1), sharding={replicated}
  %c = f32[16,2,16]{2,1,0} conditional(%i, %p, %p, %p), branch_computations={%remat, %remat2, %slice}
  ROOT %n = f32[16,2,16]{2,1,0} negate(%c)
}
)"}});
  ASSERT_EQ(both.findings.size(), 2u) << AuditTable(both);
  EXPECT_EQ(both.findings[0].xla_max_recv_bytes, 14336);
  EXPECT_EQ(both.findings[1].xla_max_recv_bytes, 14336);
  EXPECT_NE(both.findings[0].to_instruction, both.findings[1].to_instruction);
  EXPECT_TRUE(both.modules[0].not_attributed.empty()) << AuditTable(both);
  EXPECT_EQ(both.xla_recv_bytes, 14336);
  EXPECT_EQ(both.reshard_recv_bytes, 1792);
  EXPECT_EQ(both.modules[0].xla_recv_bytes, 14336);
  EXPECT_EQ(both.modules[0].collective_recv_bytes, 14336);
}

TEST(Audit, JoinsTheLogToTheHloAndReadsEachModuleOnce) {
  const AuditReport r = AuditOk({{"a.hlo", kCanonical}, {"b.hlo", kCanonical}, {"xla.log", kLog}, {"again.log", kLog}});
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_TRUE(r.findings[0].logged);
  EXPECT_FALSE(r.findings[0].estimated);
  EXPECT_EQ(r.modules.size(), 1u);
  EXPECT_EQ(r.log_lines, 2);
}

// A program compiled twice logs its line twice, and its two identical modules
// are read as one: one finding, logged, no estimate beside it; the log alone,
// one estimate.
TEST(Audit, ALineLoggedAgainForTheSameModuleCountsOnce) {
  const AuditReport r = AuditOk({{"a.hlo", kCanonical}, {"b.hlo", kCanonical}, {"xla.log", std::string(kLog) + kLog}});
  ASSERT_EQ(r.findings.size(), 1u) << AuditTable(r);
  EXPECT_TRUE(r.findings[0].logged);
  EXPECT_FALSE(r.findings[0].estimated);
  EXPECT_EQ(r.xla_recv_bytes, 14336);
  const AuditReport log = AuditOk({{"xla.log", std::string(kLog) + kLog}});
  ASSERT_EQ(log.findings.size(), 1u) << AuditTable(log);
  EXPECT_EQ(log.xla_recv_bytes, 14336);
}

TEST(Audit, EstimatesALoggedRematerializationWithoutHlo) {
  const AuditReport r = AuditOk({{"xla.log", std::string("some other line\n") + kLog}});
  ASSERT_EQ(r.findings.size(), 1u);
  const AuditFinding& f = r.findings[0];
  EXPECT_EQ(f.kind, AuditKind::kFullRematerialization);
  EXPECT_TRUE(f.logged);
  EXPECT_TRUE(f.estimated);
  EXPECT_EQ(f.line, 2);
  EXPECT_EQ(f.instruction, "param");
  EXPECT_EQ(f.xla_max_recv_bytes, 14336);
  ASSERT_EQ(f.xla_collectives.size(), 2u);
  EXPECT_EQ(f.xla_collectives[0].op, "all-gather");
  EXPECT_EQ(f.reshard_max_recv_bytes, 1792);
}

TEST(Audit, ReportsNoWasteAtTheLowerBound) {
  const char* gather = R"(HloModule g, num_partitions=4
ENTRY %main (p: f32[4,16]) -> f32[16,16] {
  %p = f32[4,16]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT %ag = f32[16,16]{1,0} all-gather(%p), replica_groups={{0,1,2,3}}, dimensions={0}
}
)";
  AuditReport r = AuditOk({{"g.hlo", gather}});
  EXPECT_TRUE(r.findings.empty());
  EXPECT_EQ(r.reshards, 1);
  AuditOptions all;
  all.all_reshards = true;
  r = AuditOk({{"g.hlo", gather}}, all);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, AuditKind::kNone);
  EXPECT_EQ(r.findings[0].xla_max_recv_bytes, 768);
  EXPECT_EQ(r.findings[0].to, "{replicated}");
  EXPECT_EQ(AuditJson(r)["totals"]["findings"], 0);
}

TEST(Audit, UnknownSyntaxIsListedWithItsLine) {
  std::string text = kCanonical;
  const std::string from = "replica_groups=[4,2]<=[8]";
  text.replace(text.find(from), from.size(), "replica_groups=ring(8)");
  std::string log = kLog;
  log.replace(log.find("{devices=[1,8,1]<=[8]}"), 22, "{manual}");
  const AuditReport r = AuditOk({{"m.hlo", text}, {"x.log", log}});
  EXPECT_TRUE(r.findings.empty());
  ASSERT_EQ(r.not_understood.size(), 2u);
  EXPECT_EQ(r.not_understood[0].source, "m.hlo");
  EXPECT_EQ(r.not_understood[0].line, 6);
  EXPECT_NE(r.not_understood[0].reason.find("replica groups not understood"), std::string::npos);
  EXPECT_EQ(r.not_understood[1].source, "x.log");
  EXPECT_EQ(r.not_understood[1].line, 1);
  EXPECT_NE(r.not_understood[1].reason.find("not supported"), std::string::npos) << r.not_understood[1].reason;
}

TEST(Audit, MalformedInputIsAnError) {
  std::string broken = kCanonical;
  broken.replace(broken.find("all-gather(%p)"), 14, "all-gather(%q)");
  Result<AuditReport> r = Audit({{"broken.hlo", broken}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("broken.hlo: line 5"), std::string::npos) << r.status();
  r = Audit({{"bin", std::string("HloModule\0x", 11)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("binary"), std::string::npos);
}

TEST(Audit, NotesWhatItDoesNotFollow) {
  // A partial collective-permute leaves devices 0 and 1 with zeros.
  const char* text = R"(HloModule m, num_partitions=4
ENTRY %main (p: f32[4,16]) -> f32[4,16] {
  %p = f32[4,16]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT %cp = f32[4,16]{1,0} collective-permute(%p), source_target_pairs={{0,2},{1,3}}
}
)";
  const AuditReport r = AuditOk({{"m.hlo", text}});
  EXPECT_TRUE(r.findings.empty());
  ASSERT_EQ(r.notes.size(), 2u);
  EXPECT_NE(r.notes[0].find("not followed"), std::string::npos);
  // No silent gaps: the collective is named as part of no reshard.
  EXPECT_NE(r.notes[1].find("1 collective is part of no reshard found: %cp (collective-permute, line 4)"), std::string::npos)
      << r.notes[1];
  AuditOptions few;
  few.max_devices = 2;
  const AuditReport small = AuditOk({{"m.hlo", text}}, few);
  ASSERT_EQ(small.notes.size(), 1u);
  EXPECT_NE(small.notes[0].find("not audited"), std::string::npos);
}

// A sum over every dim of an array tiled over x and y: each device reduces
// its shard to a scalar, then XLA all-reduces over y, then over x. Both
// all-reduces complete the reduce's partial sums (the first only partly),
// so neither is named as part of no reshard; an all-reduce over y alone
// leaves the sums over x pending, and a second all-reduce over y adds no part.
TEST(Audit, AllReducesCompletingAScalarSumInStepsAreAttributed) {
  const std::string head = R"(HloModule m, num_partitions=8
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (p: f32[16,8]) -> f32[] {
  %p = f32[16,8]{1,0} parameter(0), sharding={devices=[4,2]<=[8]}
  %zero = f32[] constant(0)
  %r = f32[] reduce(%p, %zero), dimensions={0,1}, to_apply=%add
  %y = f32[] all-reduce(%r), channel_id=1, replica_groups=[4,2]<=[8], use_global_device_ids=true, to_apply=%add
)";
  const AuditReport both =
      AuditOk({{"m.hlo", head + "  ROOT %x = f32[] all-reduce(%y), channel_id=2, replica_groups=[2,4]<=[4,2]T(1,0), "
                                "use_global_device_ids=true, to_apply=%add\n}\n"}});
  ASSERT_EQ(both.modules.size(), 1u);
  EXPECT_TRUE(both.modules[0].not_attributed.empty());
  EXPECT_TRUE(both.findings.empty());
  // Over y twice: the second adds no part, and the sums stay pending.
  const AuditReport twice =
      AuditOk({{"m.hlo", head + "  ROOT %y2 = f32[] all-reduce(%y), channel_id=2, replica_groups=[4,2]<=[8], "
                                "use_global_device_ids=true, to_apply=%add\n}\n"}});
  ASSERT_EQ(twice.modules.size(), 1u);
  EXPECT_TRUE(twice.modules[0].not_attributed.empty());
  // Over y, then x, then x again: the sum was complete after the second, so the third reduces
  // nothing pending and is named as part of no reshard.
  const AuditReport thrice = AuditOk(
      {{"m.hlo", head + "  %x = f32[] all-reduce(%y), channel_id=2, replica_groups=[2,4]<=[4,2]T(1,0), "
                        "use_global_device_ids=true, to_apply=%add\n"
                        "  ROOT %x2 = f32[] all-reduce(%x), channel_id=3, replica_groups=[2,4]<=[4,2]T(1,0), "
                        "use_global_device_ids=true, to_apply=%add\n}\n"}});
  ASSERT_EQ(thrice.modules.size(), 1u);
  ASSERT_EQ(thrice.modules[0].not_attributed.size(), 1u);
  EXPECT_EQ(thrice.modules[0].not_attributed[0].instruction, "x2");
}

// A sharded value scaled by a whole sum every device made (x / sum(x) on a
// replicated scalar) is still followed: the scalar is equal everywhere.
TEST(Audit, AScalarEveryDeviceSummedAloneLeavesTheValueFollowed) {
  const char* text = R"(HloModule m, num_partitions=8
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (p: f32[8,16,4], q: f32[4]) -> f32[16,2,16] {
  %p = f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}
  %q = f32[4]{0} parameter(1), sharding={replicated}
  %zero = f32[] constant(0)
  %total = f32[] reduce(%q, %zero), dimensions={0}, to_apply=%add
  %scale = f32[8,16,4]{2,1,0} broadcast(%total), dimensions={}
  %scaled = f32[8,16,4]{2,1,0} multiply(%p, %scale)
  %ag = f32[8,16,16]{2,1,0} all-gather(%scaled), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={2}, use_global_device_ids=true
  %ag2 = f32[16,16,16]{2,1,0} all-gather(%ag), channel_id=2, replica_groups=[4,2]<=[8], dimensions={0}, use_global_device_ids=true
  %pid = u32[] partition-id()
  %two = u32[] constant(2)
  %off = u32[] multiply(%pid, %two)
  %z = u32[] constant(0)
  ROOT %ds = f32[16,2,16]{2,1,0} dynamic-slice(%ag2, %z, %off, %z), dynamic_slice_sizes={16,2,16}
}
)";
  const AuditReport r = AuditOk({{"m.hlo", text}});
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, AuditKind::kFullRematerialization);
  ASSERT_EQ(r.modules.size(), 1u);
  EXPECT_TRUE(r.modules[0].not_attributed.empty());
}

TEST(Audit, JsonAndTable) {
  const AuditReport r = AuditOk({{"canonical.hlo", kCanonical}, {"xla.log", kLog}});
  const nlohmann::ordered_json j = AuditJson(r);
  const auto& f = j["findings"][0];
  EXPECT_EQ(f["kind"], "full-rematerialization");
  EXPECT_EQ(f["instruction"], "p");
  EXPECT_EQ(f["shape"], nlohmann::ordered_json({16, 16, 16}));
  EXPECT_EQ(f["dtype"], "f32");
  EXPECT_EQ(f["from"], "{devices=[2,1,4]<=[4,2]T(1,0)}");
  EXPECT_EQ(f["to"], "{devices=[1,8,1]<=[8]}");
  EXPECT_EQ(f["xla"]["max_recv_bytes"], 14336);
  EXPECT_EQ(f["xla"]["collectives"], nlohmann::ordered_json({"all-gather", "all-gather"}));
  EXPECT_EQ(f["reshard"]["max_recv_bytes"], 1792);
  EXPECT_EQ(f["reshard"]["collectives"], nlohmann::ordered_json({"all-to-all"}));
  EXPECT_TRUE(f["reshard"].contains("modeled_time_us"));
  EXPECT_EQ(f["logged"], true);
  EXPECT_EQ(j["totals"]["findings"], 1);
  EXPECT_EQ(j["totals"]["xla_recv_bytes"], 14336);
  EXPECT_EQ(j["totals"]["reshard_recv_bytes"], 1792);
  const std::string table = AuditTable(r);
  EXPECT_NE(table.find("full-rematerialization  %p     f32[16,16,16]  14336       1792  12544 (8.0x)  2 all-gathers  1 all-to-all"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("{devices=[2,1,4]<=[4,2]T(1,0)} -> {devices=[1,8,1]<=[8]}"), std::string::npos) << table;
}

TEST(Audit, EmptyInputIsAnEmptyReport) {
  const AuditReport r = AuditOk({{"-", ""}, {"notes.txt", "nothing to see\n"}});
  EXPECT_TRUE(r.findings.empty());
  EXPECT_TRUE(r.modules.empty());
  EXPECT_EQ(AuditJson(r)["totals"]["findings"], 0);
}

}  // namespace
}  // namespace reshard
