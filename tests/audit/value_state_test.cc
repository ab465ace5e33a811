// The layout states the auditor follows values with, and the per-device
// integer evaluation of dynamic-slice offsets.
#include "audit/value_state.h"
#include "audit/interpretation.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "audit/derived_layout.h"
#include "audit/int_eval.h"
#include "reshard/notation.h"

namespace reshard::audit {
namespace {

// f32[16,16,16] as {devices=[2,1,4]<=[4,2]T(1,0)}: device 2x+y holds tile (y, 0, x).
ValueState Canonical() {
  std::vector<std::vector<int64_t>> tiles;
  for (int64_t p = 0; p < 8; ++p) tiles.push_back({p % 2, 0, p / 2});
  return *TiledState({16, 16, 16}, {8, 16, 4}, tiles, 8);
}

Layout Expected(const std::string& text, std::vector<int64_t> shape) {
  Result<ParsedLayout> l = ParseLayout(text, shape, DType::kF32, std::nullopt);
  EXPECT_TRUE(l.ok()) << l.status();
  return l->layout;
}

Layout LayoutOf(const ValueState& s) {
  std::optional<Interpretation> in = Interpret(s);
  EXPECT_TRUE(in.has_value()) << s.ToString();
  Result<Layout> l = ToLayout(*in, DType::kF32);
  EXPECT_TRUE(l.ok()) << l.status();
  return *l;
}

TEST(ValueState, TheCanonicalRematerialization) {
  const ValueState s = Canonical();
  EXPECT_EQ(LayoutOf(s), Expected("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16}));
  // all-gather dim 2 over x, then dim 0 over y: the whole array everywhere.
  std::optional<ValueState> g = AllGather(s, 2, {{0, 2, 4, 6}, {1, 3, 5, 7}});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->ToString(), "[(8@g0*1), (16@g1*1), (16@g2*1)]");
  EXPECT_FALSE(HoldsWholeArray(*g));
  g = AllGather(*g, 0, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  ASSERT_TRUE(g);
  EXPECT_TRUE(HoldsWholeArray(*g));
  // Its view with dims 0 and 1 merged (XLA's [256,16] operand of a dot) is that view, replicated.
  std::optional<ValueState> merged = Reshape(*g, {256, 16});
  ASSERT_TRUE(merged);
  EXPECT_EQ(merged->ToString(), "[(16@g0*1 16@g1*1), (16@g2*1)]");
  std::optional<Interpretation> view = Interpret(*merged);
  ASSERT_TRUE(view);
  EXPECT_EQ(view->shape, (std::vector<int64_t>{256, 16}));
  EXPECT_EQ(view->local_shape, (std::vector<int64_t>{256, 16}));
  EXPECT_FALSE(view->identity);
  EXPECT_TRUE(std::all_of(view->offsets.begin(), view->offsets.end(), [](int64_t o) { return o == 0; }));
  // dynamic-slice of dim 1 at 2 * partition-id.
  std::vector<int64_t> starts;
  for (int64_t p = 0; p < 8; ++p) starts.push_back(2 * p);
  std::optional<ValueState> t = SliceDim(*g, 1, starts, 2);
  ASSERT_TRUE(t);
  EXPECT_EQ(LayoutOf(*t), Expected("{devices=[1,8,1]<=[8]}", {16, 16, 16}));
}

// A layer a loop's counter slices out of stacked weights f32[4,32,32] (dims 1
// and 2 sharded over x=2, y=4): every device at the same index of dim 0, so
// the value is that layer, f32[32,32], as the weights' layout has it; devices
// at different indices hold no one array.
TEST(ValueState, InterpretsOneIndexOfADimEveryDeviceHolds) {
  std::vector<std::vector<int64_t>> tiles;
  for (int64_t p = 0; p < 8; ++p) tiles.push_back({0, p / 4, p % 4});
  const ValueState weights = *TiledState({4, 32, 32}, {4, 16, 8}, tiles, 8);
  std::optional<ValueState> layer = SliceDim(weights, 0, std::vector<int64_t>(8, 2), 1);
  ASSERT_TRUE(layer);
  layer = Reshape(*layer, {16, 8});
  ASSERT_TRUE(layer);
  std::optional<Interpretation> in = Interpret(*layer);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->shape, (std::vector<int64_t>{32, 32}));
  EXPECT_FALSE(in->identity);
  EXPECT_EQ(LayoutOf(*layer), Expected("{devices=[2,4]<=[8]}", {32, 32}));
  // The index names the array: layer 3 is another one.
  std::optional<ValueState> other = SliceDim(weights, 0, std::vector<int64_t>(8, 3), 1);
  ASSERT_TRUE(other);
  other = Reshape(*other, {16, 8});
  ASSERT_TRUE(other);
  EXPECT_NE(Interpret(*other)->signature, in->signature);
  std::vector<int64_t> mixed(8, 2);
  mixed[5] = 1;
  std::optional<ValueState> apart = SliceDim(weights, 0, mixed, 1);
  ASSERT_TRUE(apart);
  apart = Reshape(*apart, {16, 8});
  ASSERT_TRUE(apart);
  EXPECT_FALSE(Interpret(*apart).has_value());
}

TEST(ValueState, TupleAllToAllAndConcatenate) {
  // P('x', None) on x=8 -> P(None, 'x'): local [2,16] -> [2,8,2], slice each column block, tuple all-to-all, concatenate.
  std::vector<std::vector<int64_t>> tiles;
  for (int64_t p = 0; p < 8; ++p) tiles.push_back({p, 0});
  const ValueState s = *TiledState({16, 16}, {2, 16}, tiles, 8);
  std::optional<ValueState> r = Reshape(s, {2, 8, 2});
  ASSERT_TRUE(r);
  std::vector<ValueState> parts;
  for (int64_t j = 0; j < 8; ++j) {
    std::optional<ValueState> part = SliceDim(*r, 1, {j}, 1);
    ASSERT_TRUE(part);
    parts.push_back(*part);
  }
  std::vector<const ValueState*> in;
  for (const ValueState& p : parts) in.push_back(&p);
  std::optional<std::vector<ValueState>> out = AllToAllTuple(in, {{0, 1, 2, 3, 4, 5, 6, 7}});
  ASSERT_TRUE(out);
  std::vector<const ValueState*> got;
  for (const ValueState& p : *out) got.push_back(&p);
  std::optional<ValueState> c = Concatenate(got, 1);
  ASSERT_TRUE(c);
  std::optional<ValueState> t = Transpose(*c, {1, 0, 2});
  ASSERT_TRUE(t);
  t = Reshape(*t, {16, 2});
  ASSERT_TRUE(t);
  EXPECT_EQ(LayoutOf(*t), Expected("{devices=[1,8]<=[8]}", {16, 16}));
}

TEST(ValueState, ArrayAllToAllAndPermute) {
  // P('x', None) on x=4 -> P(None, 'x') with the array all-to-all on a leading dim of 4 chunks.
  std::vector<std::vector<int64_t>> tiles;
  for (int64_t p = 0; p < 4; ++p) tiles.push_back({p, 0});
  const ValueState s = *TiledState({8, 8}, {2, 8}, tiles, 4);
  std::optional<ValueState> r = Reshape(s, {2, 4, 2});
  ASSERT_TRUE(r);
  r = Transpose(*r, {1, 0, 2});
  ASSERT_TRUE(r);
  r = AllToAll(*r, 0, {{0, 1, 2, 3}});
  ASSERT_TRUE(r);
  r = Reshape(*r, {8, 2});
  ASSERT_TRUE(r);
  EXPECT_EQ(LayoutOf(*r), Expected("{devices=[1,4]<=[4]}", {8, 8}));
  // A permutation of the devices; one that leaves a device without data is not followed.
  std::optional<ValueState> p = CollectivePermute(*r, {{0, 1}, {1, 0}, {2, 3}, {3, 2}});
  ASSERT_TRUE(p);
  EXPECT_EQ(LayoutOf(*p), Expected("{devices=[1,4]1,0,3,2}", {8, 8}));
  EXPECT_FALSE(CollectivePermute(*r, {{0, 1}, {1, 2}}));
}

TEST(ValueState, BitcastFollowsPhysicalLayouts) {
  // f32[8,16,4]{1,0,2} is physically [4][8][16]; a bitcast to f32[4,128]{1,0} reads it in that order.
  std::vector<std::vector<int64_t>> tiles(2, std::vector<int64_t>{0, 0, 0});
  const ValueState s = *TiledState({8, 16, 4}, {8, 16, 4}, tiles, 2);
  HloShape from, to;
  from.element_type = to.element_type = "f32";
  from.dims = {8, 16, 4};
  from.minor_to_major = {1, 0, 2};
  to.dims = {4, 128};
  std::optional<ValueState> b = Bitcast(s, from, to);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->ToString(), "[(4@g2*1), (8@g0*1 16@g1*1)]");
}

TEST(ValueState, InterpretsReshapedArrays) {
  // [16,16] over x=4 on dim 0, read as [16,4,4]: the interpretation is a layout of the reshaped array.
  std::vector<std::vector<int64_t>> tiles;
  for (int64_t p = 0; p < 4; ++p) tiles.push_back({p, 0});
  const ValueState s = *TiledState({16, 16}, {4, 16}, tiles, 4);
  std::optional<ValueState> r = Reshape(s, {4, 4, 4});
  ASSERT_TRUE(r);
  std::optional<Interpretation> in = Interpret(*r);
  ASSERT_TRUE(in);
  EXPECT_FALSE(in->identity);
  EXPECT_EQ(in->shape, (std::vector<int64_t>{16, 4, 4}));
  Result<Layout> l = ToLayout(*in, DType::kF32);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*l, Expected("{devices=[4,1,1]<=[4]}", {16, 4, 4}));
  // Padding: 10 rows over 4 devices are padded shards of 3.
  std::vector<std::vector<int64_t>> t4;
  for (int64_t p = 0; p < 4; ++p) t4.push_back({p});
  const ValueState u = *TiledState({10}, {3}, t4, 4);
  EXPECT_EQ(LayoutOf(u), Expected("{devices=[4]<=[4]}", {10}));
  std::optional<ValueState> g = AllGather(u, 0, {{0, 1, 2, 3}});
  ASSERT_TRUE(g);
  EXPECT_TRUE(HoldsWholeArray(*g));
}

// A dim split into shards of one element keeps no mode: Interpret reads it from the
// offsets (random_49: P(None,None,'x') -> P(None,'x',None) of f32[4,8,16] on x=8), and
// a dim of extent 1 with no mode is the array's own (a2a_permute: f32[8,16,1]).
TEST(ValueState, InterpretsDimsOfOneElementPerDevice) {
  std::vector<std::vector<int64_t>> tiles;
  for (int64_t p = 0; p < 8; ++p) tiles.push_back({0, p, 0});
  const ValueState s = *TiledState({4, 8, 16}, {4, 1, 16}, tiles, 8);
  // Through a reshape to [4,16] (dim 1 held by no local dim: no layout of the array)
  // and back: dim 1 has no mode left, only the offsets.
  std::optional<ValueState> flat = Reshape(s, {4, 16});
  ASSERT_TRUE(flat);
  EXPECT_FALSE(Interpret(*flat).has_value());
  std::optional<ValueState> back = Reshape(*flat, {4, 1, 16});
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->dims[1].empty()) << back->ToString();
  std::optional<Interpretation> in = Interpret(*back);
  ASSERT_TRUE(in);
  EXPECT_TRUE(in->identity);
  EXPECT_EQ(LayoutOf(*back), Expected("{devices=[1,8,1]<=[8]}", {4, 8, 16}));
  // f32[8,16,1] rows over 8 devices: the last dim, of extent 1, keeps no mode either.
  std::vector<std::vector<int64_t>> rows;
  for (int64_t p = 0; p < 8; ++p) rows.push_back({0, p, 0});
  std::optional<ValueState> t = Reshape(*TiledState({8, 16, 1}, {8, 2, 1}, rows, 8), {8, 2, 1});
  ASSERT_TRUE(t);
  std::optional<Interpretation> ti = Interpret(*t);
  ASSERT_TRUE(ti);
  EXPECT_TRUE(ti->identity) << t->ToString();
}

// x: [8,16] rows over x=4 (replicated over y=2) times w: [16,32] columns over y: the dot's
// result is rows over x, columns over y. With w's rows split instead, the sums are partial.
TEST(DerivedLayout, DotReduceBroadcast) {
  auto interp = [](std::vector<int64_t> shape, std::vector<int64_t> local, std::vector<std::vector<int64_t>> tiles) {
    std::optional<Interpretation> in = Interpret(*TiledState(shape, local, tiles, 8));
    EXPECT_TRUE(in);
    return *in;
  };
  std::vector<std::vector<int64_t>> rows, cols, krows;
  for (int64_t p = 0; p < 8; ++p) {
    rows.push_back({p / 2, 0});
    cols.push_back({0, p % 2});
    krows.push_back({p % 2, 0});
  }
  const Interpretation x = interp({8, 16}, {2, 16}, rows);
  bool partial = true;
  std::optional<Interpretation> out = DotLayout(x, interp({16, 32}, {16, 16}, cols), DotDims{{}, {1}, {}, {0}}, 8, &partial);
  ASSERT_TRUE(out);
  EXPECT_FALSE(partial);
  EXPECT_EQ(*ToLayout(*out, DType::kF32), Expected("{devices=[4,2]<=[8]}", {8, 32}));
  // Contracting over split dims: x's columns split like w's rows.
  std::vector<std::vector<int64_t>> xcols;
  for (int64_t p = 0; p < 8; ++p) xcols.push_back({p / 2, p % 2});
  out = DotLayout(interp({8, 16}, {2, 8}, xcols), interp({16, 32}, {8, 32}, krows), DotDims{{}, {1}, {}, {0}}, 8, &partial);
  ASSERT_TRUE(out);
  EXPECT_TRUE(partial);
  // Mismatched contracting ranges are not a dot of these layouts.
  EXPECT_FALSE(DotLayout(x, interp({16, 32}, {8, 32}, krows), DotDims{{}, {1}, {}, {0}}, 8, &partial));
  out = ReduceLayout(x, {1}, 8, &partial);
  ASSERT_TRUE(out);
  EXPECT_FALSE(partial);
  EXPECT_EQ(*ToLayout(*out, DType::kF32), Expected("{devices=[4,2]<=[8] last_tile_dim_replicate}", {8}));
  out = BroadcastLayout(x, {0, 2}, {2, 5, 16}, 8);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->shape, (std::vector<int64_t>{8, 5, 16}));
  EXPECT_FALSE(BroadcastLayout(x, {0, 2}, {2, 5, 15}, 8));
}

TEST(IntEval, OffsetTablesAndArithmetic) {
  HloInstruction table;
  table.opcode = "constant";
  table.shape.element_type = "s32";
  table.shape.dims = {4};
  table.literal = "{0, 8, 0, 8}";
  IntPtr t = IntConstant(table);
  ASSERT_TRUE(t);
  IntPtr pid = PartitionIds(4);
  HloInstruction ds;
  ds.opcode = "dynamic-slice";
  ds.shape.element_type = "s32";
  ds.shape.dims = {1};
  IntPtr v = EvalInt(ds, {t, pid}, 4);
  ASSERT_TRUE(v);
  ASSERT_TRUE(v->per_device);
  EXPECT_EQ(v->v, (std::vector<int64_t>{0, 8, 0, 8}));
  HloInstruction mul;
  mul.opcode = "multiply";
  mul.shape.element_type = "s32";
  mul.shape.dims = {1};
  HloInstruction two = table;
  two.shape.dims = {1};
  two.literal = "{-2}";
  IntPtr m = EvalInt(mul, {v, IntConstant(two)}, 4);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->v, (std::vector<int64_t>{0, -16, 0, -16}));
  // Elided literals are not evaluated.
  table.literal = "{...}";
  EXPECT_FALSE(IntConstant(table));
}

}  // namespace
}  // namespace reshard::audit
