// Link test: links only reshard_layout and calls every function the layout
// library's headers declare (status, dtype, box, mesh, layout,
// tile_assignment, hlo_sharding, named_sharding, dtensor, block_cyclic). If a
// declaration there is defined in another library (notation, plan), this
// program fails to link, so the build itself proves the layering. It also
// checks each result, and exits non-zero on a wrong one.
#include <cstdint>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "reshard/block_cyclic.h"
#include "reshard/box.h"
#include "reshard/dtensor.h"
#include "reshard/dtype.h"
#include "reshard/hlo_sharding.h"
#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/named_sharding.h"
#include "reshard/status.h"
#include "reshard/tile_assignment.h"

namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "layout_only: wrong: " << what << "\n";
    ++failures;
  }
}

template <typename T>
std::string Streamed(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

int main() {
  using namespace reshard;

  // status.h
  const Status bad = Status::InvalidArgument("x");
  Check(bad.ToString() == "invalid argument: x", "Status::ToString");
  Check(bad.WithContext("ctx").message() == "ctx: x", "Status::WithContext");
  Check(Streamed(Status::Ok()) == "OK", "operator<<(Status)");
  Check(!Result<int>(Status::NotSupported("n")).ok() && Result<int>(3).value() == 3, "Result");

  // dtype.h
  Check(ByteSize(DType::kBF16) == 2, "ByteSize");
  Check(DTypeName(DType::kF32) == "f32", "DTypeName");
  Check(ParseDType("s8").ok() && *ParseDType("s8") == DType::kS8 && !ParseDType("f33").ok(), "ParseDType");

  // box.h
  Check(OverlapLength({{0, 4}, {6, 8}}, {{2, 7}}) == 3, "OverlapLength");
  const Box box{{{0, 2}, {4, 8}}};
  Check(box.volume() == 8, "Box::volume");
  Check(box.ToString() == "[0,2)x[4,8)" && Streamed(box) == box.ToString(), "Box::ToString, operator<<(Box)");

  // mesh.h
  const Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  const Mesh other = Mesh::Create({{"x", 2}}, {3, 1}).value();
  Check(mesh.DeviceIds().size() == 8 && other.DeviceIds() == std::vector<int64_t>{3, 1}, "Mesh::DeviceIds");
  Check(mesh.AxisIndex("y") == std::optional<int64_t>(1) && !mesh.AxisIndex("z"), "Mesh::AxisIndex");
  Check(mesh.Coordinate(5, 0) == 2 && mesh.Coordinate(5, 1) == 1, "Mesh::Coordinate");
  Check(mesh.Stride(0) == 2 && mesh.Stride(1) == 1, "Mesh::Stride");
  Check(mesh.GroupSize({0}) == 4 && mesh.GroupOf(5, {0}) == 1 && mesh.MemberIndex(5, {0}) == 2 &&
            mesh.GroupMembers(5, {0}) == std::vector<int64_t>{1, 3, 5, 7},
        "Mesh::GroupSize, GroupOf, MemberIndex, GroupMembers");
  Check(mesh.ToString() == "x=4,y=2" && Streamed(mesh) == mesh.ToString(), "Mesh::ToString, operator<<(Mesh)");

  // tile_assignment.h
  const TileAssignment iota = TileAssignment::Iota({2, 1, 4}, {4, 2}, {1, 0}).value();
  const TileAssignment list = TileAssignment::Explicit({2, 2}, {0, 2, 1, 3}).value();
  Check(iota.device(1) == 2 && list.device(1) == 2, "TileAssignment::device");
  Check(iota.Devices() == std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7}, "TileAssignment::Devices");
  Check(iota.ToString() == "[2,1,4]<=[4,2]T(1,0)" && list.ToString() == "[2,2]0,2,1,3", "TileAssignment::ToString");

  // hlo_sharding.h
  const HloSharding tiled = HloSharding::Tile(iota, false);
  Check(tiled.ToString() == "{devices=[2,1,4]<=[4,2]T(1,0)}", "HloSharding::ToString (tiled)");
  Check(HloSharding::Replicate().ToString() == "{replicated}", "HloSharding::ToString (replicated)");
  Check(HloSharding::AssignDevice(3).ToString() == "{maximal device=3}", "HloSharding::ToString (maximal)");
  const Layout canonical = tiled.ToLayout({16, 16, 16}, DType::kF32, std::nullopt).value();
  Check(!HloSharding::Replicate().ToLayout({4}, DType::kF32, std::nullopt).ok(), "HloSharding::ToLayout refuses {replicated} without a mesh");

  // layout.h
  Check(DimGrid::Ceil(10, 4).cuts == std::vector<int64_t>{0, 3, 6, 9, 10}, "DimGrid::Ceil");
  Check(DimGrid::FromCuts({0, 3, 10}).tiles == 2, "DimGrid::FromCuts");
  const Layout made = Layout::Create({10}, DType::kF32, {DimGrid::FromCuts({0, 3, 10})}, {{0, 0}, {1, 1}, {2, 1}}).value();
  Check(made.TileOf(2) == 1 && made.TileOf(9) == -1, "Layout::TileOf");
  Check(canonical.TileCoords(canonical.TileOf(3)) == std::vector<int32_t>{1, 0, 1}, "Layout::TileCoords");
  const std::vector<int32_t> coords = {1, 0, 1};
  Check(canonical.TileIndex(coords) == canonical.TileOf(3), "Layout::TileIndex");
  Check(made.Holders(1).size() == 2 && made.Holders(1)[1] == 2, "Layout::Holders");
  Check(made.TileCells(0, 1).size() == 1 && made.TileCells(0, 1)[0] == 1, "Layout::TileCells");
  Check(made.TileElements(1) == 7, "Layout::TileElements");
  Check(made.TileIntervals(0, 1) == std::vector<Interval>{{3, 10}}, "Layout::TileIntervals");
  Check(canonical.LocalShape(3) == std::vector<int64_t>{8, 16, 4}, "Layout::LocalShape");
  Check(canonical.LocalBytes(3) == 2048, "Layout::LocalBytes");
  Check(canonical.DeviceBoxes(3) == std::vector<Box>{Box{{{8, 16}, {0, 16}, {4, 8}}}}, "Layout::DeviceBoxes");
  Check(canonical.DeviceBoxOrigins(3) == std::vector<std::vector<int64_t>>{{0, 0, 0}}, "Layout::DeviceBoxOrigins");
  Check(canonical.DeviceBoxCount(3) == 1, "Layout::DeviceBoxCount");
  Check(made == made && !(made == canonical) && made.Hash() == made.Hash(), "Layout ==, Hash");
  Check(!Streamed(made).empty(), "operator<<(Layout)");
  Check(ReduceOpName(ReduceOp::kAvg) == "avg" && ParseReduceOp("max").value() == ReduceOp::kMax, "ReduceOpName, ParseReduceOp");
  const Layout partial =
      Layout::Create({10}, DType::kF32, {DimGrid::Ceil(10, 1)}, {{0, 0, 1}, {1, 0, 0}}, {ReduceOp::kSum, 2}).value();
  Check(partial.partial() && partial.reduction().parts == 2 && partial.PartOf(1) == 1, "Layout::partial, reduction, PartOf");
  Check(!partial.WithoutReduction().partial(), "Layout::WithoutReduction");

  // named_sharding.h: P('y', None, 'x') on x=4,y=2 is the canonical layout.
  const AxisRef x{0}, y{1}, x_major{0, 1, 2};
  Check(x_major.ToString(mesh) == "x:(1)2" && y.ToString(mesh) == "y", "AxisRef::ToString");
  const NamedSharding named = NamedSharding::Create(mesh, {{{y}}, {}, {{x}}}).value();
  Check(named.ToLayout({16, 16, 16}, DType::kF32).value() == canonical, "NamedSharding::ToLayout");
  Check(named.ToHlo().ok() && named.ToHlo()->ToString() == "{devices=[2,1,4]<=[4,2]T(1,0)}", "NamedSharding::ToHlo");
  const auto axes = InferMeshAxes(canonical, mesh, false);
  Check(axes.ok() && axes->size() == 3 && (*axes)[0].size() == 1 && (*axes)[0][0] == y, "InferMeshAxes");
  Check(NamedShardingFromLayout(canonical, mesh, false).ok(), "NamedShardingFromLayout");

  // dtensor.h: [Shard(1), Replicate()] on x=4,y=2 splits dim 1 over x.
  const std::vector<Placement> placements = {{Placement::Kind::kShard, 1}, {Placement::Kind::kReplicate, 0}};
  const Layout dt = PlacementsToLayout(placements, mesh, {8, 8}, DType::kF32).value();
  Check(dt.LocalShape(0) == std::vector<int64_t>{8, 2}, "PlacementsToLayout");
  Check(PlacementsFromLayout(dt, mesh).ok() && *PlacementsFromLayout(dt, mesh) == placements, "PlacementsFromLayout");

  // block_cyclic.h
  const BlockCyclic bc{{2, 3}, {2, 2}};
  const Layout cyclic = BlockCyclicToLayout(bc, {}, {9, 10}, DType::kF32).value();
  Check(cyclic.DeviceBoxCount(0) == 3 * 2, "BlockCyclicToLayout");

  if (failures == 0) std::cout << "layout_only: every layout-library function linked and answered\n";
  return failures == 0 ? 0 : 1;
}
