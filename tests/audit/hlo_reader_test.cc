// The readers of the auditor: HLO module text, replica groups, XLA log lines.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "audit/hlo_module.h"
#include "audit/replica_groups.h"
#include "audit/xla_log.h"

namespace reshard::audit {
namespace {

std::vector<std::string_view> Lines(const std::string& text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(std::string_view(text).substr(start, end - start));
    if (end == text.size()) break;
    start = end + 1;
  }
  return out;
}

Result<HloModule> Parse(const std::string& text, size_t* next = nullptr) {
  static std::string keep;
  keep = text;
  size_t n = 0;
  Result<HloModule> m = ParseHloModule(Lines(keep), 0, &n);
  if (next) *next = n;
  return m;
}

// jax 0.10.2's text: sections, percent names, comments, a tuple all-to-all,
// the mesh form of replica groups, a constant table.
const char* kModule = R"(HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[2,16]{1,0})->f32[16,2]{1,0}}, num_partitions=8

FileNames
1 "/tmp/x.py"

StackFrames
1 {file_location_id=1 parent_frame_id=1}


%fused (param_0.4: f32[2,1,2], param_1: f32[2,1,2]) -> f32[2,2,2] {
  %param_0.4 = f32[2,1,2]{2,1,0} parameter(0)
  %param_1 = f32[2,1,2]{2,1,0} parameter(1)
  ROOT %c = f32[2,2,2]{2,1,0} concatenate(%param_0.4, /*index=1*/%param_1), dimensions={1}
}

ENTRY %main.0_spmd (param: f32[2,16]) -> (f32[2,1,2], f32[2,1,2]) {
  %param = f32[2,16]{1,0} parameter(0), sharding={devices=[8,1]<=[8]}, metadata={op_name="v" source_file="a(b).py"}
  %t = s32[8]{0} constant({0, 8, 0, 8,
      0, 8, 0, 8})
  %a = f32[2,1,2]{2,1,0} slice(f32[2,16]{1,0} %param), slice={[0:2], [0:1], [0:2]}
  %b = f32[2,1,2]{2,1,0} slice(param), slice={[0:2], [1:2], [0:2]}
  ROOT %all-to-all.1 = (f32[2,1,2]{2,1,0}, f32[2,1,2]{2,1,0}) all-to-all(%a, %b), channel_id=1, replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([2,2,2]T(0,2,1)) {'axis_1':(2)2}
}
)";

TEST(HloModule, ReadsJaxText) {
  Result<HloModule> m = Parse(kModule);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "jit_f");
  EXPECT_EQ(m->num_partitions, 8);
  ASSERT_EQ(m->computations.size(), 2u);
  ASSERT_EQ(m->entry, 1);
  const HloComputation& e = m->computations[1];
  EXPECT_EQ(e.name, "main.0_spmd");
  ASSERT_EQ(e.instructions.size(), 5u);
  const HloInstruction& param = e.instructions[0];
  EXPECT_EQ(param.opcode, "parameter");
  EXPECT_EQ(param.literal, "0");
  ASSERT_NE(param.Attr("sharding"), nullptr);
  EXPECT_EQ(*param.Attr("sharding"), "{devices=[8,1]<=[8]}");
  EXPECT_EQ(param.shape.ToString(), "f32[2,16]");
  EXPECT_EQ(e.instructions[1].literal, "{0, 8, 0, 8,       0, 8, 0, 8}");  // joined over two lines
  // Operands typed, percent-named and bare all resolve.
  EXPECT_EQ(e.instructions[2].operands, std::vector<int>{0});
  EXPECT_EQ(e.instructions[3].operands, std::vector<int>{0});
  const HloInstruction& a2a = e.instructions[4];
  EXPECT_TRUE(a2a.is_root);
  EXPECT_TRUE(a2a.shape.is_tuple);
  EXPECT_EQ(a2a.operands, (std::vector<int>{2, 3}));
  ASSERT_NE(a2a.Attr("device_ids"), nullptr);
  EXPECT_EQ(*a2a.Attr("device_ids"), "([2,2,2]T(0,2,1)) {'axis_1':(2)2}");
  EXPECT_EQ(m->computations[0].instructions[2].operands, (std::vector<int>{0, 1}));
  EXPECT_TRUE(m->issues.empty());
}

TEST(HloModule, EndsAtTheFirstLineThatIsNotHlo) {
  size_t next = 0;
  Result<HloModule> m = Parse("HloModule m, num_partitions=2\n\nENTRY %e (p: f32[2]) -> f32[2] {\n  ROOT %p = f32[2]{0} parameter(0)\n}\n"
                              "W1130 some log line\n",
                              &next);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(next, 5u);
}

TEST(HloModule, ShapesAndLayouts) {
  size_t used = 0;
  Result<HloShape> s = ParseHloShape("f32[8,16,4]{1,0,2:T(8,128)} rest", &used);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->minor_to_major, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(s->MajorToMinor(), (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(ShapeBytes(*s), 8 * 16 * 4 * 4);
  s = ParseHloShape("(f32[2]{0}, (s32[], bf16[<=4]))", &used);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->ToString(), "(f32[2], (s32[], bf16[4]))");
  EXPECT_EQ(ShapeBytes(*s), 8 + 4 + 8);
  EXPECT_EQ(ElementBits("f8e4m3fn"), 8);
  EXPECT_EQ(ElementBits("s4"), 4);
  EXPECT_EQ(ElementBits("q99"), -1);
  EXPECT_FALSE(ParseHloShape("F32[2]", &used).ok());
  EXPECT_FALSE(ParseHloShape("f32[2", &used).ok());
}

TEST(HloModule, UnknownLinesAreIssuesNotErrors) {
  Result<HloModule> m = Parse(
      "HloModule m, num_partitions=2\nENTRY %e (p: f32[2]) -> f32[2] {\n  %p = f32[2]{0} parameter(0)\n  something odd (\n"
      "  %q = F32[2] weird(%p)\n  ROOT %r = f32[2]{0} negate(%q)\n}\n");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->issues.size(), 2u);
  EXPECT_EQ(m->issues[0].line, 4);
  EXPECT_EQ(m->issues[0].reason, "not an HLO instruction");
  EXPECT_EQ(m->issues[1].line, 5);
  // The unknown instruction keeps its name, so its user still resolves.
  EXPECT_EQ(m->computations[0].instructions[2].operands, std::vector<int>{1});
  EXPECT_EQ(m->computations[0].instructions[1].opcode, "");
}

TEST(HloModule, BrokenStructureIsAnError) {
  struct Case { const char* text; const char* error; };
  const Case cases[] = {
      {"HloModule m\nENTRY %e () -> f32[] {\n  ROOT %r = f32[] negate(%nowhere)\n}\n", "line 3, col 1: operand 'nowhere'"},
      {"HloModule m\nENTRY %e () -> f32[] {\n  ROOT %r = f32[] constant(0)\n", "is not closed"},
      {"HloModule m\nENTRY %e () -> f32[] {\n  ROOT %r = f32[] negate(%r))\n}\n", "unbalanced brackets"},
      {"HloModule m\nENTRY %e () -> f32[] {\n  %r = f32[] constant(0)\n  %r = f32[] constant(1)\n}\n", "defined twice"},
      {"HloModule m\nENTRY %e () -> f32[] {\n  %r = f32[] constant(0)\nHloModule n\n", "is not closed"},
      {"HloModule m\nENTRY %a () -> f32[] {\n}\nENTRY %b () -> f32[] {\n}\n", "a second ENTRY"},
      // Cut short before its ENTRY, or a header alone: auditing the rest would report nothing.
      {"HloModule m\n%c () -> f32[] {\n  ROOT %r = f32[] constant(0)\n}\n\n%wrapp", "line 6, col 1: HloModule m (line 1) ends here without an ENTRY"},
      {"HloModule x\n", "line 1, col 1: HloModule x (line 1) ends here without an ENTRY"},
  };
  for (const Case& c : cases) {
    Result<HloModule> m = Parse(c.text);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_NE(m.status().message().find(c.error), std::string::npos) << m.status().message();
  }
}

TEST(ReplicaGroups, EveryForm) {
  struct Case { const char* groups; const char* device_ids; int64_t devices; DeviceGroups want; };
  const Case cases[] = {
      {"{{0,1},{2,3}}", "", 4, {{0, 1}, {2, 3}}},
      {"{}", "", 4, {{0, 1, 2, 3}}},
      {"[2,4]<=[8]", "", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {"[2,4]<=[4,2]T(1,0)", "", 8, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
      {"[4,2]<=[2,2,2]T(2,1,0)", "", 8, {{0, 4}, {2, 6}, {1, 5}, {3, 7}}},
      // Canonical case, gather over x: the mesh 'axis_0'=2 (y), 'axis_2'=4 (x), devices 2x+y.
      {"mesh['axis_0'=2,'axis_1'=1,'axis_2'=4]", "([4,2]T(1,0)) {'axis_2'}", 8, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
      {"mesh['axis_0'=1,'axis_1'=8] {'axis_1'}", "", 8, {{0, 1, 2, 3, 4, 5, 6, 7}}},
      // Sub-axis: the minor half of axis_1.
      {"mesh['axis_0'=2,'axis_1'=4]", "([2,2,2]T(0,2,1)) {'axis_1':(2)2}", 8, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {"mesh['a'=2,'b'=2] {'b','a'}", "", 4, {{0, 2, 1, 3}}},
  };
  for (const Case& c : cases) {
    Result<DeviceGroups> g = ParseReplicaGroups(c.groups, c.device_ids, c.devices);
    ASSERT_TRUE(g.ok()) << c.groups << ": " << g.status();
    EXPECT_EQ(*g, c.want) << c.groups;
  }
  EXPECT_EQ(ParseReplicaGroups("weird", "", 8).status().code(), Status::Code::kNotSupported);
  EXPECT_EQ(ParseReplicaGroups("mesh['a'=2] {'z'}", "", 2).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseReplicaGroups("[2,4]<=[4]", "", 8).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseReplicaGroups("mesh['a'=4] {'a':(3)2}", "", 4).status().code(), Status::Code::kInvalidArgument);
  Result<std::vector<std::pair<int64_t, int64_t>>> p = ParseSourceTargetPairs("{{0,1},{1,0}}");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(), 2u);
  EXPECT_FALSE(ParseSourceTargetPairs("{{0,1,2}}").ok());
}

TEST(XlaLog, ReadsTheRematerializationLine) {
  const std::string line =
      "W1130 06:59:12.335303   18087 spmd_partitioner.cc:656] [SPMD] Involuntary full rematerialization. The compiler cannot "
      "go from sharding {devices=[2,1,4]<=[4,2]T(1,0)} to {devices=[1,8,1]<=[8]} efficiently for HLO operation %param = "
      "f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}, metadata={op_name=\"v\"}. As the last resort, "
      "SPMD will replicate the tensor and then partition it to obtain the target sharding, which is inefficient.";
  ASSERT_TRUE(IsRematerializationLine(line));
  Result<LogRematerialization> r = ParseRematerializationLine(line);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->from, "{devices=[2,1,4]<=[4,2]T(1,0)}");
  EXPECT_EQ(r->to, "{devices=[1,8,1]<=[8]}");
  EXPECT_EQ(r->instruction, "param");
  EXPECT_EQ(r->global_shape, (std::vector<int64_t>{16, 16, 16}));
  // Partial replication multiplies only the tiled dims.
  r = ParseRematerializationLine(
      "Involuntary full rematerialization. The compiler cannot go from sharding {devices=[4,1,2]<=[8] last_tile_dim_replicate} "
      "to {replicated} efficiently for HLO operation %x = bf16[4,16]{1,0} copy(%y)");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->global_shape, (std::vector<int64_t>{16, 16}));
  for (const char* bad : {"Involuntary full rematerialization.", "Involuntary full rematerialization. go from sharding {a to {b}",
                          "Involuntary full rematerialization. go from sharding {replicated} to {replicated} for HLO operation x"}) {
    Result<LogRematerialization> b = ParseRematerializationLine(bad);
    EXPECT_FALSE(b.ok()) << bad;
    EXPECT_FALSE(b.status().message().empty());
  }
}

}  // namespace
}  // namespace reshard::audit
