// Mesh: named axes with sizes over a list of device ids.
//
// The device at mesh coordinates (c0, c1, ...) is device_ids[row-major index].
// The id list is kept iota-compact (ids 0..n-1 are stored as a count) so that
// meshes of 10^4 devices stay cheap. A mesh with no axes has one device.
// Invariants (checked by Create): axis names are unique, non-empty and free of
// quotes, spaces and control characters, sizes
// are >= 1, there are at most kMaxDevices devices, ids are distinct and non-negative.
// Immutable value; thread-safe.
#ifndef RESHARD_MESH_H_
#define RESHARD_MESH_H_

#include <cstdint>
#include <optional>
#include <span>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/status.h"

namespace reshard {

// The most devices a mesh or tile assignment may have (2^24).
inline constexpr int64_t kMaxDevices = int64_t{1} << 24;

class Mesh {
 public:
  struct Axis {
    std::string name;
    int64_t size = 1;
    friend bool operator==(const Axis&, const Axis&) = default;
  };

  // `device_ids` empty means iota (0..n-1). Ids equal to iota are stored as iota.
  // Example: Create({{"x",4},{"y",2}}) is the mesh where device 2x+y sits at (x, y).
  static Result<Mesh> Create(std::vector<Axis> axes, std::vector<int64_t> device_ids = {});

  const std::vector<Axis>& axes() const { return axes_; }
  int64_t num_axes() const { return static_cast<int64_t>(axes_.size()); }
  int64_t num_devices() const { return num_devices_; }
  bool is_iota() const { return device_ids_.empty(); }
  // REQUIRES: 0 <= flat < num_devices().
  int64_t device(int64_t flat) const { return device_ids_.empty() ? flat : device_ids_[flat]; }
  std::vector<int64_t> DeviceIds() const;
  // Whether the mesh's devices are exactly `ascending` (sorted, distinct
  // ids, as Layout::devices() lists them); no copy for an iota mesh.
  bool HasDevices(std::span<const int64_t> ascending) const;
  std::optional<int64_t> AxisIndex(std::string_view name) const;
  // Mesh coordinate of the device at row-major position `flat` along `axis`.
  int64_t Coordinate(int64_t flat, int64_t axis) const;
  // Positions between neighbours along `axis` (row-major).
  int64_t Stride(int64_t axis) const { return strides_[axis]; }

  // Groups over a list of axes: the positions that differ only on `axes`
  // form a group (the collectives of a plan step run within them). A
  // member's index is row-major over `axes` in the order listed; groups are
  // named by their first position (every group axis at coordinate 0). The
  // one place this arithmetic lives: planner, emitters, simulator and
  // executors all call it. REQUIRES: distinct axes in [0, num_axes()).
  int64_t GroupSize(const std::vector<int32_t>& axes) const;
  int64_t GroupOf(int64_t flat, const std::vector<int32_t>& axes) const;
  int64_t MemberIndex(int64_t flat, const std::vector<int32_t>& axes) const;
  // The group's positions in member order.
  std::vector<int64_t> GroupMembers(int64_t flat, const std::vector<int32_t>& axes) const;

  // "x=4,y=2", with " devices=[3,2,1,0]" appended when not iota.
  std::string ToString() const;

  friend bool operator==(const Mesh&, const Mesh&) = default;

 private:
  Mesh() = default;
  std::vector<Axis> axes_;
  std::vector<int64_t> strides_;     // row-major strides of the axes
  std::vector<int64_t> device_ids_;  // empty: iota
  int64_t num_devices_ = 1;
};

std::ostream& operator<<(std::ostream& os, const Mesh& m);

// Device id -> row-major mesh position: the inverse of Mesh::device(), built
// in this one place (the step lowering, the rank runner and the simulator
// look positions up by id). Lookups are O(1) where ids are dense (iota
// included) and O(log n) otherwise. Immutable; thread-safe.
class MeshPositions {
 public:
  explicit MeshPositions(const Mesh& mesh);
  // The position of `device`, or -1 when it is not on the mesh.
  int64_t Of(int64_t device) const;

 private:
  bool iota_ = true;
  int64_t num_devices_ = 0;
  std::vector<int64_t> dense_;                        // id -> position (-1: none), ids below 4n + 64
  std::vector<std::pair<int64_t, int64_t>> sorted_;   // (id, position), when ids are sparse
};

}  // namespace reshard

#endif  // RESHARD_MESH_H_
