#include "reshard/named_text.h"

#include <gtest/gtest.h>

namespace reshard {
namespace {

TEST(NamedText, RoundTrips) {
  const char* jax[] = {"P('y', None, 'x')", "P(None, ('x', 'y'), None)", "P()", "PartitionSpec('x')",
                       "P(\"x\", None)", "P(('x',), None)",
                       // Found by fuzz_parse_named: a name holding the other quote.
                       "P('y', \"'y'',\")",
                       // Partial sums, and JAX's reduced (read as replicated).
                       "P('y', None, unreduced={'x'})", "P(unreduced={'x', 'y'})", "P('x', reduced={'y'})",
                       "P(None, unreduced={'x'}, reduced={'y'})"};
  for (const char* t : jax) EXPECT_EQ(PrintNamedText(ParseJaxSpec(t).value()), t);
  const char* shardy[] = {
      "#sdy.sharding<@mesh, [{\"y\"}, {}, {\"x\"}]>",
      "[{\"y\"}, {}, {\"x\"}]",
      "<@mesh, [{\"x\"}, {}]>",
      "#sdy.sharding<mesh<[\"x\"=4, \"y\"=2]>, [{\"y\"}, {}, {\"x\"}]>",
      "#sdy.sharding<mesh<[\"x\"=4, \"y\"=2], device_ids=[3, 1, 7, 4, 2, 0, 5, 6]>, [{\"y\"}, {}, {\"x\"}]>",
      "#sdy.sharding<@mesh, [{\"x\":(1)2, ?}, {?}p1], replicated={\"y\"}>",
      "#sdy.sharding<@mesh, []>",
      "#sdy.sharding<@mesh, [{\"y\"}, {}], unreduced={\"x\"}>",
      "[{}, {}], replicated={\"y\"}, unreduced={\"x\"}",
  };
  for (const char* t : shardy) EXPECT_EQ(PrintNamedText(ParseShardySharding(t).value()), t);
  const char* v3[] = {"{mesh[x=4,y=2], [{y}, {}, {x}]}", "{mesh[x=4], [{x:(2)2}, {x:(1)2}]}",
                      "{mesh[x=4,y=2], [{y}, {}], unreduced={x}}"};
  for (const char* t : v3) EXPECT_EQ(PrintNamedText(ParseHloV3(t).value()), t);
}

TEST(NamedText, BindsNamesToTheMesh) {
  Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  NamedText t = ParseJaxSpec("P('y', None, 'x')").value();
  NamedSharding s = BindNamedText(t, m, "P('y', None, 'x')").value();
  ASSERT_EQ(s.dims().size(), 3u);
  EXPECT_EQ(s.dims()[0].axes[0].axis, 1);
  EXPECT_EQ(s.ToHlo()->ToString(), "{devices=[2,1,4]<=[4,2]T(1,0)}");
  EXPECT_EQ(BindNamedText(ParseJaxSpec("P(None, ('x','y'), None)").value(), m, "")->ToHlo()->ToString(),
            "{devices=[1,8,1]<=[8]}");
}

TEST(NamedText, RejectsBadInputWithPosition) {
  Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"P('x', 'z')", "col 8: unknown mesh axis 'z'"},
      {"P('x', 'x')", "col 8: mesh axis 'x' is used twice"},
      {"P(('x', 'y')", "expected ')'"},
      {"P('x)", "unterminated string"},
      {"P(x)", "expected None, an axis name"},
      {"Q('x')", "col 1: expected 'P('"},
      {"#sdy.sharding<@mesh, [{\"x\"}, {\"w\"}]>", "unknown mesh axis 'w'"},
      {"#sdy.sharding<@mesh, [{\"x\":(1)3}]>", "does not divide"},
      {"#sdy.sharding<@mesh, [{\"x\"}], unreduced={\"x\"}>", "used twice"},
      {"P('x', unreduced={'z'})", "unknown mesh axis 'z'"},
      {"[{\"x\"}], unreduced={\"y\", ?}", "axes only"},
      {"[{\"x\"}, {\"y\"}", "expected ']'"},
      {"{mesh[x=4,x=2], [{x}]}", "appears twice"},
      // A keyword given again is refused at the second, never taken in place of the first.
      {"P('x', unreduced={'y'}, unreduced={})", "col 25: 'unreduced' is given twice"},
      {"P('x', reduced={'y'}, reduced={'y'})", "col 23: 'reduced' is given twice"},
      {"P(unreduced={'y'}, reduced={}, unreduced={'y'})", "col 32: 'unreduced' is given twice"},
      {"[{}], unreduced={\"x\"}, unreduced={}", "col 24: 'unreduced' is given twice"},
      {"[{}], replicated={\"x\"}, replicated={\"x\"}", "col 25: 'replicated' is given twice"},
      {"#sdy.sharding<@mesh, [{}], unreduced={}, unreduced={\"x\"}>", "col 42: 'unreduced' is given twice"},
      {"{mesh[x=4,y=2], [{}], unreduced={x}, unreduced={}}", "col 38: 'unreduced' is given twice"},
      {"{mesh[x=4,y=2], [{}], replicated={y}, replicated={y}}", "col 39: 'replicated' is given twice"},
  };
  for (const Case& c : cases) {
    const std::string text = c.text;
    Result<NamedText> t = text[0] == 'P' || text[0] == 'Q' ? ParseJaxSpec(text)
                          : text[0] == '{'                 ? ParseHloV3(text)
                                                           : ParseShardySharding(text);
    Status st = t.ok() ? BindNamedText(*t, m, text).status() : t.status();
    ASSERT_FALSE(st.ok()) << text;
    EXPECT_NE(st.message().find(c.message), std::string::npos) << text << " -> " << st.message();
  }
  EXPECT_FALSE(BindNamedText(ParseJaxSpec("P('x')").value(), std::nullopt, "P('x')").ok());  // no mesh
}

// Forms not supported yet are refused as such only when the whole text
// parses; anything malformed is bad input (item 9).
TEST(NamedText, RefusesUnsupportedFormsOnlyWhenTheyParse) {
  const char* unsupported[] = {
      "P(P.UNCONSTRAINED)", "P('x', P.UNCONSTRAINED, None)", "P('x', P.UNCONSTRAINED, unreduced={'y'})",
      "PartitionSpec(PartitionSpec.UNCONSTRAINED)",
  };
  for (const char* text : unsupported) EXPECT_EQ(ParseJaxSpec(text).status().code(), Status::Code::kNotSupported) << text;
  const char* malformed[] = {
      "P(P.UNCONSTRAINED, )))", "P(P.", "P(P.UNCONSTRAINED", "P(P.FOO)", "P(unreduced={'y'}, 'x')",
      "P(unreduced='y')", "P('x', unreduced={'y')",
  };
  for (const char* text : malformed) EXPECT_EQ(ParseJaxSpec(text).status().code(), Status::Code::kInvalidArgument) << text;
  EXPECT_EQ(ParseShardySharding("[{\"x\"}], unreduced={\"y\"").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseShardySharding("<@mesh, [{}], unreduced={}>>").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseHloV3("{mesh[x=2], [{}], unreduced={x}").status().code(), Status::Code::kInvalidArgument);
}

// Columns count characters; messages are valid UTF-8; long texts are cut to a
// window around the column (items 8 and 10).
TEST(NamedText, ErrorsCountCharactersAndStayShort) {
  Mesh m = ParseMesh("<[\"\xc3\xa9\"=2]>").value();  // axis "é"
  Status st = BindNamedText(ParseJaxSpec("P('\xc3\xa9', 'z')").value(), m, "P('\xc3\xa9', 'z')").status();
  EXPECT_EQ(st.message().rfind("col 8: unknown mesh axis 'z'", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("\n         ^"), std::string::npos) << st.message();  // caret under column 8
  st = ParseJaxSpec("P('x' \xe2\x98\x83)").status();                                  // a snowman
  EXPECT_EQ(st.message().rfind("col 7: expected ')' (found '\xe2\x98\x83')", 0), 0u) << st.message();
  st = ParseJaxSpec("P('x' \xe2)").status();                                            // a lone byte
  EXPECT_EQ(st.message().rfind("col 7: expected ')' (found '\\xe2')", 0), 0u) << st.message();
  EXPECT_EQ(st.message().find('\xe2'), std::string::npos) << "the echo shows U+FFFD, not the byte";
  const std::string long_text = "P(" + std::string(100000, ' ') + "x)";
  st = ParseJaxSpec(long_text).status();
  EXPECT_EQ(st.message().rfind("col 100003: expected None", 0), 0u) << st.message().substr(0, 80);
  EXPECT_LT(st.message().size(), 400u);
  EXPECT_NE(st.message().find("  ..."), std::string::npos);
  st = BindNamedText(ParseShardySharding("[{\"x\":(1)3}, {}" + std::string(100000, ' ') + "]").value(),
                     Mesh::Create({{"x", 4}}).value(), "[{\"x\":(1)3}, {}" + std::string(100000, ' ') + "]")
           .status();
  EXPECT_LT(st.message().size(), 400u) << st.message().substr(0, 200);
}

TEST(Mesh, ParsesEveryForm) {
  EXPECT_EQ(ParseMesh("x=4,y=2")->ToString(), "x=4,y=2");
  std::string name;
  Mesh m = ParseMesh("sdy.mesh @mymesh = <[\"x\"=4, \"y\"=2], device_ids=[7,6,5,4,3,2,1,0]>", &name).value();
  EXPECT_EQ(name, "mymesh");
  EXPECT_EQ(m.device(0), 7);
  EXPECT_EQ(PrintShardyMesh(m), "<[\"x\"=4, \"y\"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>");
  EXPECT_EQ(ParseMesh("<[\"x\"=2]>")->num_devices(), 2);
  EXPECT_EQ(ParseMesh("mesh<[], device_ids=[3]>")->device(0), 3);
  EXPECT_FALSE(ParseMesh("x=4,y").ok());
  EXPECT_FALSE(ParseMesh("x=0").ok());
  EXPECT_FALSE(ParseMesh("<[\"x\"=2], device_ids=[0,0]>").ok());
  EXPECT_FALSE(ParseMesh("x=4294967296,y=4294967296").ok());
  EXPECT_FALSE(ParseMesh("").ok());
}

}  // namespace
}  // namespace reshard
