#include "reshard/tile_assignment.h"

#include <algorithm>
#include <unordered_set>

#include "layout/checked_math.h"
#include "layout/int_list.h"
#include "reshard/mesh.h"

namespace reshard {
namespace {

Result<int64_t> Product(const std::vector<int64_t>& dims, const char* what) {
  int64_t p = 1;
  for (int64_t d : dims) {
    if (d < 1) return Status::InvalidArgument(std::string(what) + " must be >= 1, got " + std::to_string(d));
    if (!CheckedMul(p, d, &p)) return Status::InvalidArgument(std::string(what) + " product overflows int64");
    if (p > kMaxDevices) return Status::InvalidArgument(std::string(what) + " hold more than " + std::to_string(kMaxDevices) + " devices");
  }
  return p;
}

}  // namespace

Result<TileAssignment> TileAssignment::Explicit(std::vector<int64_t> dims, std::vector<int64_t> devices) {
  RESHARD_ASSIGN_OR_RETURN(int64_t n, Product(dims, "tile dimensions"));
  if (n != static_cast<int64_t>(devices.size()))
    return Status::InvalidArgument("tile dimensions [" + JoinInts(dims) + "] need " + std::to_string(n) + " devices but " +
                                   std::to_string(devices.size()) + " are listed");
  std::unordered_set<int64_t> seen;
  for (int64_t d : devices) {
    if (d < 0) return Status::InvalidArgument("device id " + std::to_string(d) + " is negative");
    if (!seen.insert(d).second) return Status::InvalidArgument("device id " + std::to_string(d) + " is repeated");
  }
  TileAssignment t;
  t.dims_ = std::move(dims);
  t.num_devices_ = n;
  t.explicit_ = std::move(devices);
  return t;
}

Result<TileAssignment> TileAssignment::Iota(std::vector<int64_t> dims, std::vector<int64_t> reshape_dims,
                                            std::vector<int64_t> perm) {
  RESHARD_ASSIGN_OR_RETURN(int64_t n, Product(dims, "tile dimensions"));
  RESHARD_ASSIGN_OR_RETURN(int64_t m, Product(reshape_dims, "iota reshape dimensions"));
  if (n != m)
    return Status::InvalidArgument("tile dimensions [" + JoinInts(dims) + "] hold " + std::to_string(n) +
                                   " devices but the iota [" + JoinInts(reshape_dims) + "] has " + std::to_string(m));
  if (perm.empty()) for (size_t i = 0; i < reshape_dims.size(); ++i) perm.push_back(static_cast<int64_t>(i));
  if (perm.size() != reshape_dims.size())
    return Status::InvalidArgument("transpose T(" + JoinInts(perm) + ") does not match the " + std::to_string(reshape_dims.size()) + " iota dimensions");
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != static_cast<int64_t>(i)) return Status::InvalidArgument("transpose T(" + JoinInts(perm) + ") is not a permutation");

  // Canonicalize: drop size-1 dims, then merge runs perm[i+1] == perm[i]+1.
  std::vector<int64_t> keep_rank(reshape_dims.size(), -1);
  std::vector<int64_t> rd;
  for (size_t i = 0; i < reshape_dims.size(); ++i)
    if (reshape_dims[i] > 1) { keep_rank[i] = static_cast<int64_t>(rd.size()); rd.push_back(reshape_dims[i]); }
  std::vector<int64_t> p;
  for (int64_t x : perm) if (keep_rank[x] >= 0) p.push_back(keep_rank[x]);
  // Merge: a transposed run of consecutive source dims acts as one dim.
  std::vector<std::vector<int64_t>> runs;  // runs of source dims, in transposed order
  for (int64_t x : p) {
    if (!runs.empty() && runs.back().back() + 1 == x) runs.back().push_back(x);
    else runs.push_back({x});
  }
  // New source dims are the runs ordered by their first source dim.
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return runs[a][0] < runs[b][0]; });
  std::vector<int64_t> new_rank(runs.size());
  TileAssignment t;
  for (size_t r = 0; r < order.size(); ++r) {
    new_rank[order[r]] = static_cast<int64_t>(r);
    int64_t size = 1;
    for (int64_t x : runs[order[r]]) size *= rd[x];
    t.reshape_dims_.push_back(size);
  }
  for (size_t i = 0; i < runs.size(); ++i) t.perm_.push_back(new_rank[i]);
  if (t.reshape_dims_.empty()) { t.reshape_dims_ = {n}; t.perm_ = {0}; }
  bool identity = true;
  for (size_t i = 0; i < t.perm_.size(); ++i) identity = identity && t.perm_[i] == static_cast<int64_t>(i);
  if (identity) { t.reshape_dims_ = {n}; t.perm_ = {0}; }
  t.dims_ = std::move(dims);
  t.num_devices_ = n;
  // Stride in the arange of each transposed dim i is the row-major stride of source dim perm[i].
  std::vector<int64_t> src_strides(t.reshape_dims_.size(), 1);
  for (int64_t i = static_cast<int64_t>(src_strides.size()) - 2; i >= 0; --i) src_strides[i] = src_strides[i + 1] * t.reshape_dims_[i + 1];
  for (int64_t x : t.perm_) t.perm_strides_.push_back(src_strides[x]);
  return t;
}

int64_t TileAssignment::device(int64_t flat) const {
  if (!explicit_.empty()) return explicit_[flat];
  int64_t id = 0;
  for (int64_t i = static_cast<int64_t>(perm_.size()) - 1; i >= 0; --i) {
    const int64_t size = reshape_dims_[perm_[i]];
    id += (flat % size) * perm_strides_[i];
    flat /= size;
  }
  return id;
}

std::vector<int64_t> TileAssignment::Devices() const {
  std::vector<int64_t> out(num_devices_);
  for (int64_t i = 0; i < num_devices_; ++i) out[i] = device(i);
  return out;
}

std::string TileAssignment::ToString() const {
  std::string s = "[" + JoinInts(dims_) + "]";
  if (!explicit_.empty()) return s + JoinInts(explicit_);
  s += "<=[" + JoinInts(reshape_dims_) + "]";
  if (perm_.size() > 1) s += "T(" + JoinInts(perm_) + ")";
  return s;
}

}  // namespace reshard
