// HloSharding: XLA's sharding of one array, as in HLO text.
//
//   {replicated}                               every device holds everything
//   {maximal device=3}                         device 3 holds everything
//   {devices=[2,2]0,2,1,3}                     tiled, explicit device list (V1)
//   {devices=[2,1,4]<=[4,2]T(1,0)}             tiled, iota device list (V2)
//   {devices=[4,1,2]<=[8] last_tile_dim_replicate}   last tile dim replicates
//
// Tiled dims split with XLA's rule: c = ceil(n/k), shard i covers
// [min(i*c, n), min((i+1)*c, n)). Manual, unreduced and tuple shardings are
// refused as not supported. The parser of this text is ParseHloSharding
// (hlo_text.h, notation library). Immutable value; thread-safe.
#ifndef RESHARD_HLO_SHARDING_H_
#define RESHARD_HLO_SHARDING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "reshard/dtype.h"
#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/status.h"
#include "reshard/tile_assignment.h"

namespace reshard {

class HloSharding {
 public:
  struct Replicated { friend bool operator==(const Replicated&, const Replicated&) = default; };
  struct Maximal {
    int64_t device = 0;
    friend bool operator==(const Maximal&, const Maximal&) = default;
  };
  struct Tiled {
    TileAssignment tiles;             // rank dims, plus one replication dim if replicate_last
    bool replicate_last = false;
    friend bool operator==(const Tiled&, const Tiled&) = default;
  };

  static HloSharding Replicate() { return HloSharding(Replicated{}); }
  static HloSharding AssignDevice(int64_t device) { return HloSharding(Maximal{device}); }
  // REQUIRES: tiles.dims() has at least one dim more than 0 when replicate_last.
  static HloSharding Tile(TileAssignment tiles, bool replicate_last) { return HloSharding(Tiled{std::move(tiles), replicate_last}); }

  const std::variant<Replicated, Maximal, Tiled>& kind() const { return kind_; }

  // The layout of an array of `shape`. `mesh`, when given, fixes the device
  // set: tiled ids must be its devices and the tile count its size. Without a
  // mesh, {replicated} has no device set and is refused.
  Result<Layout> ToLayout(const std::vector<int64_t>& shape, DType dtype, const std::optional<Mesh>& mesh) const;

  std::string ToString() const;  // the HLO text, as XLA prints it
  friend bool operator==(const HloSharding&, const HloSharding&) = default;

 private:
  explicit HloSharding(std::variant<Replicated, Maximal, Tiled> k) : kind_(std::move(k)) {}
  std::variant<Replicated, Maximal, Tiled> kind_;
};

}  // namespace reshard

#endif  // RESHARD_HLO_SHARDING_H_
