#include "audit/replica_groups.h"

#include <map>
#include <string>

#include "reshard/tile_assignment.h"

namespace reshard::audit {
namespace {

constexpr int64_t kMaxDevices = int64_t{1} << 24;

Status Bad(const std::string& what, std::string_view text) {
  return Status::InvalidArgument(what + " in '" + std::string(text.substr(0, 200)) + "'");
}

// "[4,2]T(1,0)" or "[8]" (the iota after "<=" or inside device_ids=(...)),
// or an explicit list "0,2,1,3": the device list.
Result<std::vector<int64_t>> IotaOrList(std::string_view text) {
  text = Trim(text);
  if (!text.empty() && text[0] == '[') {
    const size_t close = MatchClose(text, 0);
    if (close == std::string_view::npos) return Bad("unclosed '['", text);
    std::optional<std::vector<int64_t>> dims = ParseIntList(text.substr(1, close - 2));
    if (!dims || dims->empty()) return Bad("bad iota dims", text);
    std::vector<int64_t> perm;
    std::string_view rest = Trim(text.substr(close));
    if (!rest.empty()) {
      if (rest[0] != 'T' || rest.size() < 3 || rest[1] != '(' || rest.back() != ')') return Bad("bad iota transpose", text);
      std::optional<std::vector<int64_t>> p = ParseIntList(rest.substr(2, rest.size() - 3));
      if (!p) return Bad("bad iota transpose", text);
      perm = *p;
    } else {
      for (size_t k = 0; k < dims->size(); ++k) perm.push_back(static_cast<int64_t>(k));
    }
    int64_t n = 1;
    for (int64_t d : *dims) {
      if (d < 1 || n > kMaxDevices / d) return Bad("bad iota size", text);
      n *= d;
    }
    Result<TileAssignment> ta = TileAssignment::Iota({n}, *dims, perm);
    if (!ta.ok()) return Bad(ta.status().message(), text);
    return ta->Devices();
  }
  std::optional<std::vector<int64_t>> ids = ParseIntList(text);
  if (!ids || ids->empty()) return Status::NotSupported("device list form not understood: '" + std::string(text.substr(0, 200)) + "'");
  return *ids;
}

std::string_view Unquote(std::string_view s) {
  s = Trim(s);
  if (s.size() >= 2 && (s.front() == '\'' || s.front() == '"') && s.back() == s.front()) return s.substr(1, s.size() - 2);
  return s;
}

Result<DeviceGroups> MeshGroups(std::string_view mesh_text, std::string_view device_ids, int64_t num_devices) {
  // mesh_text: "mesh['a'=2,'b'=4]" then optionally " {'b'}" when device_ids is absent.
  const size_t open = mesh_text.find('[');
  const size_t close = MatchClose(mesh_text, open);
  if (open == std::string_view::npos || close == std::string_view::npos) return Bad("bad mesh", mesh_text);
  std::vector<std::pair<std::string, int64_t>> axes;
  int64_t n = 1;
  for (std::string_view a : SplitTop(mesh_text.substr(open + 1, close - open - 2))) {
    if (a.empty()) continue;
    const size_t eq = a.rfind('=');
    if (eq == std::string_view::npos) return Bad("bad mesh axis", mesh_text);
    std::optional<std::vector<int64_t>> size = ParseIntList(a.substr(eq + 1));
    if (!size || size->size() != 1 || (*size)[0] < 1 || n > kMaxDevices / (*size)[0]) return Bad("bad mesh axis size", mesh_text);
    n *= (*size)[0];
    axes.emplace_back(std::string(Unquote(a.substr(0, eq))), (*size)[0]);
  }
  std::string_view axes_text = Trim(mesh_text.substr(close));
  std::vector<int64_t> devices;
  if (!Trim(device_ids).empty()) {
    std::string_view d = Trim(device_ids);
    if (d.empty() || d[0] != '(') return Status::NotSupported("device_ids form not understood: '" + std::string(d.substr(0, 200)) + "'");
    const size_t dc = MatchClose(d, 0);
    if (dc == std::string_view::npos) return Bad("unclosed device_ids", d);
    RESHARD_ASSIGN_OR_RETURN(devices, IotaOrList(d.substr(1, dc - 2)));
    axes_text = Trim(d.substr(dc));
  } else {
    for (int64_t k = 0; k < n; ++k) devices.push_back(k);
  }
  if (static_cast<int64_t>(devices.size()) != n) return Bad("device_ids do not match the mesh size", mesh_text);
  if (n != num_devices && num_devices > 0) return Bad("the mesh has " + std::to_string(n) + " devices, the module " + std::to_string(num_devices), mesh_text);
  if (axes_text.empty() || axes_text[0] != '{' || axes_text.back() != '}') return Status::NotSupported("mesh replica groups without an axis list");
  // Listed (sub-)axes: axis index, place value inside the axis (the product of sizes minor to it), size.
  struct Listed { size_t axis; int64_t place; int64_t size; };
  std::vector<Listed> listed;
  for (std::string_view a : SplitTop(axes_text.substr(1, axes_text.size() - 2))) {
    if (a.empty()) continue;
    std::string_view name = a;
    int64_t pre = 1, size = -1;
    // 'b':(2)2
    const size_t colon = a.find(':');
    if (colon != std::string_view::npos && a.find('(', colon) != std::string_view::npos) {
      name = a.substr(0, colon);
      std::string_view sub = Trim(a.substr(colon + 1));
      const size_t pc = sub.find(')');
      if (sub.empty() || sub[0] != '(' || pc == std::string_view::npos) return Bad("bad sub-axis", a);
      std::optional<std::vector<int64_t>> p = ParseIntList(sub.substr(1, pc - 1));
      std::optional<std::vector<int64_t>> s = ParseIntList(sub.substr(pc + 1));
      if (!p || !s || p->size() != 1 || s->size() != 1 || (*p)[0] < 1 || (*s)[0] < 1) return Bad("bad sub-axis", a);
      pre = (*p)[0];
      size = (*s)[0];
    }
    name = Unquote(name);
    size_t ax = axes.size();
    for (size_t k = 0; k < axes.size(); ++k)
      if (axes[k].first == name) ax = k;
    if (ax == axes.size()) return Bad("unknown mesh axis '" + std::string(name) + "'", axes_text);
    const int64_t full = axes[ax].second;
    if (size < 0) size = full;
    if (pre > full || size > full / pre || full % (pre * size) != 0) return Bad("sub-axis does not divide its axis", a);
    listed.push_back({ax, full / (pre * size), size});
  }
  // Group of each mesh position: key = coordinates with the listed digits removed.
  std::map<std::vector<int64_t>, size_t> group_of;
  DeviceGroups groups;
  int64_t group_size = 1;
  for (const Listed& l : listed) group_size *= l.size;
  std::vector<int64_t> coords(axes.size());
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t r = flat;
    for (size_t k = axes.size(); k-- > 0;) {
      coords[k] = r % axes[k].second;
      r /= axes[k].second;
    }
    std::vector<int64_t> key = coords;
    int64_t member = 0;
    for (const Listed& l : listed) {
      const int64_t digit = (coords[l.axis] / l.place) % l.size;
      member = member * l.size + digit;
      key[l.axis] -= digit * l.place;
    }
    auto [it, inserted] = group_of.emplace(key, groups.size());
    if (inserted) groups.emplace_back(static_cast<size_t>(group_size), -1);
    if (groups[it->second][member] != -1) return Bad("sub-axes overlap", axes_text);
    groups[it->second][member] = devices[flat];
  }
  return groups;
}

}  // namespace

Result<DeviceGroups> ParseReplicaGroups(std::string_view text, std::string_view device_ids, int64_t num_devices) {
  text = Trim(text);
  DeviceGroups groups;
  if (text.substr(0, 5) == "mesh[") {
    RESHARD_ASSIGN_OR_RETURN(groups, MeshGroups(text, device_ids, num_devices));
  } else if (!text.empty() && text[0] == '[') {
    const size_t close = MatchClose(text, 0);
    if (close == std::string_view::npos) return Bad("unclosed '['", text);
    std::optional<std::vector<int64_t>> shape = ParseIntList(text.substr(1, close - 2));
    std::string_view rest = Trim(text.substr(close));
    if (!shape || shape->size() != 2 || rest.substr(0, 2) != "<=") return Status::NotSupported("replica_groups form not understood: '" + std::string(text.substr(0, 200)) + "'");
    RESHARD_ASSIGN_OR_RETURN(std::vector<int64_t> ids, IotaOrList(rest.substr(2)));
    const int64_t g = (*shape)[0], k = (*shape)[1];
    if (g < 1 || k < 1 || g > kMaxDevices / k || g * k != static_cast<int64_t>(ids.size())) return Bad("iota groups do not match their device list", text);
    for (int64_t a = 0; a < g; ++a) groups.emplace_back(ids.begin() + a * k, ids.begin() + (a + 1) * k);
  } else if (!text.empty() && text[0] == '{') {
    const size_t close = MatchClose(text, 0);
    if (close != text.size()) return Bad("bad replica_groups", text);
    std::string_view inner = Trim(text.substr(1, text.size() - 2));
    if (!inner.empty()) {
      for (std::string_view grp : SplitTop(inner)) {
        std::optional<std::vector<int64_t>> ids = ParseIntList(grp);
        if (!ids || grp.empty() || grp[0] != '{') return Bad("bad replica group", text);
        groups.push_back(*ids);
      }
    }
  } else {
    return Status::NotSupported("replica_groups form not understood: '" + std::string(text.substr(0, 200)) + "'");
  }
  if (groups.empty()) {
    if (num_devices < 1 || num_devices > kMaxDevices) return Bad("no device count for replica_groups={}", text);
    groups.emplace_back();
    for (int64_t d = 0; d < num_devices; ++d) groups.back().push_back(d);
  }
  return groups;
}

Result<DeviceGroups> ReadReplicaGroups(const HloInstruction& ins, int64_t num_devices) {
  const std::string* rg = ins.Attr("replica_groups");
  if (rg == nullptr) return ParseReplicaGroups("{}", "", num_devices);
  const std::string* ids = ins.Attr("device_ids");
  return ParseReplicaGroups(*rg, ids ? std::string_view(*ids) : std::string_view(), num_devices);
}

Result<std::vector<std::pair<int64_t, int64_t>>> ParseSourceTargetPairs(std::string_view text) {
  text = Trim(text);
  if (text.empty() || text[0] != '{' || MatchClose(text, 0) != text.size()) return Bad("bad source_target_pairs", text);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  std::string_view inner = Trim(text.substr(1, text.size() - 2));
  if (inner.empty()) return pairs;
  for (std::string_view p : SplitTop(inner)) {
    std::optional<std::vector<int64_t>> v = ParseIntList(p);
    if (!v || v->size() != 2 || p.empty() || p[0] != '{' || (*v)[0] < 0 || (*v)[1] < 0) return Bad("bad source-target pair", text);
    pairs.emplace_back((*v)[0], (*v)[1]);
  }
  return pairs;
}

}  // namespace reshard::audit
