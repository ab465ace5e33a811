#include "testing/random_partial.h"

#include <algorithm>

#include "reshard/named_sharding.h"
#include "reshard/notation.h"
#include "testing/random_named.h"

namespace reshard::testing {
namespace {

std::string Text(const Result<std::string>& r) { return r.ok() ? *r : "?"; }

// Rank 1 to 3; half the shapes even (extents multiples of the device count), half uneven.
std::vector<int64_t> DrawShape(std::mt19937_64& rng, const Mesh& mesh) {
  const size_t rank = 1 + rng() % 3;
  std::vector<int64_t> shape;
  const bool even_case = rng() % 2 == 0;
  for (size_t d = 0; d < rank; ++d)
    shape.push_back(even_case ? mesh.num_devices() * (1 + static_cast<int64_t>(rng() % 2))
                              : 1 + static_cast<int64_t>(rng() % (rng() % 2 ? 12 : 5)));
  return shape;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t e : shape) text += (text.empty() ? "" : ",") + std::to_string(e);
  return text;
}

}  // namespace

// `spec` with a random subset of its unused mesh axes (each with
// probability 2/3) unreduced.
NamedSharding WithUnreducedAxes(std::mt19937_64& rng, const Mesh& mesh, const NamedSharding& spec) {
  std::vector<bool> used(mesh.num_axes(), false);
  for (const auto& d : spec.dims())
    for (const AxisRef& r : d.axes) used[r.axis] = true;
  std::vector<AxisRef> unreduced;
  for (int64_t a = 0; a < mesh.num_axes(); ++a)
    if (!used[a] && (rng() % 3 != 0)) unreduced.push_back(AxisRef{a, 1, 0});
  return NamedSharding::Create(mesh, spec.dims(), {}, unreduced).value();
}

Layout Retyped(const Layout& l, DType dtype, std::optional<ReduceOp> op) {
  std::vector<DimGrid> dims;
  for (int64_t d = 0; d < l.rank(); ++d) dims.push_back(l.dim(d));
  std::vector<DeviceTile> placement;
  for (int64_t dev : l.devices()) placement.push_back({dev, l.TileOf(dev), l.PartOf(dev)});
  Reduction r = l.reduction();
  if (op && l.partial()) r.op = *op;
  return Layout::Create(l.shape(), dtype, std::move(dims), std::move(placement), r).value();
}

std::optional<PartialPair> DrawPartialPair(std::mt19937_64& rng, bool partial_target) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  const Mesh mesh = RandomNamedMesh(rng);
  const std::vector<int64_t> shape = DrawShape(rng, mesh);
  const size_t rank = shape.size();
  const DType dtype = rng() % 2 ? DType::kF32 : DType::kS32;
  const NamedSharding s0 = RandomSpec(rng, mesh, rank), t = RandomSpec(rng, mesh, rank);
  const NamedSharding s = WithUnreducedAxes(rng, mesh, s0);
  Layout source = s.ToLayout(shape, dtype).value();
  const ReduceOp op = ops[rng() % 4];
  if (op != ReduceOp::kSum && source.partial()) source = Retyped(source, dtype, op);
  if (!source.partial()) return std::nullopt;
  Layout target = t.ToLayout(shape, dtype).value();
  if (partial_target) {
    const bool plain_source = rng() % 3 == 0;
    if (plain_source) source = s0.ToLayout(shape, dtype).value();
    target = WithUnreducedAxes(rng, mesh, t).ToLayout(shape, dtype).value();
    const ReduceOp top = rng() % 2 ? op : ops[rng() % 4];
    if (top != ReduceOp::kSum && target.partial()) target = Retyped(target, dtype, top);
    if (!target.partial() || target == source) return std::nullopt;
  }
  const std::string text = "--shape " + ShapeText(shape) + " --mesh '" + mesh.ToString() + "' --from '" +
                           Text(PrintLayout(source, Notation::kDTensor, mesh)) + "' --to '" +
                           Text(PrintLayout(target, Notation::kJax, mesh)) + "'";
  return PartialPair{mesh, shape, source, target, text};
}

std::optional<PartialPair> DrawSamePartsPair(std::mt19937_64& rng) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  const Mesh mesh = RandomNamedMesh(rng);
  const std::vector<int64_t> shape = DrawShape(rng, mesh);
  const size_t rank = shape.size();
  const DType dtype = rng() % 2 ? DType::kF32 : DType::kS32;
  const NamedSharding s = WithUnreducedAxes(rng, mesh, RandomSpec(rng, mesh, rank));
  if (s.unreduced().empty()) return std::nullopt;
  std::vector<NamedSharding::Dim> dims = RandomSpec(rng, mesh, rank).dims();
  for (NamedSharding::Dim& d : dims)
    std::erase_if(d.axes, [&](const AxisRef& r) {
      return std::any_of(s.unreduced().begin(), s.unreduced().end(), [&](const AxisRef& u) { return u.axis == r.axis; });
    });
  Result<NamedSharding> t = NamedSharding::Create(mesh, dims, {}, s.unreduced());
  if (!t.ok()) return std::nullopt;
  const ReduceOp op = ops[rng() % 4];
  Layout source = Retyped(s.ToLayout(shape, dtype).value(), dtype, op);
  Layout target = Retyped(t->ToLayout(shape, dtype).value(), dtype, op);
  if (!source.partial() || source == target) return std::nullopt;
  const std::string text = "--shape " + ShapeText(shape) + " --mesh '" + mesh.ToString() + "' --from '" +
                           Text(PrintLayout(source, Notation::kDTensor, mesh)) + "' --to '" +
                           Text(PrintLayout(target, Notation::kDTensor, mesh)) + "'";
  return PartialPair{mesh, shape, source, target, text};
}

std::optional<PartialPair> DrawFewerPartsPair(std::mt19937_64& rng) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
  const Mesh mesh = RandomNamedMesh(rng);
  const std::vector<int64_t> shape = DrawShape(rng, mesh);
  const size_t rank = shape.size();
  const DType dtype = rng() % 2 ? DType::kF32 : DType::kS32;
  const NamedSharding s = WithUnreducedAxes(rng, mesh, RandomSpec(rng, mesh, rank));
  if (s.unreduced().size() < 2) return std::nullopt;
  // A random nonempty strict subset kept; the others dropped.
  std::vector<AxisRef> kept, dropped;
  for (const AxisRef& u : s.unreduced()) (rng() % 2 ? kept : dropped).push_back(u);
  if (kept.empty() || dropped.empty()) return std::nullopt;
  auto is_kept = [&](const AxisRef& r) {
    return std::any_of(kept.begin(), kept.end(), [&](const AxisRef& u) { return u.axis == r.axis; });
  };
  auto is_dropped = [&](const AxisRef& r) {
    return std::any_of(dropped.begin(), dropped.end(), [&](const AxisRef& u) { return u.axis == r.axis; });
  };
  std::vector<NamedSharding::Dim> dims = RandomSpec(rng, mesh, rank).dims();
  for (NamedSharding::Dim& d : dims) std::erase_if(d.axes, is_kept);
  // Mostly, the dropped axes on the end of one dim (a reduce-scatter onto it, last).
  if (rng() % 4 != 0) {
    for (NamedSharding::Dim& d : dims) std::erase_if(d.axes, is_dropped);
    std::shuffle(dropped.begin(), dropped.end(), rng);
    NamedSharding::Dim& d = dims[rng() % rank];
    d.axes.insert(d.axes.end(), dropped.begin(), dropped.end());
  }
  Result<NamedSharding> t = NamedSharding::Create(mesh, dims, {}, kept);
  if (!t.ok()) return std::nullopt;
  const ReduceOp op = ops[rng() % 3];
  Layout source = Retyped(s.ToLayout(shape, dtype).value(), dtype, op);
  Result<Layout> target_layout = t->ToLayout(shape, dtype);
  if (!target_layout.ok()) return std::nullopt;
  Layout target = Retyped(*target_layout, dtype, op);
  // (Axes of size 1 hold no parts: the drop must merge some.)
  if (!target.partial() || source.reduction().parts <= target.reduction().parts) return std::nullopt;
  const std::string text = "--shape " + ShapeText(shape) + " --mesh '" + mesh.ToString() + "' --from '" +
                           Text(PrintLayout(source, Notation::kDTensor, mesh)) + "' --to '" +
                           Text(PrintLayout(target, Notation::kDTensor, mesh)) + "'";
  return PartialPair{mesh, shape, source, target, text};
}

}  // namespace reshard::testing
