// Reading a state as a layout (interpretation.h).
#include "audit/interpretation.h"

#include <algorithm>
#include <memory>

namespace reshard::audit {

namespace {

// Interpret() where each local dim steps along at most one global dim.
std::optional<Interpretation> InterpretModes(const ValueState& s) {
  const int64_t rank = s.rank(), lrank = s.local_rank();
  struct Entry { int32_t g; int64_t stride, extent; };
  std::vector<Entry> entries;
  for (int64_t d = 0; d < lrank; ++d) {
    const auto& modes = s.dims[d];
    if (modes.empty()) { entries.push_back({-1, 0, 1}); continue; }
    if (modes.size() != 1) return std::nullopt;
    const Mode& m = modes[0];
    if (m.dim < 0 || m.stride <= 0 || m.valid != m.extent) return std::nullopt;
    entries.push_back({m.dim, m.stride, m.extent});
  }
  // A global dim split into shards of one element has no mode left: it is held by a
  // local dim of extent 1 (no modes), the one at its own position when the ranks
  // agree, else the empty dims in order.
  std::vector<int64_t> unheld, empty;
  for (int64_t g = 0; g < rank; ++g)
    if (s.global_shape[g] > 1 && std::none_of(entries.begin(), entries.end(), [&](const Entry& e) { return e.g == g; }))
      unheld.push_back(g);
  for (int64_t d = 0; d < lrank; ++d)
    if (entries[d].g < 0) empty.push_back(d);
  if (!unheld.empty()) {
    if (lrank == rank && std::all_of(unheld.begin(), unheld.end(), [&](int64_t g) { return entries[g].g < 0; })) {
      for (int64_t g : unheld) entries[g] = {static_cast<int32_t>(g), 1, 1};
    } else if (unheld.size() == empty.size()) {
      for (size_t k = 0; k < unheld.size(); ++k) entries[empty[k]] = {static_cast<int32_t>(unheld[k]), 1, 1};
    }
  }
  Interpretation in;
  in.shape.assign(static_cast<size_t>(lrank), 1);
  in.signature.assign(static_cast<size_t>(lrank), {-1, 0, 1});
  in.local_shape.assign(static_cast<size_t>(lrank), 1);
  in.offsets.assign(static_cast<size_t>(s.devices * lrank), 0);
  for (int64_t d = 0; d < lrank; ++d) in.local_shape[d] = entries[d].extent;
  for (int64_t g = 0; g < rank; ++g) {
    std::vector<int64_t> ds;
    for (int64_t d = 0; d < lrank; ++d)
      if (entries[d].g == g) ds.push_back(d);
    const int64_t extent = s.global_shape[g];
    if (ds.empty()) {
      if (extent == 1) continue;
      // No local dim steps along g: the devices hold one index of it, the
      // same on all (a layer a loop's counter picks out of stacked weights),
      // so the value is the array at that index. That index names the array.
      const int64_t at = s.Offset(0, g);
      for (int64_t p = 0; p < s.devices; ++p)
        if (s.Offset(p, g) != at || at < 0) return std::nullopt;
      in.signature.push_back({-3, g, at});
      continue;
    }
    std::sort(ds.begin(), ds.end(), [&](int64_t a, int64_t b) { return entries[a].stride > entries[b].stride; });
    if (entries[ds.back()].stride != 1) return std::nullopt;
    for (size_t k = 0; k < ds.size(); ++k) {
      const Entry& e = entries[ds[k]];
      int64_t size;
      if (k == 0) {
        if (extent % e.stride != 0) return std::nullopt;
        size = extent / e.stride;
      } else {
        const int64_t prev = entries[ds[k - 1]].stride;
        if (prev == e.stride || prev % e.stride != 0) return std::nullopt;
        size = prev / e.stride;
        if (e.extent > size) return std::nullopt;
      }
      in.shape[ds[k]] = size;
      in.signature[ds[k]] = {g, e.stride, size};
    }
    for (int64_t p = 0; p < s.devices; ++p) {
      int64_t r = s.Offset(p, g);
      if (r < 0) return std::nullopt;
      for (size_t k = 0; k < ds.size(); ++k) {
        const Entry& e = entries[ds[k]];
        const int64_t y = r / e.stride;
        r -= y * e.stride;
        if (k > 0 && y + e.extent > in.shape[ds[k]]) return std::nullopt;
        in.offsets[p * lrank + ds[k]] = y;
      }
      if (r != 0) return std::nullopt;
    }
  }
  // The state's own array: local dim d steps along global dim d, or holds its only
  // element (a dim of extent 1 has no mode once normalized).
  in.identity = lrank == rank;
  for (int64_t d = 0; d < lrank && in.identity; ++d)
    in.identity = (entries[d].g == d && entries[d].stride == 1 && in.shape[d] == s.global_shape[d]) ||
                  (entries[d].g < 0 && s.global_shape[d] == 1);
  return in;
}

}  // namespace

std::optional<Interpretation> Interpret(const ValueState& s) {
  if (std::optional<Interpretation> in = InterpretModes(s)) return in;
  // Every device holds the whole array, in the same order: whatever view of it the
  // local buffer is (dims merged by a reshape), it is that view, replicated.
  if (!HoldsWholeArray(s)) return std::nullopt;
  Interpretation in;
  in.shape = in.local_shape = s.LocalShape();
  for (int64_t e : in.shape) in.signature.push_back({-2, 0, e});
  in.offsets.assign(static_cast<size_t>(s.devices * s.local_rank()), 0);
  return in;
}

Result<Layout> ToLayout(const Interpretation& in, DType dtype) {
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  const int64_t devices = rank == 0 ? 0 : static_cast<int64_t>(in.offsets.size()) / rank;
  if (rank == 0) return Status::NotSupported("rank-0 values are not resharded");
  std::vector<DimGrid> grids;
  std::vector<int64_t> tiles(static_cast<size_t>(rank));
  std::vector<std::vector<int64_t>> tile_of(static_cast<size_t>(devices), std::vector<int64_t>(static_cast<size_t>(rank)));
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t e = in.local_shape[d], n = in.shape[d];
    if (e < 1) return Status::NotSupported("an empty local dim");
    int64_t t_max = 0;
    for (int64_t p = 0; p < devices; ++p) {
      const int64_t y = in.offsets[p * rank + d];
      if (y % e != 0) return Status::NotSupported("a shard that does not start at a multiple of its size");
      tile_of[p][d] = y / e;
      t_max = std::max(t_max, y / e);
    }
    const int64_t t = t_max + 1;
    if (t > devices) return Status::NotSupported("more shards than devices");
    if (MulWithinLimit(t, e).value_or(kStateLimit) < n) return Status::NotSupported("shards that do not cover the array");
    std::vector<bool> held(static_cast<size_t>(t), false);
    for (int64_t p = 0; p < devices; ++p) held[tile_of[p][d]] = true;
    std::vector<int64_t> cuts;
    for (int64_t k = 0; k <= t; ++k) {
      const int64_t at = std::min(MulWithinLimit(k, e).value_or(kStateLimit), n);
      if (k < t && !held[k] && at < n) return Status::NotSupported("a shard no device holds");
      cuts.push_back(at);
    }
    grids.push_back(DimGrid::FromCuts(std::move(cuts)));
    tiles[d] = t;
  }
  std::vector<DeviceTile> placement;
  for (int64_t p = 0; p < devices; ++p) {
    int64_t linear = 0;
    for (int64_t d = 0; d < rank; ++d) linear = linear * tiles[d] + tile_of[p][d];
    placement.push_back({p, linear});
  }
  return Layout::Create(in.shape, dtype, std::move(grids), std::move(placement));
}

ValueState RebaseState(const Interpretation& in, int64_t devices) {
  ValueState s;
  s.global_shape = in.shape;
  s.devices = devices;
  for (size_t d = 0; d < in.shape.size(); ++d)
    s.dims.push_back({Mode{in.local_shape[d], static_cast<int32_t>(d), 1, in.local_shape[d]}});
  s.offsets = std::make_shared<std::vector<int64_t>>(in.offsets);
  NormalizeModes(s);
  return s;
}

}  // namespace reshard::audit
