#include "reshard/mesh.h"

#include <algorithm>
#include <unordered_set>

#include "layout/checked_math.h"

namespace reshard {

Result<Mesh> Mesh::Create(std::vector<Axis> axes, std::vector<int64_t> device_ids) {
  Mesh m;
  std::unordered_set<std::string> seen;
  for (const Axis& a : axes) {
    if (a.name.empty()) return Status::InvalidArgument("mesh axis with an empty name");
    for (char ch : a.name)
      if (ch == '"' || ch == '\'' || static_cast<unsigned char>(ch) <= ' ')
        return Status::InvalidArgument("mesh axis name '" + a.name + "' holds a quote, space or control character");
    if (!seen.insert(a.name).second) return Status::InvalidArgument("mesh axis '" + a.name + "' appears twice");
    if (a.size < 1) return Status::InvalidArgument("mesh axis '" + a.name + "' has size " + std::to_string(a.size) + "; sizes must be >= 1");
    if (!CheckedMul(m.num_devices_, a.size, &m.num_devices_) || m.num_devices_ > kMaxDevices)
      return Status::InvalidArgument("mesh has more than " + std::to_string(kMaxDevices) + " devices at axis '" + a.name + "'");
  }
  m.axes_ = std::move(axes);
  m.strides_.assign(m.axes_.size(), 1);
  for (int64_t i = static_cast<int64_t>(m.axes_.size()) - 2; i >= 0; --i) m.strides_[i] = m.strides_[i + 1] * m.axes_[i + 1].size;
  if (!device_ids.empty()) {
    if (static_cast<int64_t>(device_ids.size()) != m.num_devices_)
      return Status::InvalidArgument("mesh " + m.ToString() + " has " + std::to_string(m.num_devices_) + " devices but " +
                                     std::to_string(device_ids.size()) + " device ids were given");
    bool iota = true, negative = false;
    for (size_t i = 0; i < device_ids.size(); ++i) {
      negative = negative || device_ids[i] < 0;
      iota = iota && device_ids[i] == static_cast<int64_t>(i);
    }
    if (!iota) {
      // Repeats found by a sorted copy (8 B an id; a hash set costs several
      // times that at millions of devices). Where something is wrong, the
      // list is walked again to name its first bad entry: a negative id,
      // or one that repeats an earlier entry.
      std::vector<int64_t> sorted = device_ids;
      std::sort(sorted.begin(), sorted.end());
      if (negative || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
        std::vector<int64_t>().swap(sorted);
        std::unordered_set<int64_t> ids;
        for (size_t i = 0; i < device_ids.size(); ++i) {
          if (device_ids[i] < 0)
            return Status::InvalidArgument("device id " + std::to_string(device_ids[i]) + " (entry " + std::to_string(i + 1) + ") is negative");
          if (!ids.insert(device_ids[i]).second)
            return Status::InvalidArgument("device id " + std::to_string(device_ids[i]) + " is repeated (entry " + std::to_string(i + 1) + ")");
        }
      }
      m.device_ids_ = std::move(device_ids);
    }
  }
  return m;
}

std::vector<int64_t> Mesh::DeviceIds() const {
  std::vector<int64_t> ids(num_devices_);
  for (int64_t i = 0; i < num_devices_; ++i) ids[i] = device(i);
  return ids;
}

bool Mesh::HasDevices(std::span<const int64_t> ascending) const {
  const int64_t n = static_cast<int64_t>(ascending.size());
  if (n != num_devices_) return false;
  if (is_iota()) return n == 0 || (ascending.front() == 0 && ascending.back() == n - 1);
  std::vector<int64_t> ids = device_ids_;
  std::sort(ids.begin(), ids.end());
  return std::equal(ids.begin(), ids.end(), ascending.begin());
}

MeshPositions::MeshPositions(const Mesh& mesh) : iota_(mesh.is_iota()), num_devices_(mesh.num_devices()) {
  if (iota_) return;
  int64_t max_id = 0;
  for (int64_t p = 0; p < num_devices_; ++p) max_id = std::max(max_id, mesh.device(p));
  if (max_id < 4 * num_devices_ + 64) {
    dense_.assign(static_cast<size_t>(max_id) + 1, -1);
    for (int64_t p = 0; p < num_devices_; ++p) dense_[static_cast<size_t>(mesh.device(p))] = p;
  } else {
    sorted_.reserve(static_cast<size_t>(num_devices_));
    for (int64_t p = 0; p < num_devices_; ++p) sorted_.emplace_back(mesh.device(p), p);
    std::sort(sorted_.begin(), sorted_.end());
  }
}

int64_t MeshPositions::Of(int64_t device) const {
  if (iota_) return device >= 0 && device < num_devices_ ? device : -1;
  if (!dense_.empty() || sorted_.empty())
    return device >= 0 && device < static_cast<int64_t>(dense_.size()) ? dense_[static_cast<size_t>(device)] : -1;
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), std::make_pair(device, int64_t{-1}));
  return it != sorted_.end() && it->first == device ? it->second : -1;
}

std::optional<int64_t> Mesh::AxisIndex(std::string_view name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == name) return static_cast<int64_t>(i);
  return std::nullopt;
}

int64_t Mesh::Coordinate(int64_t flat, int64_t axis) const { return (flat / strides_[axis]) % axes_[axis].size; }

int64_t Mesh::GroupSize(const std::vector<int32_t>& axes) const {
  int64_t k = 1;
  for (int32_t a : axes) k *= axes_[a].size;
  return k;
}

int64_t Mesh::GroupOf(int64_t flat, const std::vector<int32_t>& axes) const {
  for (int32_t a : axes) flat -= Coordinate(flat, a) * strides_[a];
  return flat;
}

int64_t Mesh::MemberIndex(int64_t flat, const std::vector<int32_t>& axes) const {
  int64_t k = 0;
  for (int32_t a : axes) k = k * axes_[a].size + Coordinate(flat, a);
  return k;
}

std::vector<int64_t> Mesh::GroupMembers(int64_t flat, const std::vector<int32_t>& axes) const {
  std::vector<int64_t> members = {GroupOf(flat, axes)};
  members.reserve(GroupSize(axes));
  for (int32_t a : axes) {
    // Row-major: each axis listed later varies faster.
    const size_t before = members.size();
    std::vector<int64_t> next;
    next.reserve(before * axes_[a].size);
    for (int64_t m : members)
      for (int64_t c = 0; c < axes_[a].size; ++c) next.push_back(m + c * strides_[a]);
    members = std::move(next);
  }
  return members;
}

std::string Mesh::ToString() const {
  std::string s;
  for (size_t i = 0; i < axes_.size(); ++i) s += (i ? "," : "") + axes_[i].name + "=" + std::to_string(axes_[i].size);
  if (!device_ids_.empty()) {
    s += " devices=[";
    for (size_t i = 0; i < device_ids_.size(); ++i) s += (i ? "," : "") + std::to_string(device_ids_[i]);
    s += "]";
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Mesh& m) { return os << m.ToString(); }

}  // namespace reshard
