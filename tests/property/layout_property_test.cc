// Property test over thousands of random layouts in every notation: each
// layout covers the array exactly (every element held by exactly its
// replication count of devices), printing then parsing its text is the
// identity, and converting it to any other notation that can state it keeps
// the device-to-box map.
#include <gtest/gtest.h>

#include "reshard/block_cyclic_text.h"
#include "reshard/dtensor_text.h"
#include "reshard/hlo_text.h"
#include "reshard/named_text.h"
#include "reshard/notation.h"
#include "testing/random_layouts.h"
#include "testing/random_named.h"

namespace reshard {
namespace {

std::string Reprint(const std::string& text, Notation n) {
  switch (n) {
    case Notation::kHlo: return ParseHloSharding(text)->ToString();
    case Notation::kHloV3: return PrintNamedText(*ParseHloV3(text));
    case Notation::kJax: return PrintNamedText(*ParseJaxSpec(text));
    case Notation::kShardy: return PrintNamedText(*ParseShardySharding(text));
    case Notation::kDTensor: return PrintPlacements(*ParsePlacements(text));
    case Notation::kBlockCyclic: return PrintBlockCyclic(*ParseBlockCyclic(text));
  }
  return "";
}

// Holder count of every element, by brute force over each device's boxes.
std::vector<int64_t> Coverage(const Layout& l) {
  std::vector<int64_t> count(l.num_elements(), 0);
  std::vector<int64_t> strides(l.rank(), 1);
  for (int64_t d = l.rank() - 2; d >= 0; --d) strides[d] = strides[d + 1] * l.shape()[d + 1];
  for (int64_t dev : l.devices()) {
    for (const Box& b : l.DeviceBoxes(dev)) {
      std::vector<int64_t> idx(l.rank());
      for (int64_t d = 0; d < l.rank(); ++d) idx[d] = b.dims[d].lo;
      if (b.volume() == 0) continue;
      while (true) {
        int64_t flat = 0;
        for (int64_t d = 0; d < l.rank(); ++d) flat += idx[d] * strides[d];
        ++count[flat];
        int64_t d = l.rank() - 1;
        for (; d >= 0; --d) {
          if (++idx[d] < b.dims[d].hi) break;
          idx[d] = b.dims[d].lo;
        }
        if (d < 0) break;
      }
    }
  }
  return count;
}

TEST(LayoutProperty, RandomLayoutsCoverRoundTripAndConvert) {
  std::mt19937_64 rng(20261129);
  int converted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const std::vector<int64_t> shape = testing::RandomShape(rng, 5, 2048);
    const Mesh mesh = testing::RandomMesh(rng, iter % 5 == 0 ? 4 : 0);
    const testing::RandomLayout rl = testing::RandomLayoutText(rng, shape, mesh);
    SCOPED_TRACE("iter " + std::to_string(iter) + ": " + rl.text + " over " + mesh.ToString());
    Result<ParsedLayout> p = ParseLayout(rl.text, shape, DType::kF32, rl.mesh);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->notation, rl.notation);
    const Layout& l = p->layout;

    for (int64_t c : Coverage(l)) ASSERT_EQ(c, rl.replication);
    EXPECT_EQ(Reprint(rl.text, rl.notation), rl.text);

    const bool named_origin = rl.notation == Notation::kJax || rl.notation == Notation::kShardy ||
                              rl.notation == Notation::kHloV3 ||
                              (rl.notation == Notation::kHlo && rl.text.find("devices=") != std::string::npos &&
                               rl.text.find("<=") != std::string::npos);
    for (Notation to : {Notation::kHlo, Notation::kHloV3, Notation::kJax, Notation::kShardy, Notation::kDTensor}) {
      Result<std::string> text = PrintLayout(l, to, mesh);
      if (named_origin && mesh.is_iota() && (to == Notation::kHlo || to == Notation::kShardy || to == Notation::kHloV3)) {
        EXPECT_TRUE(text.ok()) << NotationName(to) << ": " << text.status();
      }
      if (rl.notation == Notation::kDTensor && to == Notation::kDTensor) {
        EXPECT_TRUE(text.ok()) << text.status();
      }
      if (!text.ok()) continue;
      Result<ParsedLayout> back = ParseLayout(*text, shape, DType::kF32, mesh);
      ASSERT_TRUE(back.ok()) << NotationName(to) << " text " << *text << ": " << back.status();
      EXPECT_TRUE(back->layout == l) << NotationName(to) << " text " << *text << " changes the layout";
      ++converted;
    }
  }
  EXPECT_GT(converted, 3000);
}

// Layouts with a pending reduction (DTensor Partial, unreduced axes): each
// element is held in every part by the same number of devices, printing
// then parsing is the identity, and every notation that states the layout
// reads back to it, parts included; HLO tile text never states one.
TEST(LayoutProperty, RandomPartialLayoutsRoundTripWithTheirParts) {
  std::mt19937_64 rng(2026120217);
  int converted = 0, partial = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const std::vector<int64_t> shape = testing::RandomShape(rng, 4, 1024);
    const Mesh mesh = testing::RandomMesh(rng, iter % 5 == 0 ? 4 : 0);
    int64_t parts = 1;
    const testing::RandomLayout rl = testing::RandomPartialLayoutText(rng, shape, mesh, &parts);
    SCOPED_TRACE("iter " + std::to_string(iter) + ": " + rl.text + " over " + mesh.ToString());
    Result<ParsedLayout> p = ParseLayout(rl.text, shape, DType::kF32, rl.mesh);
    ASSERT_TRUE(p.ok()) << p.status();
    const Layout& l = p->layout;
    int64_t elements = 1;
    for (int64_t e : shape) elements *= e;
    EXPECT_EQ(l.reduction().parts, elements > 0 ? parts : 1);  // an empty array has nothing to reduce
    for (int64_t c : Coverage(l)) ASSERT_EQ(c, rl.replication);
    EXPECT_EQ(Reprint(rl.text, rl.notation), rl.text);
    if (l.partial()) {
      ++partial;
      // Every tile with data is held in every part, equally often.
      for (int64_t t = 0; t < l.num_tiles(); ++t) {
        if (l.TileElements(t) == 0) continue;
        std::vector<int64_t> count(parts, 0);
        for (int64_t dev : l.Holders(t)) ++count[l.PartOf(dev)];
        for (int64_t c : count) ASSERT_EQ(c, rl.replication / parts);
      }
      EXPECT_EQ(PrintLayout(l, Notation::kHlo, mesh).status().code(), Status::Code::kNotSupported);
    }
    for (Notation to : {Notation::kHloV3, Notation::kJax, Notation::kShardy, Notation::kDTensor}) {
      Result<std::string> text = PrintLayout(l, to, mesh);
      if (rl.notation == to && to != Notation::kJax && mesh.is_iota()) {
        EXPECT_TRUE(text.ok()) << NotationName(to) << ": " << text.status();
      }
      if (!text.ok()) continue;
      Result<ParsedLayout> back = ParseLayout(*text, shape, DType::kF32, mesh);
      ASSERT_TRUE(back.ok()) << NotationName(to) << " text " << *text << ": " << back.status();
      EXPECT_TRUE(back->layout == l) << NotationName(to) << " text " << *text << " changes the layout";
      ++converted;
    }
  }
  EXPECT_GT(partial, 1000);
  EXPECT_GT(converted, 3000);
}

// NamedSharding::Gives(layout) is ToLayout(...) == layout, decided without
// building the layout where grids and tiles agree: over random named pairs
// (the same sharding, other shardings, other shapes), with and without
// unreduced axes, and on layouts of another notation over the mesh.
TEST(LayoutProperty, GivesIsToLayoutEquality) {
  std::mt19937_64 rng(20261204);
  int equal = 0, differ = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const Mesh mesh = testing::RandomNamedMesh(rng);
    const size_t rank = 1 + rng() % 3;
    std::vector<int64_t> shape;
    for (size_t d = 0; d < rank; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % (rng() % 2 ? 12 : 5)));
    const NamedSharding s = testing::RandomSpec(rng, mesh, rank);
    const NamedSharding t = iter % 3 == 0 ? s : testing::RandomSpec(rng, mesh, rank);
    Result<Layout> layout = t.ToLayout(shape, DType::kF32);
    ASSERT_TRUE(layout.ok()) << layout.status();
    Result<Layout> built = s.ToLayout(shape, DType::kF32);
    ASSERT_TRUE(built.ok()) << built.status();
    Result<bool> gives = s.Gives(*layout);
    ASSERT_TRUE(gives.ok()) << gives.status();
    EXPECT_EQ(*gives, *built == *layout) << "iter " << iter << ": " << *layout;
    (*gives ? equal : differ) += 1;
    // Another notation's layout of the same devices (explicit ids, block-cyclic, DTensor).
    const testing::RandomLayout other = testing::RandomLayoutText(rng, shape, mesh);
    Result<ParsedLayout> parsed = ParseLayout(other.text, shape, DType::kF32, other.mesh);
    if (!parsed.ok()) continue;
    Result<bool> gives_other = s.Gives(parsed->layout);
    if (!gives_other.ok()) continue;
    EXPECT_EQ(*gives_other, *built == parsed->layout) << "iter " << iter << ": " << other.text;
  }
  EXPECT_GT(equal, 500);
  EXPECT_GT(differ, 500);
}

}  // namespace
}  // namespace reshard
