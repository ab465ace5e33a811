#include "reshard/named_text.h"

#include <gtest/gtest.h>

namespace reshard {
namespace {

TEST(NamedText, RoundTrips) {
  const char* jax[] = {"P('y', None, 'x')", "P(None, ('x', 'y'), None)", "P()", "PartitionSpec('x')",
                       "P(\"x\", None)", "P(('x',), None)",
                       // Found by fuzz_parse_named: a name holding the other quote.
                       "P('y', \"'y'',\")"};
  for (const char* t : jax) EXPECT_EQ(PrintNamedText(ParseJaxSpec(t).value()), t);
  const char* shardy[] = {
      "#sdy.sharding<@mesh, [{\"y\"}, {}, {\"x\"}]>",
      "[{\"y\"}, {}, {\"x\"}]",
      "<@mesh, [{\"x\"}, {}]>",
      "#sdy.sharding<mesh<[\"x\"=4, \"y\"=2]>, [{\"y\"}, {}, {\"x\"}]>",
      "#sdy.sharding<mesh<[\"x\"=4, \"y\"=2], device_ids=[3, 1, 7, 4, 2, 0, 5, 6]>, [{\"y\"}, {}, {\"x\"}]>",
      "#sdy.sharding<@mesh, [{\"x\":(1)2, ?}, {?}p1], replicated={\"y\"}>",
      "#sdy.sharding<@mesh, []>",
  };
  for (const char* t : shardy) EXPECT_EQ(PrintNamedText(ParseShardySharding(t).value()), t);
  const char* v3[] = {"{mesh[x=4,y=2], [{y}, {}, {x}]}", "{mesh[x=4], [{x:(2)2}, {x:(1)2}]}"};
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
      {"#sdy.sharding<@mesh, [{\"x\"}], unreduced={\"y\"}>", "not supported"},
      {"[{\"x\"}, {\"y\"}", "expected ']'"},
      {"{mesh[x=4,x=2], [{x}]}", "appears twice"},
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
