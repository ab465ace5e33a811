#include "reshard/hlo_text.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

namespace reshard {
namespace {

// Texts in XLA's canonical form (from XLA's hlo_sharding tests and JAX output):
// parse then print is the identity.
TEST(HloText, RoundTripsCanonicalText) {
  const char* cases[] = {
      "{replicated}",
      "{maximal device=3}",
      "{devices=[2,2]0,2,1,3}",
      "{devices=[2,1,4]<=[4,2]T(1,0)}",
      "{devices=[1,8,1]<=[8]}",
      "{devices=[4,1,1,2]<=[8] last_tile_dim_replicate}",
      "{devices=[2,1,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}",
      "{devices=[2,2,2]0,1,4,5,2,3,6,7 last_tile_dim_replicate}",
      "{devices=[8,8]<=[8,8]T(1,0)}",
      "{devices=[4,4]<=[2,2,2,2]T(3,2,1,0)}",
      "{devices=[2,1,4]3,7,2,5,1,4,0,6}",
  };
  for (const char* text : cases) {
    Result<HloSharding> s = ParseHloSharding(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status();
    EXPECT_EQ(s->ToString(), text);
  }
}

TEST(HloText, AcceptsVariantsAndPrintsCanonically) {
  struct Case {
    const char* in;
    const char* out;
  } cases[] = {
      {"{devices=[2,2]<=[2,2,1]T(0,1,2)}", "{devices=[2,2]<=[4]}"},
      {"{devices=[2,2,2]<=[8] last_tile_dims={replicated}}", "{devices=[2,2,2]<=[8] last_tile_dim_replicate}"},
      {"{devices=[2,2,2]<=[8] last_tile_dims={replicated, replicated}}", "{devices=[2,4]<=[8] last_tile_dim_replicate}"},
      {"{devices=[4]0,1,2,3 metadata={op_name=\"a\" source_file=\"b.py\"}}", "{devices=[4]0,1,2,3}"},
      {"  { replicated }  ", "{replicated}"},
  };
  for (const Case& c : cases) {
    Result<HloSharding> s = ParseHloSharding(c.in);
    ASSERT_TRUE(s.ok()) << c.in << ": " << s.status();
    EXPECT_EQ(s->ToString(), c.out);
  }
}

// Each bad input fails with a message naming the column and what went wrong.
TEST(HloText, RejectsBadInputWithPosition) {
  struct Case {
    const char* text;
    const char* message;  // a substring of the error
  } cases[] = {
      {"", "empty"},
      {"{devices=[2,2]0,1,2}", "need 4 devices but 3 are listed"},
      {"{devices=[2,2]0,1,2,2}", "repeated"},
      {"{devices=[2,2]<=[8]}", "hold 4 devices but the iota [8] has 8"},
      {"{devices=[2,2<=[4]}", "col 14: expected ']'"},
      {"{devices=[4]<=[2,2]T(0,0)}", "not a permutation"},
      {"{devices=[99999999999999999999]0}", "overflows int64"},
      {"{replicated", "col 12: expected '}'"},
      {"{replicated}}", "unexpected text after the end"},
      {"{bogus}", "col 2: expected 'replicated'"},
      {"{manual}", "not supported yet"},
      {"{unreduced}", "not supported yet"},
      {"{devices=[2,2]<=[4] last_tile_dims={manual}}", "not supported yet"},
      {"{{replicated}, {maximal device=0}}", "tuple shardings are not supported"},
      {"{devices=[4611686018427387904,4]<=[4]}", "more than 16777216 devices"},
  };
  for (const Case& c : cases) {
    Result<HloSharding> s = ParseHloSharding(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.status().message().find(c.message), std::string::npos) << c.text << " -> " << s.status().message();
  }
  EXPECT_EQ(ParseHloSharding("{manual}").status().code(), Status::Code::kNotSupported);
}

// What jaxlib 0.10.2 prints for each text (HloSharding.from_string, then str):
// replica groups ascending, size-1 replication dims dropped, subgroups
// merged, iotas kept (issue "Hardening", item 5; also checked live on random
// texts in tests/jax/test_named_shardings_live.py).
TEST(HloText, PrintsWhatXlaPrints) {
  struct Case {
    const char* in;
    const char* xla;
  } cases[] = {
      {"{devices=[2,3]<=[2,3]T(1,0)}", "{devices=[2,3]<=[2,3]T(1,0)}"},
      {"{devices=[2,2]0,1,2,3}", "{devices=[2,2]0,1,2,3}"},
      {"{devices=[2,1,4]<=[1,4,2]T(0,2,1)}", "{devices=[2,1,4]<=[4,2]T(1,0)}"},
      {"{devices=[2,2]<=[2,2]T(0,1)}", "{devices=[2,2]<=[4]}"},
      {"{devices=[4]<=[2,2]T(0,1)}", "{devices=[4]<=[4]}"},
      {"{devices=[2,4]<=[2,2,2]T(1,2,0)}", "{devices=[2,4]<=[2,4]T(1,0)}"},
      {"{devices=[2,4]<=[2,2,2]T(1,2,0) last_tile_dim_replicate}", "{devices=[2,4]<=[2,2,2]T(1,0,2) last_tile_dim_replicate}"},
      {"{devices=[2,2]<=[2,2]T(1,0) last_tile_dims={replicated}}", "{devices=[2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
      {"{devices=[2,2,1]<=[4] last_tile_dim_replicate}", "{devices=[2,2]<=[4]}"},
      {"{devices=[2,2,1]0,2,1,3 last_tile_dim_replicate}", "{devices=[2,2]0,2,1,3}"},
      {"{devices=[2,1,2]3,2,1,0 last_tile_dim_replicate}", "{devices=[2,1,2]2,3,0,1 last_tile_dim_replicate}"},
      {"{devices=[2,2]3,1,2,0 last_tile_dim_replicate}", "{devices=[2,2]1,3,0,2 last_tile_dim_replicate}"},
      {"{devices=[1,2,2]1,0,3,2 last_tile_dim_replicate}", "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}"},
      {"{devices=[2,2]0,1,2,3 last_tile_dim_replicate}", "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"},
      {"{devices=[2,2,1,1]<=[4] last_tile_dims={replicated,replicated}}", "{devices=[2,2]<=[4]}"},
      {"{devices=[2,1,1]<=[2] last_tile_dims={replicated}}", "{devices=[2,1]<=[2]}"},
      {"{devices=[2,1,2,1]<=[4] last_tile_dims={replicated,replicated}}", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
      {"{devices=[2,2,2]<=[8] last_tile_dims={replicated, replicated}}", "{devices=[2,4]<=[8] last_tile_dim_replicate}"},
      {"{devices=[1,1]<=[1]}", "{devices=[1,1]<=[1]}"},
  };
  for (const Case& c : cases) {
    Result<HloSharding> s = ParseHloSharding(c.in);
    ASSERT_TRUE(s.ok()) << c.in << ": " << s.status();
    EXPECT_EQ(XlaText(*s), c.xla) << c.in;
    EXPECT_EQ(ParseHloSharding(c.xla)->ToString(), c.xla);  // XLA's text is canonical here too
  }
  // The parser keeps the text's device order; only XlaText sorts the groups.
  EXPECT_EQ(ParseHloSharding("{devices=[2,2]3,1,2,0 last_tile_dim_replicate}")->ToString(),
            "{devices=[2,2]3,1,2,0 last_tile_dim_replicate}");
  EXPECT_EQ(XlaText(ParseHloSharding("{devices=[1,4]<=[4] last_tile_dim_replicate}").value()), "{replicated}");
  EXPECT_EQ(XlaText(ParseHloSharding("{devices=[2]0,1 last_tile_dims={replicated}}").value()), "{replicated}");
  EXPECT_EQ(XlaText(ParseHloSharding("{maximal device=3}").value()), "{maximal device=3}");
}

// XLA reads these as {replicated}; reshard keeps their devices (the text's
// only device set) as a tiled sharding whose data dims are all 1.
TEST(HloText, ReplicationOnlyKeepsItsDevices) {
  const char* cases[] = {
      "{devices=[2]0,1 last_tile_dims={replicated}}",  // rank 0 (item 6)
      "{devices=[2]0,1 last_tile_dim_replicate}",
      "{devices=[1,1,4]<=[4] last_tile_dim_replicate}",
      "{devices=[2,2]<=[4] last_tile_dims={replicated,replicated}}",
      "{devices=[1,1]<=[1] last_tile_dims={replicated}}",
  };
  for (const char* text : cases) {
    Result<HloSharding> s = ParseHloSharding(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status();
    const auto* t = std::get_if<HloSharding::Tiled>(&s->kind());
    ASSERT_NE(t, nullptr) << text;
    EXPECT_TRUE(t->replicate_last) << text;
    for (size_t d = 0; d + 1 < t->tiles.dims().size(); ++d) EXPECT_EQ(t->tiles.dims()[d], 1) << text;
  }
  Layout scalar = ParseHloSharding(cases[0])->ToLayout({}, DType::kF32, std::nullopt).value();
  EXPECT_EQ(scalar.devices(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(scalar.LocalBytes(1), 4);
}

// Forms not supported yet are refused as such only when the whole text
// parses; anything malformed is bad input wherever it fails (item 9).
TEST(HloText, RefusesUnsupportedFormsOnlyWhenTheyParse) {
  const char* unsupported[] = {
      "{manual}", "{unreduced}", "{unknown}", "{manual metadata={op_name=\"a\"}}",
      "{{replicated}, {maximal device=0}}", "{{manual}, {{replicated}}}", "{}",
      "{devices=[2,2]<=[4] last_tile_dims={manual}}", "{devices=[4]<=[4] shard_like 0}",
      "{replicated shard_as 1}",
  };
  for (const char* text : unsupported)
    EXPECT_EQ(ParseHloSharding(text).status().code(), Status::Code::kNotSupported) << text;
  const char* malformed[] = {
      "{{", "{manual", "{unknown junk}", "{manual}}", "{{replicated}, {bogus}}", "{{replicated},}",
      "{devices=[2,2]<=[4] last_tile_dims={manual}", "{devices=[4]<=[4] shard_like}",
      "{devices=[2,2]<=[8] last_tile_dims={manual}}", "{devices=[2]<=[2] last_tile_dims={manual, replicated, replicated}}",
      "{devices=[1]<=[]}", "{devices=[2]<=[2]T()}", "{devices=[]<=[1]}",
  };
  for (const char* text : malformed)
    EXPECT_EQ(ParseHloSharding(text).status().code(), Status::Code::kInvalidArgument) << text;
  // Nesting is bounded: a hostile text cannot exhaust the stack.
  EXPECT_EQ(ParseHloSharding(std::string(100000, '{')).status().code(), Status::Code::kInvalidArgument);
}

TEST(HloSharding, LayoutChecksAgainstTheMesh) {
  Mesh m = Mesh::Create({{"x", 4}}).value();
  HloSharding s = ParseHloSharding("{devices=[2,2]0,1,2,3}").value();
  EXPECT_FALSE(s.ToLayout({4}, DType::kF32, m).ok());   // rank 2 tiles, rank 1 shape
  EXPECT_FALSE(ParseHloSharding("{devices=[8]<=[8]}")->ToLayout({8}, DType::kF32, m).ok());  // 8 tiles, 4 devices
  EXPECT_FALSE(ParseHloSharding("{devices=[4]0,1,2,9}")->ToLayout({8}, DType::kF32, m).ok()); // 9 not in mesh
  EXPECT_FALSE(ParseHloSharding("{replicated}")->ToLayout({8}, DType::kF32, std::nullopt).ok());  // no device set
  EXPECT_FALSE(ParseHloSharding("{maximal device=7}")->ToLayout({8}, DType::kF32, m).ok());
  EXPECT_TRUE(ParseHloSharding("{maximal device=7}")->ToLayout({8}, DType::kF32, std::nullopt).ok());
}

}  // namespace
}  // namespace reshard
