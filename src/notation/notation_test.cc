#include "reshard/notation.h"

#include <gtest/gtest.h>

#include "reshard/hlo_text.h"
#include "reshard/named_text.h"

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

// Every printed form reads back to the layout it prints (item 7): edge cases
// of each notation, through PrintLayout and ParseLayout over the same mesh.
TEST(Notation, EveryPrintedFormReadsBack) {
  struct Case {
    const char* mesh;
    const char* text;
    std::vector<int64_t> shape;
  } cases[] = {
      {"<[]>", "[{}]", {4}},
      {"<[]>", "[]", {}},
      {"x=1", "P('x')", {4}},
      {"x=2", "P()", {}},
      {"x=4,one=1,y=2", "P('one', 'y', 'x')", {16, 16, 16}},
      {"x=4,y=2", "P(('x', 'y'))", {10}},
      {"x=4", "[{\"x\":(2)2}, {\"x\":(1)2}]", {8, 8}},
      {"<[\"x\"=2, \"y\"=2], device_ids=[3,1,0,2]>", "P('y', 'x')", {4, 6}},
      {"a=2,b=3", "[Shard(0), Shard(0)]", {10}},
      {"dp=2,tp=4", "[_StridedShard(0, split_factor=4), Shard(0)]", {16, 3}},
      {"dp=2,tp=2", "[_StridedShard(dim=1, sf=2), Shard(1)]", {3, 9}},
      {"x=4,y=2", "P(('y', 'x'))", {16}},
      {"x=4", "{maximal device=2}", {4}},
      // Partial sums: DTensor Partial, JAX and Shardy unreduced axes.
      {"x=4,y=2", "P('y', None, unreduced={'x'})", {16, 16, 16}},
      {"x=4,y=2", "[Partial(), Shard(0)]", {10, 3}},
      {"x=4,y=2", "[Partial(\"max\"), Partial(\"max\")]", {5}},
      {"x=2,y=2,z=2", "[Replicate(), Partial(), Shard(-1)]", {3, 3}},
      {"<[\"x\"=2, \"y\"=2], device_ids=[3,1,0,2]>", "P('y', unreduced={'x'})", {4, 6}},
  };
  for (const Case& c : cases) {
    const Mesh mesh = ParseMesh(c.mesh).value();
    const Layout l = Parse(c.text, c.shape, mesh);
    for (Notation n : {Notation::kHlo, Notation::kHloV3, Notation::kJax, Notation::kShardy, Notation::kDTensor}) {
      Result<std::string> text = PrintLayout(l, n, mesh);
      if (!text.ok()) continue;  // not expressible in n
      Result<ParsedLayout> back = ParseLayout(*text, c.shape, DType::kF32, mesh);
      ASSERT_TRUE(back.ok()) << c.text << " as " << NotationName(n) << ": " << *text << ": " << back.status();
      EXPECT_TRUE(back->layout == l) << c.text << " as " << NotationName(n) << ": " << *text;
      EXPECT_EQ(back->notation, n) << *text;
    }
  }
  EXPECT_EQ(PrintLayout(Parse("[{}]", {4}, ParseMesh("<[]>").value()), Notation::kDTensor, ParseMesh("<[]>").value()).value(), "()");
  // A dim split against mesh order is a _StridedShard in DTensor's terms.
  const Mesh xy = ParseMesh("x=4,y=2").value();
  EXPECT_EQ(PrintLayout(Parse("P(('y', 'x'))", {16}, xy), Notation::kDTensor, xy).value(),
            "[_StridedShard(0, split_factor=2), Shard(0)]");
  EXPECT_FALSE(ParseLayout("[_StridedShard(0, split_factor=0), Shard(0)]", {16}, DType::kF32, xy).ok());
  EXPECT_FALSE(ParseLayout("[_StridedShard(0), Shard(0)]", {16}, DType::kF32, xy).ok());
}

// A pending reduction prints in every notation that states one (DTensor;
// JAX, Shardy and V3 for sums), and nowhere else.
TEST(Notation, PartialSumsConvertBetweenNotations) {
  const Mesh xy = ParseMesh("x=4,y=2").value();
  const Layout sum = Parse("[Partial(), Shard(0)]", {16, 16}, xy);
  ASSERT_TRUE(sum.partial());
  EXPECT_EQ(sum.reduction().parts, 4);
  EXPECT_EQ(PrintLayout(sum, Notation::kJax, xy).value(), "P('y', None, unreduced={'x'})");
  EXPECT_EQ(PrintLayout(sum, Notation::kShardy, xy).value(), "#sdy.sharding<@mesh, [{\"y\"}, {}], unreduced={\"x\"}>");
  EXPECT_EQ(PrintLayout(sum, Notation::kHlo, xy).status().code(), Status::Code::kNotSupported);
  EXPECT_EQ(PrintLayout(Parse("P(unreduced={'x'})", {16, 16}, xy), Notation::kDTensor, xy).value(),
            "[Partial(), Replicate()]");
  // Other ops have no JAX form; the same grid without its reduction differs.
  const Layout avg = Parse("[Partial(\"avg\"), Shard(0)]", {16, 16}, xy);
  EXPECT_FALSE(PrintLayout(avg, Notation::kJax, xy).ok());
  EXPECT_EQ(PrintLayout(avg, Notation::kDTensor, xy).value(), "[Partial(\"avg\"), Shard(0)]");
  EXPECT_FALSE(avg == sum);
  EXPECT_FALSE(sum == sum.WithoutReduction());
  EXPECT_TRUE(Parse("[Partial(reduce_op='sum'), Shard(0)]", {16, 16}, xy) == sum);
  EXPECT_TRUE(Parse("(Partial(sum), Shard(dim=0))", {16, 16}, xy) == sum);
  // A size-1 partial mesh dim is no reduction.
  const Mesh one = ParseMesh("x=1,y=2").value();
  EXPECT_FALSE(Parse("[Partial(), Shard(0)]", {4}, one).partial());
  // Bad ops are bad input; ops DTensor has but reshard does not are refused as such.
  EXPECT_EQ(ParseLayout("[Partial(\"mean\"), Shard(0)]", {4}, DType::kF32, xy).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseLayout("[Partial(\"product\"), Shard(0)]", {4}, DType::kF32, xy).status().code(), Status::Code::kNotSupported);
  EXPECT_EQ(ParseLayout("[Partial(\"sum\"), Partial(\"max\")]", {4}, DType::kF32, xy).status().code(),
            Status::Code::kNotSupported);
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
