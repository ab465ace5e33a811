#include "audit/derived_layout.h"

#include <algorithm>
#include <utility>

namespace reshard::audit {
namespace {

bool InRange(const std::vector<int64_t>& v, int64_t n) {
  for (int64_t x : v)
    if (x < 0 || x >= n) return false;
  return true;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The result whose dim k is dim picks[k].second of operand picks[k].first.
Interpretation Pick(const std::vector<const Interpretation*>& operands, const std::vector<std::pair<size_t, int64_t>>& picks,
                    int64_t devices) {
  Interpretation out;
  const int64_t rank = static_cast<int64_t>(picks.size());
  out.offsets.assign(static_cast<size_t>(devices * rank), 0);
  out.signature.assign(static_cast<size_t>(rank), {});
  for (int64_t k = 0; k < rank; ++k) {
    const Interpretation& src = *operands[picks[k].first];
    const int64_t sr = static_cast<int64_t>(src.shape.size()), d = picks[k].second;
    out.shape.push_back(src.shape[d]);
    out.local_shape.push_back(src.local_shape[d]);
    for (int64_t p = 0; p < devices; ++p) out.offsets[p * rank + k] = src.offsets[p * sr + d];
  }
  return out;
}

}  // namespace

std::optional<Interpretation> DotLayout(const Interpretation& l, const Interpretation& r, const DotDims& dims, int64_t devices,
                                        bool* partial) {
  const int64_t lr = static_cast<int64_t>(l.shape.size()), rr = static_cast<int64_t>(r.shape.size());
  if (dims.lhs_batch.size() != dims.rhs_batch.size() || dims.lhs_contracting.size() != dims.rhs_contracting.size() ||
      !InRange(dims.lhs_batch, lr) || !InRange(dims.lhs_contracting, lr) || !InRange(dims.rhs_batch, rr) ||
      !InRange(dims.rhs_contracting, rr))
    return std::nullopt;
  *partial = false;
  // Paired dims hold the same range on each device; a contracting dim a device
  // does not hold whole leaves partial sums.
  auto paired = [&](int64_t a, int64_t b, bool contracting) {
    if (l.shape[a] != r.shape[b] || l.local_shape[a] != r.local_shape[b]) return false;
    for (int64_t p = 0; p < devices; ++p) {
      if (l.offsets[p * lr + a] != r.offsets[p * rr + b]) return false;
      if (contracting && (l.offsets[p * lr + a] != 0 || l.local_shape[a] < l.shape[a])) *partial = true;
    }
    return true;
  };
  for (size_t k = 0; k < dims.lhs_batch.size(); ++k)
    if (!paired(dims.lhs_batch[k], dims.rhs_batch[k], false)) return std::nullopt;
  for (size_t k = 0; k < dims.lhs_contracting.size(); ++k)
    if (!paired(dims.lhs_contracting[k], dims.rhs_contracting[k], true)) return std::nullopt;
  std::vector<std::pair<size_t, int64_t>> picks;
  for (int64_t d : dims.lhs_batch) picks.emplace_back(0, d);
  for (int64_t d = 0; d < lr; ++d)
    if (!Contains(dims.lhs_batch, d) && !Contains(dims.lhs_contracting, d)) picks.emplace_back(0, d);
  for (int64_t d = 0; d < rr; ++d)
    if (!Contains(dims.rhs_batch, d) && !Contains(dims.rhs_contracting, d)) picks.emplace_back(1, d);
  return Pick({&l, &r}, picks, devices);
}

std::optional<Interpretation> ReduceLayout(const Interpretation& in, const std::vector<int64_t>& reduced, int64_t devices,
                                           bool* partial) {
  const int64_t r_in = static_cast<int64_t>(in.shape.size());
  if (!InRange(reduced, r_in)) return std::nullopt;
  *partial = false;
  std::vector<std::pair<size_t, int64_t>> picks;
  for (int64_t d = 0; d < r_in; ++d) {
    if (!Contains(reduced, d)) {
      picks.emplace_back(0, d);
      continue;
    }
    for (int64_t p = 0; p < devices; ++p)
      if (in.offsets[p * r_in + d] != 0 || in.local_shape[d] < in.shape[d]) *partial = true;
  }
  if (picks.empty()) {
    // Reduced to a scalar: one element on every device.
    return Interpretation{};
  }
  return Pick({&in}, picks, devices);
}

std::optional<Interpretation> BroadcastLayout(const Interpretation& in, const std::vector<int64_t>& map,
                                              const std::vector<int64_t>& result_dims, int64_t devices) {
  const int64_t rank = static_cast<int64_t>(result_dims.size()), r_in = static_cast<int64_t>(in.shape.size());
  if (static_cast<int64_t>(map.size()) != r_in) return std::nullopt;
  Interpretation out;
  out.shape = result_dims;
  out.local_shape = result_dims;
  out.signature.assign(static_cast<size_t>(rank), {});
  out.offsets.assign(static_cast<size_t>(devices * rank), 0);
  for (int64_t k = 0; k < r_in; ++k) {
    const int64_t d = map[k];
    if (d < 0 || d >= rank || result_dims[d] != in.local_shape[k]) return std::nullopt;
    out.shape[d] = in.shape[k];
    for (int64_t p = 0; p < devices; ++p) out.offsets[p * rank + d] = in.offsets[p * r_in + k];
  }
  return out;
}

}  // namespace reshard::audit
