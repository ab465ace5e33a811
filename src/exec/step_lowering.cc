// What a plan step is compiled through (step_lowering.h).
#include "reshard/step_lowering.h"

#include <algorithm>
#include <vector>

#include "reshard/mesh.h"

namespace reshard {

std::optional<Layout> ReducedPieces(const Layout& partial) {
  if (!partial.partial() || partial.rank() == 0) return std::nullopt;
  const int64_t parts = partial.reduction().parts;
  const size_t rank = static_cast<size_t>(partial.rank());
  // Dims that can be cut: one cell per tile coordinate, in order (a tile is
  // one interval there); their longest cell.
  std::vector<int64_t> longest(rank, 0), cuts(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    const DimGrid& g = partial.dim(static_cast<int64_t>(d));
    bool simple = static_cast<int64_t>(g.cell_tile.size()) == g.tiles;
    for (size_t k = 0; k < g.cell_tile.size() && simple; ++k) simple = g.cell_tile[k] == static_cast<int32_t>(k);
    for (size_t k = 0; k + 1 < g.cuts.size() && simple; ++k) longest[d] = std::max(longest[d], g.cuts[k + 1] - g.cuts[k]);
  }
  // Each prime factor of `parts` cuts one dim: where it divides every cell's
  // current piece exactly, else the dim of the longest pieces.
  auto divides = [&](size_t d, int64_t f) {
    const DimGrid& g = partial.dim(static_cast<int64_t>(d));
    for (size_t k = 0; k + 1 < g.cuts.size(); ++k)
      if ((g.cuts[k + 1] - g.cuts[k]) % (cuts[d] * f) != 0) return false;
    return true;
  };
  int64_t rest = parts;
  for (int64_t f = 2; rest > 1; ++f) {
    while (rest % f == 0) {
      int64_t best = -1;
      for (size_t d = 0; d < rank && best < 0; ++d)
        if (longest[d] > 0 && divides(d, f)) best = static_cast<int64_t>(d);
      const bool exact = best >= 0;
      for (size_t d = 0; d < rank && !exact; ++d) {
        const int64_t piece = (longest[d] + cuts[d] - 1) / cuts[d];
        if (longest[d] > 0 && (best < 0 || piece > (longest[static_cast<size_t>(best)] + cuts[static_cast<size_t>(best)] - 1) /
                                                       cuts[static_cast<size_t>(best)]))
          best = static_cast<int64_t>(d);
      }
      if (best < 0) return std::nullopt;  // no dim to cut (pieces past one element are empty, as padded chunks are)
      cuts[static_cast<size_t>(best)] *= f;
      rest /= f;
    }
  }
  std::vector<DimGrid> dims;
  for (size_t d = 0; d < rank; ++d) {
    const DimGrid& g = partial.dim(static_cast<int64_t>(d));
    if (cuts[d] == 1) {
      dims.push_back(g);
      continue;
    }
    DimGrid refined;
    refined.cuts = {0};
    refined.tiles = static_cast<int32_t>(g.tiles * cuts[d]);
    for (size_t k = 0; k + 1 < g.cuts.size(); ++k) {
      const int64_t lo = g.cuts[k], n = g.cuts[k + 1] - lo, c = (n + cuts[d] - 1) / cuts[d];
      for (int64_t j = 0; j < cuts[d]; ++j) {
        refined.cuts.push_back(lo + std::min((j + 1) * c, n));
        refined.cell_tile.push_back(static_cast<int32_t>(refined.cell_tile.size()));
      }
    }
    dims.push_back(std::move(refined));
  }
  // Piece p of a tile: p's digits over the cut dims (mixed radix, outer dim first).
  std::vector<DeviceTile> placement;
  for (int64_t dev : partial.devices()) {
    const int64_t t = partial.TileOf(dev);
    if (t < 0) {
      placement.push_back({dev, -1, 0});
      continue;
    }
    std::vector<int32_t> coords = partial.TileCoords(t);
    int64_t p = partial.PartOf(dev);
    for (size_t d = rank; d-- > 0;) {
      coords[d] = static_cast<int32_t>(coords[d] * cuts[d] + p % cuts[d]);
      p /= cuts[d];
    }
    int64_t tile = 0;
    for (size_t d = 0; d < rank; ++d) tile = tile * dims[d].tiles + coords[d];
    placement.push_back({dev, tile, 0});
  }
  Result<Layout> l = Layout::Create(partial.shape(), partial.dtype(), std::move(dims), std::move(placement));
  if (!l.ok()) return std::nullopt;
  return std::move(l).value();
}

std::optional<Layout> RingPieces(const PlanStep& step) {
  if (step.op != StepOp::kAllReduce || !step.input.partial() || step.output.partial()) return std::nullopt;
  return ReducedPieces(step.input);
}

Result<Exchange> StepExchange(const CollectivePlan& plan, size_t step) {
  const PlanStep& s = plan.steps().at(step);
  const bool grouped = (s.op == StepOp::kAllGather || s.op == StepOp::kAllToAll) && !s.group_axes.empty() &&
                       plan.mesh().has_value();
  if (!grouped) return Exchange::Create(s.input, s.output);
  const Mesh& mesh = *plan.mesh();
  const std::vector<int32_t> axes = s.group_axes;
  return Exchange::Create(s.input, s.output, [mesh, axes, positions = MeshPositions(mesh)](int64_t device) -> int64_t {
    const int64_t pos = positions.Of(device);
    return pos < 0 ? -1 - device : mesh.GroupOf(pos, axes);  // off the mesh: a group of its own
  });
}

int64_t PricedChunkBytes(const CollectivePlan& plan, size_t step) {
  const PlanStep& s = plan.steps().at(step);
  if (!plan.mesh() || s.group_axes.empty() ||
      (s.op != StepOp::kAllGather && s.op != StepOp::kAllToAll && s.op != StepOp::kReduceScatter &&
       s.op != StepOp::kAllReduce))
    return 0;
  const int64_t k = plan.mesh()->GroupSize(s.group_axes);
  const int64_t messages = s.op == StepOp::kAllReduce ? 2 * (k - 1) : k - 1;
  return k > 1 ? s.recv_bytes.Max() / messages : 0;
}

}  // namespace reshard
