// TileAssignment: the N-d array of device ids behind an XLA tiled sharding.
//
// Stored compactly as XLA's TileAssignment does: either an explicit id list
// (V1, "{devices=[2,2]0,2,1,3}") or an iota, arange(prod).reshape(reshape_dims)
// .transpose(perm).reshape(dims) (V2, "[2,1,4]<=[4,2]T(1,0)"), expanded lazily.
// Iotas are canonicalized at creation as XLA does (size-1 reshape dims dropped,
// runs of consecutive perm entries merged), so == compares the canonical text.
// Immutable value; thread-safe.
#ifndef RESHARD_TILE_ASSIGNMENT_H_
#define RESHARD_TILE_ASSIGNMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "reshard/status.h"

namespace reshard {

class TileAssignment {
 public:
  // REQUIRES nothing; validates that the list has prod(dims) distinct, non-negative ids.
  static Result<TileAssignment> Explicit(std::vector<int64_t> dims, std::vector<int64_t> devices);
  // Validates prod(dims) == prod(reshape_dims) and that perm is a permutation.
  // Example: Iota({2,1,4}, {4,2}, {1,0}) holds devices [[[0,2,4,6]],[[1,3,5,7]]].
  static Result<TileAssignment> Iota(std::vector<int64_t> dims, std::vector<int64_t> reshape_dims,
                                     std::vector<int64_t> perm);

  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t num_devices() const { return num_devices_; }
  bool is_iota() const { return explicit_.empty() && num_devices_ > 0; }
  const std::vector<int64_t>& reshape_dims() const { return reshape_dims_; }
  const std::vector<int64_t>& perm() const { return perm_; }
  // Device at row-major position `flat` of dims(). REQUIRES: 0 <= flat < num_devices().
  int64_t device(int64_t flat) const;
  std::vector<int64_t> Devices() const;

  // "[2,1,4]<=[4,2]T(1,0)" or "[2,2]0,2,1,3" (XLA's text after "devices=").
  std::string ToString() const;
  friend bool operator==(const TileAssignment&, const TileAssignment&) = default;

 private:
  TileAssignment() = default;
  std::vector<int64_t> dims_;
  int64_t num_devices_ = 0;
  std::vector<int64_t> explicit_;  // V1; empty for iota
  std::vector<int64_t> reshape_dims_, perm_;
  std::vector<int64_t> perm_strides_;  // stride in the arange of each transposed dim
};

}  // namespace reshard

#endif  // RESHARD_TILE_ASSIGNMENT_H_
