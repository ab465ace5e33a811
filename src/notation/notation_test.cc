#include "reshard/notation.h"

#include <gtest/gtest.h>

#include "reshard/hlo_text.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, std::vector<int64_t> shape, const std::optional<Mesh>& mesh) {
  Result<ParsedLayout> p = ParseLayout(text, shape, DType::kF32, mesh);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p->layout;
}

TEST(Notation, DetectsEachNotationFromItsText) {
  struct Case {
    const char* text;
    Notation notation;
  } cases[] = {
      {"{devices=[2]<=[2]}", Notation::kHlo},         {" {replicated}", Notation::kHlo},
      {"{mesh[x=2], [{x}]}", Notation::kHloV3},       {"P('x')", Notation::kJax},
      {"PartitionSpec()", Notation::kJax},            {"#sdy.sharding<@mesh, [{}]>", Notation::kShardy},
      {"[{\"x\"}]", Notation::kShardy},              {"[]", Notation::kShardy},
      {"<@mesh, [{}]>", Notation::kShardy},           {"[Shard(0), Replicate()]", Notation::kDTensor},
      {"(Shard(0),)", Notation::kDTensor},            {"blockcyclic(block=[2], grid=[2])", Notation::kBlockCyclic},
  };
  for (const Case& c : cases) EXPECT_EQ(DetectNotation(c.text).value(), c.notation) << c.text;
  EXPECT_FALSE(DetectNotation("").ok());
  EXPECT_FALSE(DetectNotation("sharding please").ok());
}

// Printing never states a different layout (found in review).
TEST(Notation, ReplicatedNeedsTheMeshsOwnDevices) {
  Mesh four = Mesh::Create({{"x", 4}}).value();
  Layout two = Parse("#sdy.sharding<mesh<[\"x\"=2]>, [{}]>", {8}, std::nullopt);
  Result<std::string> text = PrintLayout(two, Notation::kHlo, four);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(*text, "{replicated}");
  EXPECT_TRUE(Parse(*text, {8}, std::nullopt) == two);
  Mesh one = Mesh::Create({{"x", 1}}).value();
  EXPECT_EQ(PrintLayout(Parse("P('x')", {4}, one), Notation::kHlo, one).value(), "{replicated}");  // as JAX
  EXPECT_EQ(PrintLayout(Parse("P('x')", {4}, one), Notation::kHlo, std::nullopt).value(), "{maximal device=0}");
}

TEST(Notation, IncompatibleSubAxesAreRefused) {
  Result<ParsedLayout> p =
      ParseLayout("#sdy.sharding<mesh<[\"x\"=12]>, [{\"x\":(1)2}, {\"x\":(3)4}]>", {4, 8}, DType::kF32, std::nullopt);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("do not split it into factors"), std::string::npos) << p.status();
}

TEST(Notation, SuggestedMeshesStateHloAsNamedShardings) {
  HloSharding s = ParseHloSharding("{devices=[4,1,1,2]<=[8] last_tile_dim_replicate}").value();
  std::vector<Mesh> meshes = SuggestMeshes(s);
  ASSERT_EQ(meshes.size(), 2u);
  Layout l = s.ToLayout({16, 16, 16}, DType::kF32, std::nullopt).value();
  EXPECT_FALSE(PrintLayout(l, Notation::kJax, meshes[0]).ok());  // a=8 cannot split 4 ways
  EXPECT_EQ(PrintLayout(l, Notation::kJax, meshes[1]).value(), "P('a', None, None)");
}

}  // namespace
}  // namespace reshard
