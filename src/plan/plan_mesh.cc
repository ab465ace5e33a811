#include "plan/plan_mesh.h"

#include <algorithm>
#include <map>
#include <set>

#include "reshard/named_sharding.h"

namespace reshard {
namespace {

// The plan mesh over m, given both layouts as named shardings over it.
std::optional<PlanMesh> TryMesh(const NamedSharding& s, const NamedSharding& t, const Mesh& m, int64_t node_size,
                                bool prime_pieces) {
  // Cut points of each axis, as the product of the factors major to the cut.
  std::vector<std::set<int64_t>> cuts(m.num_axes());
  for (int64_t a = 0; a < m.num_axes(); ++a) cuts[a] = {1, m.axes()[a].size};
  for (const NamedSharding* n : {&s, &t})
    for (const NamedSharding::Dim& d : n->dims())
      for (const AxisRef& r : d.axes) {
        cuts[r.axis].insert(r.pre_size);
        cuts[r.axis].insert(r.pre_size * r.Size(m));
      }
  if (node_size > 1 && m.is_iota()) {
    int64_t stride = 1;  // devices between neighbours along the axis
    for (int64_t a = m.num_axes() - 1; a >= 0; --a) {
      const int64_t n = m.axes()[a].size;
      if (stride < node_size && node_size < stride * n && node_size % stride == 0 && n % (node_size / stride) == 0)
        cuts[a].insert(n / (node_size / stride));
      stride *= n;
    }
  }
  size_t count = 0, primes = 0;
  for (int64_t a = 0; a < m.num_axes(); ++a) {
    const std::vector<int64_t> c(cuts[a].begin(), cuts[a].end());
    for (size_t i = 0; i + 1 < c.size(); ++i) {
      if (c[i + 1] % c[i]) return std::nullopt;  // the cuts do not form a chain of factors
      ++count;
      for (int64_t r = c[i + 1] / c[i], p = 2; r > 1; p = r % p ? p + 1 : p)
        if (r % p == 0) { r /= p; ++primes; }
    }
  }
  if (prime_pieces && primes > count && primes <= static_cast<size_t>(kMaxPrimePieces))
    for (int64_t a = 0; a < m.num_axes(); ++a) {
      const std::vector<int64_t> c(cuts[a].begin(), cuts[a].end());
      for (size_t i = 0; i + 1 < c.size(); ++i)
        for (int64_t at = c[i], r = c[i + 1] / c[i], p = 2; r > 1; p = r % p ? p + 1 : p)
          if (r % p == 0) {
            r /= p;
            at *= p;
            cuts[a].insert(at);
          }
    }
  std::vector<Mesh::Axis> pieces;
  std::vector<AxisRef> origin;
  std::map<std::pair<int64_t, int64_t>, int32_t> piece_at;  // (axis, pre) -> piece
  for (int64_t a = 0; a < m.num_axes(); ++a) {
    const std::vector<int64_t> c(cuts[a].begin(), cuts[a].end());
    for (size_t i = 0; i + 1 < c.size(); ++i) {
      const int64_t size = c[i + 1] / c[i];
      const bool whole = c.size() == 2;
      AxisRef r{a, c[i], whole ? 0 : size};
      piece_at[{a, c[i]}] = static_cast<int32_t>(pieces.size());
      pieces.push_back({r.ToString(m), size});
      origin.push_back(r);
    }
  }
  Result<Mesh> pm = Mesh::Create(pieces, m.is_iota() ? std::vector<int64_t>{} : m.DeviceIds());
  if (!pm.ok()) return std::nullopt;
  auto lists = [&](const NamedSharding& n) {
    AxisLists out;
    for (const NamedSharding::Dim& d : n.dims()) {
      std::vector<int32_t> l;
      for (const AxisRef& r : d.axes)
        for (int64_t pre = r.pre_size; pre < r.pre_size * r.Size(m);) {
          const int32_t p = piece_at.at({r.axis, pre});
          l.push_back(p);
          pre *= pieces[p].size;
        }
      out.push_back(std::move(l));
    }
    return out;
  };
  return PlanMesh{*pm, m, std::move(origin), lists(s), lists(t)};
}

// Axes of the prime factors of n, major first.
std::vector<Mesh::Axis> PrimeAxes(int64_t n) {
  std::vector<Mesh::Axis> axes;
  for (int64_t p = 2; p * p <= n; ++p)
    while (n % p == 0) {
      axes.push_back({"p" + std::to_string(axes.size()), p});
      n /= p;
    }
  if (n > 1) axes.push_back({"p" + std::to_string(axes.size()), n});
  return axes;
}

}  // namespace

std::string PlanMesh::AxesText(const std::vector<int32_t>& p, const char* sep) const {
  std::string out;
  for (size_t i = 0; i < p.size();) {
    // A run of pieces that covers one whole axis of the caller's mesh, in order.
    size_t j = i;
    int64_t pre = 1;
    while (j < p.size() && origin[p[j]].axis == origin[p[i]].axis && origin[p[j]].pre_size == pre) {
      pre *= mesh.axes()[p[j]].size;
      ++j;
      if (pre == original.axes()[origin[p[i]].axis].size) break;
    }
    const bool whole = pre == original.axes()[origin[p[i]].axis].size && origin[p[i]].pre_size == 1;
    if (!out.empty()) out += sep;
    if (whole) {
      out += original.axes()[origin[p[i]].axis].name;
      i = j;
    } else {
      out += mesh.axes()[p[i]].name;
      ++i;
    }
  }
  return out;
}

std::optional<PlanMeshes> FindPlanMesh(const Layout& source, const Layout& target, const std::vector<Mesh>& hints,
                                       int64_t node_size) {
  if (!source.SameDevices(target)) return std::nullopt;
  std::vector<Mesh> candidates;
  for (const Mesh& m : hints)
    if (m.HasDevices(source.devices())) candidates.push_back(m);
  if (Result<Mesh> primes = Mesh::Create(PrimeAxes(static_cast<int64_t>(source.devices().size())), source.devices());
      primes.ok())
    candidates.push_back(*primes);
  // Each plan mesh is cut from the first candidate that gives one; inferring
  // the layouts' named shardings, the costly part, is done once for both.
  std::optional<PlanMesh> coarse, fine;
  for (const Mesh& m : candidates) {
    Result<NamedSharding> s = NamedShardingFromLayout(source, m, /*allow_sub_axes=*/true);
    if (!s.ok()) continue;
    Result<NamedSharding> t = NamedShardingFromLayout(target, m, /*allow_sub_axes=*/true);
    if (!t.ok()) continue;
    if (!coarse) coarse = TryMesh(*s, *t, m, node_size, /*prime_pieces=*/false);
    if (!fine) fine = TryMesh(*s, *t, m, node_size, /*prime_pieces=*/true);
    if (coarse && fine) break;
  }
  if (!coarse) return std::nullopt;
  if (fine && fine->mesh == coarse->mesh) fine.reset();
  return PlanMeshes{std::move(*coarse), std::move(fine)};
}

}  // namespace reshard
