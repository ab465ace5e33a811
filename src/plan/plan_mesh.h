// PlanMesh: the one mesh a collective plan names its groups over, and the
// two layouts as lists of its axes per tensor dim.
//
// Found from the caller's meshes (first one over which both layouts are
// named shardings, sub-axes allowed), else from the prime factors of the
// device count over ascending ids. Each axis is then cut into pieces at every
// sub-axis boundary either layout uses, and at the node boundary of a
// nodes:K topology, so that both layouts (and every plan state) use whole
// pieces only. A piece keeps the caller's name ("x") or its sub-axis name
// ("x:(1)2"), which is also its name in the plan mesh.
#ifndef RESHARD_SRC_PLAN_PLAN_MESH_H_
#define RESHARD_SRC_PLAN_PLAN_MESH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/named_sharding.h"

namespace reshard {

// Per tensor dim, plan-mesh axes major to minor.
using AxisLists = std::vector<std::vector<int32_t>>;

struct PlanMesh {
  Mesh mesh;
  Mesh original;              // the caller's mesh the pieces cut
  std::vector<AxisRef> origin;  // per piece, what it is of `original`
  AxisLists source, target;

  // "x" for a run of pieces that make up axis x in order, else piece names.
  std::string AxesText(const std::vector<int32_t>& pieces, const char* sep) const;
};

// The plan mesh, and a finer one where its pieces cut into prime factors give
// more pieces but at most kMaxPrimePieces: more pieces let the search move
// part of an axis (slice half of x, swap it for y), at the price of a larger
// search and of axis names that are sub-axes.
struct PlanMeshes {
  PlanMesh coarse;
  std::optional<PlanMesh> fine;
};

// nullopt when the layouts are not named shardings over one common mesh.
// node_size > 1 adds node-boundary cuts where the mesh is iota.
inline constexpr int kMaxPrimePieces = 4;
std::optional<PlanMeshes> FindPlanMesh(const Layout& source, const Layout& target, const std::vector<Mesh>& hints,
                                       int64_t node_size);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_PLAN_MESH_H_
