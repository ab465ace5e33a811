// Cross-check against real JAX: tests/data/jax_hlo_corpus.tsv holds what JAX
// 0.10.2 printed for 325 (mesh, PartitionSpec) pairs (gen_jax_corpus.py).
// For every row: the spec, JAX's HLO text and JAX's Shardy text give the same
// device-to-box map here, and reshard prints the spec as JAX does.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "reshard/named_text.h"
#include "reshard/notation.h"

namespace reshard {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

TEST(JaxCorpus, SpecsPrintAndMapAsJaxDoes) {
  std::ifstream in(std::string(RESHARD_TEST_DATA_DIR) + "/jax_hlo_corpus.tsv");
  ASSERT_TRUE(in) << "missing corpus";
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = Split(line, '\t');
    ASSERT_GE(f.size(), 8u) << line;
    const std::string &mesh_text = f[0], &ids_text = f[1], &pspec = f[3], &hlo = f[4], &hlo_ids = f[6], &sdy_ids = f[7];
    SCOPED_TRACE(line);
    std::vector<int64_t> ids;
    for (const std::string& s : Split(ids_text, ',')) ids.push_back(std::stoll(s));
    Mesh axes_only = ParseMesh(mesh_text).value();
    Mesh mesh = Mesh::Create(axes_only.axes(), ids).value();
    // A shape whose dims are uneven against most splits.
    std::vector<int64_t> shape(std::stoi(f[2]));
    for (size_t d = 0; d < shape.size(); ++d) shape[d] = 5 + 3 * static_cast<int64_t>(d);

    Result<ParsedLayout> from_spec = ParseLayout(pspec, shape, DType::kF32, mesh);
    ASSERT_TRUE(from_spec.ok()) << from_spec.status();
    // JAX's HLO with real device ids, read without any mesh (replicated needs the device set).
    Result<ParsedLayout> from_hlo = ParseLayout(hlo_ids, shape, DType::kF32, mesh);
    ASSERT_TRUE(from_hlo.ok()) << from_hlo.status();
    EXPECT_TRUE(from_spec->layout == from_hlo->layout) << "HLO " << hlo_ids;
    Result<ParsedLayout> from_sdy = ParseLayout(sdy_ids, shape, DType::kF32, std::nullopt);
    ASSERT_TRUE(from_sdy.ok()) << from_sdy.status();
    EXPECT_TRUE(from_spec->layout == from_sdy->layout) << "Shardy " << sdy_ids;

    // Printing the spec as HLO gives JAX's text: iota form over positions for
    // iota meshes, explicit ids with sorted replica groups otherwise.
    NamedText spec = ParseJaxSpec(pspec).value();
    spec.dims.resize(shape.size());  // omitted trailing dims are replicated, as in JAX
    NamedSharding named = BindNamedText(spec, mesh, pspec).value();
    EXPECT_EQ(named.ToHlo()->ToString(), mesh.is_iota() ? hlo : (hlo == "{replicated}" ? hlo : hlo_ids));
    // And as Shardy, with the mesh inline, gives JAX's Shardy text.
    EXPECT_EQ(PrintNamedText(NamedTextOf(named, NamedText::Syntax::kShardy, /*inline_mesh=*/true)), sdy_ids);
    // Iota meshes: the position-based HLO text is the same layout too.
    if (mesh.is_iota()) {
      Result<ParsedLayout> from_pos = ParseLayout(hlo, shape, DType::kF32, mesh);
      ASSERT_TRUE(from_pos.ok());
      EXPECT_TRUE(from_pos->layout == from_spec->layout);
    }
    ++rows;
  }
  EXPECT_GE(rows, 300);
}

TEST(JaxCorpus, CanonicalCase) {
  Mesh mesh = ParseMesh("x=4,y=2").value();
  Layout src = ParseLayout("P('y', None, 'x')", {16, 16, 16}, DType::kF32, mesh)->layout;
  EXPECT_EQ(PrintLayout(src, Notation::kHlo, mesh).value(), "{devices=[2,1,4]<=[4,2]T(1,0)}");
  Layout dst = ParseLayout("P(None, ('x','y'), None)", {16, 16, 16}, DType::kF32, mesh)->layout;
  EXPECT_EQ(PrintLayout(dst, Notation::kHlo, mesh).value(), "{devices=[1,8,1]<=[8]}");
  EXPECT_EQ(PrintLayout(dst, Notation::kJax, mesh).value(), "P(None, ('x', 'y'), None)");
  EXPECT_EQ(PrintLayout(src, Notation::kShardy, mesh).value(), "#sdy.sharding<@mesh, [{\"y\"}, {}, {\"x\"}]>");
  EXPECT_EQ(PrintLayout(src, Notation::kDTensor, mesh).value(), "[Shard(2), Shard(0)]");
  EXPECT_EQ(PrintLayout(src, Notation::kHloV3, mesh).value(), "{mesh[x=4,y=2], [{y}, {}, {x}]}");
}

}  // namespace
}  // namespace reshard
