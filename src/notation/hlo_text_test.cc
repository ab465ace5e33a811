#include <gtest/gtest.h>

#include "reshard/hlo_text.h"

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
