// NamedSharding: a sharding stated over a named mesh, as JAX, Shardy and the
// HLO V3 text state it: for each tensor dim an ordered list of mesh axes
// (major to minor); axes not listed replicate the array.
//
// An AxisRef names a whole mesh axis or a Shardy sub-axis "x":(pre)size: axis
// x (size n) viewed as major-to-minor factors, the factor of size `size` whose
// major neighbours multiply to `pre`. The device at coordinate c along x has
// sub-axis coordinate (c / (n / (pre * size))) % size. So on x=4, "x":(1)2 is
// the major half (c / 2) and "x":(2)2 the minor half (c % 2), as in Shardy.
// Dims split with XLA's rule (ceil). Unreduced axes (JAX's
// P(..., unreduced={'x'}), Shardy's unreduced={"x"}) hold partial sums: the
// layout carries a pending sum over them (layout.h), parts numbered
// row-major over them in the order listed. Invariants (checked by Create): axes
// exist, sub-axes divide their axis, no part of an axis is used twice.
// Immutable value; thread-safe.
#ifndef RESHARD_NAMED_SHARDING_H_
#define RESHARD_NAMED_SHARDING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reshard/dtype.h"
#include "reshard/hlo_sharding.h"
#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/status.h"

namespace reshard {

struct AxisRef {
  int64_t axis = 0;      // index into mesh.axes()
  int64_t pre_size = 1;  // sub-axis only: product of the major factors before it
  int64_t size = 0;      // 0: the whole axis
  bool is_sub_axis() const { return size != 0; }
  int64_t Size(const Mesh& m) const { return size ? size : m.axes()[axis].size; }
  // Coordinate of the device at mesh position `flat` along this (sub-)axis.
  int64_t Coordinate(const Mesh& m, int64_t flat) const {
    const int64_t n = m.axes()[axis].size;
    return (m.Coordinate(flat, axis) / (n / (pre_size * Size(m)))) % Size(m);
  }
  // "x" or "x:(1)2" (names unquoted; printers add their own quotes).
  std::string ToString(const Mesh& m) const;
  friend bool operator==(const AxisRef&, const AxisRef&) = default;
};

class NamedSharding {
 public:
  struct Dim {
    std::vector<AxisRef> axes = {};  // major to minor
    bool open = false;          // Shardy "?": may be sharded further; same layout
    std::optional<int64_t> priority = std::nullopt;
    friend bool operator==(const Dim&, const Dim&) = default;
  };

  static Result<NamedSharding> Create(Mesh mesh, std::vector<Dim> dims, std::vector<AxisRef> replicated = {},
                                      std::vector<AxisRef> unreduced = {});

  const Mesh& mesh() const { return mesh_; }
  const std::vector<Dim>& dims() const { return dims_; }
  const std::vector<AxisRef>& replicated() const { return replicated_; }
  const std::vector<AxisRef>& unreduced() const { return unreduced_; }

  // REQUIRES nothing; fails if shape's rank differs from dims().size().
  Result<Layout> ToLayout(const std::vector<int64_t>& shape, DType dtype) const;
  // Whether ToLayout(layout.shape(), layout.dtype()) equals `layout`,
  // decided without building it where the grids and every device's tile
  // agree (no unreduced axes): O(cells + devices) time, O(cells) memory.
  Result<bool> Gives(const Layout& layout) const;
  // The HLO sharding exactly as JAX prints it: iota lists for iota meshes,
  // explicit ids (replica groups ascending) otherwise; size-1 axes dropped;
  // {replicated} when nothing is split. NotSupported with unreduced axes:
  // HLO sharding text has no pending reduction.
  Result<HloSharding> ToHlo() const;

  friend bool operator==(const NamedSharding&, const NamedSharding&) = default;

 private:
  NamedSharding(Mesh m, std::vector<Dim> d, std::vector<AxisRef> r, std::vector<AxisRef> u)
      : mesh_(std::move(m)), dims_(std::move(d)), replicated_(std::move(r)), unreduced_(std::move(u)) {}
  Mesh mesh_;
  std::vector<Dim> dims_;
  std::vector<AxisRef> replicated_;
  std::vector<AxisRef> unreduced_;
};

// For each tensor dim of `layout`, the mesh axes (major to minor) whose
// coordinates give each device's tile along that dim; the layout's devices
// must be exactly the mesh's. Only tile coordinates are matched, not split
// points: callers build the candidate sharding and compare layouts.
// allow_sub_axes permits Shardy sub-axes.
Result<std::vector<std::vector<AxisRef>>> InferMeshAxes(const Layout& layout, const Mesh& mesh, bool allow_sub_axes);

// The named sharding over `mesh` whose layout equals `layout`, if any. A
// pending reduction must be a sum over whole mesh axes (unreduced axes).
Result<NamedSharding> NamedShardingFromLayout(const Layout& layout, const Mesh& mesh, bool allow_sub_axes);

}  // namespace reshard

#endif  // RESHARD_NAMED_SHARDING_H_
