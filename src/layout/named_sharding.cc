#include "reshard/named_sharding.h"

#include <algorithm>
#include <map>

#include "layout/mesh_grid.h"

namespace reshard {

std::string AxisRef::ToString(const Mesh& m) const {
  std::string s = m.axes()[axis].name;
  if (size) s += ":(" + std::to_string(pre_size) + ")" + std::to_string(size);
  return s;
}

namespace {

// The factor range [pre, pre*size) of an axis that a reference covers.
struct Part {
  int64_t lo, hi;
};

Part PartOf(const AxisRef& a, const Mesh& m) { return {a.pre_size, a.pre_size * a.Size(m)}; }

}  // namespace

Result<NamedSharding> NamedSharding::Create(Mesh mesh, std::vector<Dim> dims, std::vector<AxisRef> replicated,
                                           std::vector<AxisRef> unreduced) {
  std::map<int64_t, std::vector<Part>> used;
  auto check = [&](const AxisRef& a) -> Status {
    if (a.axis < 0 || a.axis >= mesh.num_axes()) return Status::InvalidArgument("axis index out of range");
    const Mesh::Axis& ax = mesh.axes()[a.axis];
    if (a.size) {
      if (a.pre_size < 1 || a.size < 1 || ax.size % a.pre_size != 0 || (ax.size / a.pre_size) % a.size != 0)
        return Status::InvalidArgument("sub-axis " + a.ToString(mesh) + " does not divide axis '" + ax.name + "' of size " +
                                       std::to_string(ax.size));
    }
    const Part p = PartOf(a, mesh);
    for (const Part& q : used[a.axis])
      if (std::max(p.lo, q.lo) < std::min(p.hi, q.hi))
        return Status::InvalidArgument("mesh axis '" + ax.name + "' is used twice");
    used[a.axis].push_back(p);
    return Status::Ok();
  };
  for (const Dim& d : dims)
    for (const AxisRef& a : d.axes) RESHARD_RETURN_IF_ERROR(check(a));
  for (const AxisRef& a : replicated) RESHARD_RETURN_IF_ERROR(check(a));
  for (const AxisRef& a : unreduced) RESHARD_RETURN_IF_ERROR(check(a));
  // The sub-axes of one axis must cut it into a chain of factors: every
  // boundary divides the next ("x":(1)2 with "x":(3)4 on x=12 does not).
  for (auto& [axis, parts] : used) {
    std::vector<int64_t> b = {1, mesh.axes()[axis].size};
    for (const Part& p : parts) { b.push_back(p.lo); b.push_back(p.hi); }
    std::sort(b.begin(), b.end());
    for (size_t i = 0; i + 1 < b.size(); ++i)
      if (b[i + 1] % b[i] != 0)
        return Status::InvalidArgument("the sub-axes of mesh axis '" + mesh.axes()[axis].name +
                                       "' do not split it into factors (" + std::to_string(b[i]) + " does not divide " +
                                       std::to_string(b[i + 1]) + ")");
  }
  return NamedSharding(std::move(mesh), std::move(dims), std::move(replicated), std::move(unreduced));
}

Result<Layout> NamedSharding::ToLayout(const std::vector<int64_t>& shape, DType dtype) const {
  std::vector<std::vector<AxisRef>> axes;
  for (const Dim& d : dims_) axes.push_back(d.axes);
  return BuildMeshLayout(mesh_, shape, dtype, axes, SplitRule::kCeil, {}, unreduced_, ReduceOp::kSum);
}

Result<bool> NamedSharding::Gives(const Layout& layout) const {
  std::vector<std::vector<AxisRef>> axes;
  for (const Dim& d : dims_) axes.push_back(d.axes);
  return IsMeshLayout(layout, mesh_, axes, SplitRule::kCeil, {}, unreduced_, ReduceOp::kSum);
}

Result<HloSharding> NamedSharding::ToHlo() const {
  if (!unreduced_.empty()) return Status::NotSupported("HLO sharding text cannot state unreduced axes (partial sums)");
  // Split each mesh axis into pieces at every sub-axis boundary used on it.
  const int64_t num_axes = mesh_.num_axes();
  std::vector<std::vector<int64_t>> bounds(num_axes);  // ascending factor boundaries
  for (int64_t a = 0; a < num_axes; ++a) bounds[a] = {1, mesh_.axes()[a].size};
  for (const Dim& d : dims_)
    for (const AxisRef& r : d.axes) {
      bounds[r.axis].push_back(r.pre_size);
      bounds[r.axis].push_back(r.pre_size * r.Size(mesh_));
    }
  // Pieces in mesh order, each axis major to minor (a boundary is the product
  // of the factors major to it, so ascending boundaries go major to minor);
  // size-1 pieces vanish.
  std::vector<int64_t> piece_sizes;
  std::vector<std::map<int64_t, int64_t>> piece_at(num_axes);  // lower boundary -> piece index
  for (int64_t a = 0; a < num_axes; ++a) {
    std::vector<int64_t>& b = bounds[a];
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    for (size_t i = 0; i + 1 < b.size(); ++i) {
      piece_at[a][b[i]] = static_cast<int64_t>(piece_sizes.size());
      piece_sizes.push_back(b[i + 1] / b[i]);
    }
  }
  std::vector<bool> taken(piece_sizes.size(), false);
  std::vector<int64_t> perm, tile_dims;
  for (const Dim& d : dims_) {
    int64_t k = 1;
    for (const AxisRef& r : d.axes) {
      // Pieces of this reference, major to minor.
      std::vector<int64_t> mine;
      for (const auto& [lo, idx] : piece_at[r.axis])
        if (lo >= r.pre_size && lo < r.pre_size * r.Size(mesh_)) mine.push_back(idx);
      std::sort(mine.begin(), mine.end());  // lower index = more major
      for (int64_t idx : mine) { perm.push_back(idx); taken[idx] = true; k *= piece_sizes[idx]; }
    }
    tile_dims.push_back(k);
  }
  int64_t repl = 1;
  for (size_t i = 0; i < piece_sizes.size(); ++i)
    if (!taken[i]) { perm.push_back(static_cast<int64_t>(i)); repl *= piece_sizes[i]; }
  bool split = false;
  for (int64_t k : tile_dims) split = split || k > 1;
  if (!split) return HloSharding::Replicate();
  const bool replicate_last = repl > 1;
  if (replicate_last) tile_dims.push_back(repl);
  std::vector<int64_t> reshape = piece_sizes;
  if (reshape.empty()) reshape = {1};
  if (perm.empty()) perm = {0};
  RESHARD_ASSIGN_OR_RETURN(TileAssignment iota, TileAssignment::Iota(tile_dims, reshape, perm));
  if (mesh_.is_iota()) return HloSharding::Tile(std::move(iota), replicate_last);
  std::vector<int64_t> ids(iota.num_devices());
  for (int64_t i = 0; i < iota.num_devices(); ++i) ids[i] = mesh_.device(iota.device(i));
  if (replicate_last)
    for (size_t g = 0; g < ids.size(); g += repl) std::sort(ids.begin() + g, ids.begin() + g + repl);
  RESHARD_ASSIGN_OR_RETURN(TileAssignment list, TileAssignment::Explicit(tile_dims, std::move(ids)));
  return HloSharding::Tile(std::move(list), replicate_last);
}

Result<std::vector<std::vector<AxisRef>>> InferMeshAxes(const Layout& layout, const Mesh& mesh, bool allow_sub_axes) {
  const int64_t n = mesh.num_devices();
  const int64_t rank = layout.rank();
  const std::vector<int64_t>& devices = layout.devices();
  if (!mesh.HasDevices(devices)) return Status::InvalidArgument("the layout's devices are not the devices of mesh " + mesh.ToString());
  // Tile coordinates of each mesh position, flat (position-major): 4 B a
  // device and dim, since meshes reach millions of devices.
  std::vector<int32_t> coords(static_cast<size_t>(n * rank));
  for (int64_t f = 0; f < n; ++f) {
    int64_t t = layout.TileOf(mesh.device(f));
    if (t < 0) return Status::InvalidArgument("device " + std::to_string(mesh.device(f)) + " holds no tile");
    for (int64_t d = rank - 1; d >= 0; --d) {
      coords[static_cast<size_t>(f * rank + d)] = static_cast<int32_t>(t % layout.dim(d).tiles);
      t /= layout.dim(d).tiles;
    }
  }
  std::vector<std::vector<Part>> used(mesh.num_axes());
  std::vector<std::vector<AxisRef>> result(layout.rank());
  std::vector<int32_t> cur(static_cast<size_t>(n));
  for (int64_t d = 0; d < layout.rank(); ++d) {
    int64_t k = layout.dim(d).tiles;
    for (int64_t f = 0; f < n; ++f) cur[f] = coords[static_cast<size_t>(f * rank + d)];
    while (k > 1) {
      std::optional<AxisRef> best;
      for (int64_t a = 0; a < mesh.num_axes(); ++a) {
        const int64_t size = mesh.axes()[a].size;
        for (int64_t pre = 1; pre < size; ++pre) {
          if (size % pre) continue;
          if (!allow_sub_axes && pre != 1) break;
          for (int64_t s = size / pre; s > 1; --s) {
            if ((size / pre) % s || k % s) continue;
            if (!allow_sub_axes && s != size) continue;
            AxisRef r{a, pre, s == size ? 0 : s};
            const Part p = PartOf(r, mesh);
            bool free = true;
            for (const Part& q : used[a]) free = free && !(std::max(p.lo, q.lo) < std::min(p.hi, q.hi));
            if (!free || (best && best->Size(mesh) >= s)) continue;
            // r.Coordinate(mesh, f), its divisions by the mesh done once.
            const int64_t stride = mesh.Stride(a) * (size / (pre * s));
            bool match = true;
            for (int64_t f = 0; f < n && match; ++f) match = cur[f] % s == (f / stride) % s;
            if (match) best = r;
          }
        }
      }
      if (!best)
        return Status::InvalidArgument("dimension " + std::to_string(d) + " is split " + std::to_string(layout.dim(d).tiles) +
                                       " ways in an order no " + (allow_sub_axes ? "(sub-)axes" : "axes") + " of mesh " +
                                       mesh.ToString() + " produce");
      const int64_t s = best->Size(mesh);
      used[best->axis].push_back(PartOf(*best, mesh));
      result[d].insert(result[d].begin(), *best);
      for (int64_t f = 0; f < n; ++f) cur[f] = static_cast<int32_t>(cur[f] / s);
      k /= s;
    }
  }
  return result;
}

Result<NamedSharding> NamedShardingFromLayout(const Layout& layout, const Mesh& mesh, bool allow_sub_axes) {
  std::vector<AxisRef> unreduced;
  if (layout.partial()) {
    if (layout.reduction().op != ReduceOp::kSum)
      return Status::InvalidArgument("unreduced axes hold partial sums; this layout's pending reduction is " +
                                     std::string(ReduceOpName(layout.reduction().op)));
    for (int64_t a : PartialMeshAxes(layout, mesh)) unreduced.push_back(AxisRef{a, 1, 0});
  }
  RESHARD_ASSIGN_OR_RETURN(auto axes, InferMeshAxes(layout.WithoutReduction(), mesh, allow_sub_axes));
  std::vector<NamedSharding::Dim> dims;
  for (auto& a : axes) dims.push_back({std::move(a), false, std::nullopt});
  RESHARD_ASSIGN_OR_RETURN(NamedSharding named, NamedSharding::Create(mesh, std::move(dims), {}, std::move(unreduced)));
  RESHARD_ASSIGN_OR_RETURN(bool gives, named.Gives(layout));
  if (!gives)
    return Status::InvalidArgument(layout.partial() ? "no named sharding over mesh " + mesh.ToString() +
                                                          " gives this layout: its splits are not XLA's even (ceil) splits, "
                                                          "or its pending sum is not over whole mesh axes"
                                                    : "the layout's split points are not XLA's even (ceil) splits, so no named "
                                                      "sharding over mesh " + mesh.ToString() + " gives it");
  return named;
}

}  // namespace reshard
