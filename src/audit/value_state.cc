#include "audit/value_state.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>

namespace reshard::audit {
namespace {

using Offsets = std::vector<int64_t>;


// Saturates at kStateLimit (an extent that large is never a real buffer).
int64_t Product(const std::vector<Mode>& modes) {
  int64_t n = 1;
  for (const Mode& m : modes) n = MulWithinLimit(n, m.extent).value_or(kStateLimit);
  return n;
}

// `a += b` within kStateLimit; false if it would leave it.
bool AddTo(int64_t* a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(*a, b, &r) || r >= kStateLimit || r <= -kStateLimit) return false;
  *a = r;
  return true;
}

// Coalesces adjacent modes and drops those that carry no index.
void Normalize(std::vector<Mode>& modes) {
  bool changed = true;
  while (changed) {
    changed = false;
    // Extent-1 modes carry nothing once the dim has other modes (their offset is in the origin).
    if (modes.size() > 1) {
      for (size_t k = 0; k < modes.size(); ++k) {
        if (modes[k].extent == 1 && modes[k].valid >= 1) {
          modes.erase(modes.begin() + static_cast<std::ptrdiff_t>(k));
          changed = true;
          break;
        }
      }
      if (changed) continue;
    }
    if (modes.size() == 1 && modes[0].dim < 0 && modes[0].extent == 1 && modes[0].valid >= 1) {
      modes.clear();
      break;
    }
    for (size_t k = 0; k + 1 < modes.size(); ++k) {
      Mode& a = modes[k];
      const Mode& b = modes[k + 1];
      if (a.dim != b.dim || b.valid != b.extent) continue;
      if (a.dim >= 0 && MulWithinLimit(b.stride, b.extent) != a.stride) continue;
      const std::optional<int64_t> extent = MulWithinLimit(a.extent, b.extent), valid = MulWithinLimit(a.valid, b.extent);
      if (!extent || !valid) continue;
      a = Mode{*extent, a.dim, b.stride, *valid};
      modes.erase(modes.begin() + static_cast<std::ptrdiff_t>(k) + 1);
      changed = true;
      break;
    }
  }
}


// Splits mode m (extent a*b) into a major mode of extent a and a minor one of extent b.
bool SplitMode(const Mode& m, int64_t a, Mode* major, Mode* minor) {
  if (a <= 0 || m.extent % a != 0) return false;
  const int64_t b = m.extent / a;
  int64_t valid_major = a, valid_minor = b;
  if (m.valid != m.extent) {
    if (m.valid % b != 0) return false;
    valid_major = m.valid / b;
  }
  const std::optional<int64_t> stride = MulWithinLimit(m.stride, b);
  if (!stride) return false;
  *major = Mode{a, m.dim, *stride, valid_major};
  *minor = Mode{b, m.dim, m.stride, valid_minor};
  return true;
}

// Checks that `groups` partition 0..devices-1 into groups of one size; fills
// each device's group and position.
bool GroupIndex(const DeviceGroups& groups, int64_t devices, std::vector<int64_t>* group_of, std::vector<int64_t>* pos_of) {
  if (groups.empty()) return false;
  const size_t k = groups[0].size();
  if (k == 0) return false;
  group_of->assign(static_cast<size_t>(devices), -1);
  pos_of->assign(static_cast<size_t>(devices), -1);
  int64_t seen = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].size() != k) return false;
    for (size_t i = 0; i < k; ++i) {
      const int64_t d = groups[g][i];
      if (d < 0 || d >= devices || (*group_of)[d] != -1) return false;
      (*group_of)[d] = static_cast<int64_t>(g);
      (*pos_of)[d] = static_cast<int64_t>(i);
      ++seen;
    }
  }
  return seen == devices;
}

// Modes (major to minor) that index k parts whose offsets differ from part
// 0's by deltas[j] (k x rank): a mixed-radix split of j, each digit moving
// along at most one global dim. nullopt when the deltas have no such form.
std::optional<std::vector<Mode>> PartModes(const std::vector<std::vector<int64_t>>& deltas) {
  const int64_t k = static_cast<int64_t>(deltas.size());
  const size_t rank = k > 0 ? deltas[0].size() : 0;
  std::vector<Mode> minor_first;
  std::vector<std::vector<int64_t>> steps;  // per mode, its delta vector
  int64_t unit = 1, remaining = k;
  while (remaining > 1) {
    const std::vector<int64_t>& step = deltas[unit];
    int64_t best = 1;
    for (int64_t r = 2; r <= remaining; ++r) {
      if (remaining % r != 0) continue;
      bool linear = true;
      for (int64_t t = 0; t < r && linear; ++t)
        for (size_t g = 0; g < rank && linear; ++g) linear = MulWithinLimit(t, step[g]) == deltas[t * unit][g];
      if (linear) best = r;
    }
    if (best == 1) return std::nullopt;
    int32_t dim = -1;
    for (size_t g = 0; g < rank; ++g) {
      if (step[g] == 0) continue;
      if (dim >= 0) return std::nullopt;
      dim = static_cast<int32_t>(g);
    }
    minor_first.push_back(Mode{best, dim, dim >= 0 ? step[dim] : 0, best});
    steps.push_back(step);
    unit *= best;
    remaining /= best;
  }
  // Every part must be the sum of its digits' steps.
  for (int64_t j = 0; j < k; ++j) {
    std::vector<int64_t> sum(rank, 0);
    int64_t rest = j;
    for (size_t m = 0; m < minor_first.size(); ++m) {
      const int64_t digit = rest % minor_first[m].extent;
      rest /= minor_first[m].extent;
      for (size_t g = 0; g < rank; ++g) {
        const std::optional<int64_t> d = MulWithinLimit(digit, steps[m][g]);
        if (!d || !AddTo(&sum[g], *d)) return std::nullopt;
      }
    }
    if (sum != deltas[j]) return std::nullopt;
  }
  return std::vector<Mode>(minor_first.rbegin(), minor_first.rend());
}

// The modes that index a group's members (member j's offsets relative to
// member 0's), the same for every group.
std::optional<std::vector<Mode>> MemberModes(const Offsets& o, int64_t rank, const DeviceGroups& groups) {
  const size_t k = groups[0].size();
  std::vector<std::vector<int64_t>> deltas(k, std::vector<int64_t>(static_cast<size_t>(rank)));
  for (size_t j = 0; j < k; ++j)
    for (int64_t g = 0; g < rank; ++g) deltas[j][g] = o[groups[0][j] * rank + g] - o[groups[0][0] * rank + g];
  for (const auto& grp : groups)
    for (size_t j = 0; j < k; ++j)
      for (int64_t g = 0; g < rank; ++g)
        if (o[grp[j] * rank + g] - o[grp[0] * rank + g] != deltas[j][g]) return std::nullopt;
  return PartModes(deltas);
}

// Slices a dim's modes to [start, start + n) per device (starts: 1 or `devices` entries).
bool SliceModes(std::vector<Mode>& modes, Offsets& o, int64_t rank, int64_t devices, std::vector<int64_t> starts, int64_t n) {
  const int64_t total = Product(modes);
  auto start_of = [&](int64_t p) { return starts.size() == 1 ? starts[0] : starts[p]; };
  if (n == total) {
    for (int64_t s : starts)
      if (s != 0) return false;
    return true;
  }
  if (n <= 0 || modes.empty()) return false;
  Mode& head = modes[0];
  std::vector<Mode> tail(modes.begin() + 1, modes.end());
  const int64_t inner = Product(tail);
  bool aligned = n % inner == 0;
  for (int64_t s : starts) aligned = aligned && s % inner == 0;
  const int64_t count = starts.size() == 1 ? 1 : devices;
  if (aligned) {
    const int64_t q = n / inner;
    int64_t valid = -1;
    for (int64_t p = 0; p < count; ++p) {
      const int64_t t = start_of(p) / inner;
      const int64_t v = std::clamp(head.valid - t, int64_t{0}, q);
      if (valid >= 0 && v != valid) return false;
      valid = v;
    }
    if (valid <= 0) return false;
    if (head.dim >= 0) {
      for (int64_t p = 0; p < devices; ++p) {
        const std::optional<int64_t> d = MulWithinLimit(start_of(p) / inner, head.stride);
        if (!d || !AddTo(&o[p * rank + head.dim], *d)) return false;
      }
    }
    head.extent = q;
    head.valid = valid;
    return true;
  }
  // Within one index of the head on every device?
  std::vector<int64_t> rest(starts.size());
  for (int64_t p = 0; p < count; ++p) {
    const int64_t s = start_of(p);
    const int64_t h = s / inner;
    if ((s + n - 1) / inner != h || h >= head.valid) return false;
    rest[p] = s - h * inner;
  }
  if (head.dim >= 0) {
    for (int64_t p = 0; p < devices; ++p) {
      const std::optional<int64_t> d = MulWithinLimit(start_of(p) / inner, head.stride);
      if (!d || !AddTo(&o[p * rank + head.dim], *d)) return false;
    }
  }
  modes = std::move(tail);
  return SliceModes(modes, o, rank, devices, std::move(rest), n);
}

// The modes that carry an index (extent > 1), for comparing layouts of parts.
std::vector<std::vector<Mode>> IndexModes(const std::vector<std::vector<Mode>>& dims) {
  std::vector<std::vector<Mode>> out(dims.size());
  for (size_t d = 0; d < dims.size(); ++d)
    for (const Mode& m : dims[d])
      if (m.extent != 1 || m.valid < 1) out[d].push_back(m);
  return out;
}

}  // namespace

std::optional<int64_t> MulWithinLimit(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r >= kStateLimit || r <= -kStateLimit) return std::nullopt;
  return r;
}

void NormalizeModes(ValueState& s) {
  for (auto& m : s.dims) Normalize(m);
}

int64_t ValueState::Extent(size_t d) const { return Product(dims[d]); }

std::vector<int64_t> ValueState::LocalShape() const {
  std::vector<int64_t> out;
  for (size_t d = 0; d < dims.size(); ++d) out.push_back(Extent(d));
  return out;
}

bool ValueState::SameAs(const ValueState& o) const {
  return global_shape == o.global_shape && IndexModes(dims) == IndexModes(o.dims) && devices == o.devices &&
         (offsets == o.offsets || *offsets == *o.offsets);
}

std::string ValueState::ToString() const {
  std::string out = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    out += d ? ", " : "";
    out += "(";
    for (size_t k = 0; k < dims[d].size(); ++k) {
      const Mode& m = dims[d][k];
      out += (k ? " " : "") + std::to_string(m.extent) + "@" + (m.dim >= 0 ? "g" + std::to_string(m.dim) : std::string("r")) +
             "*" + std::to_string(m.stride) + (m.valid != m.extent ? "/" + std::to_string(m.valid) : "");
    }
    out += ")";
  }
  return out + "]";
}

std::optional<ValueState> TiledState(const std::vector<int64_t>& global_shape, const std::vector<int64_t>& local_shape,
                                     const std::vector<std::vector<int64_t>>& tile_of_device, int64_t devices) {
  if (global_shape.size() != local_shape.size() || devices < 1) return std::nullopt;
  ValueState s;
  s.global_shape = global_shape;
  s.devices = devices;
  const int64_t rank = s.rank();
  for (int64_t d = 0; d < rank; ++d) {
    if (local_shape[d] < 1) return std::nullopt;
    s.dims.push_back({Mode{local_shape[d], static_cast<int32_t>(d), 1, local_shape[d]}});
  }
  auto o = std::make_shared<Offsets>(static_cast<size_t>(devices * rank), 0);
  if (!tile_of_device.empty()) {
    if (static_cast<int64_t>(tile_of_device.size()) != devices) return std::nullopt;
    for (int64_t p = 0; p < devices; ++p) {
      if (static_cast<int64_t>(tile_of_device[p].size()) != rank) return std::nullopt;
      for (int64_t d = 0; d < rank; ++d) (*o)[p * rank + d] = tile_of_device[p][d] * local_shape[d];
    }
  }
  s.offsets = std::move(o);
  NormalizeModes(s);
  return s;
}

std::optional<ValueState> Reshape(const ValueState& s, const std::vector<int64_t>& new_dims) {
  int64_t n_old = 1, n_new = 1;
  for (int64_t e : s.LocalShape()) n_old = MulWithinLimit(n_old, e).value_or(kStateLimit);
  for (int64_t e : new_dims) {
    if (e < 0) return std::nullopt;
    n_new = MulWithinLimit(n_new, e).value_or(kStateLimit);
  }
  if (n_old != n_new || n_old == 0 || n_old >= kStateLimit) return std::nullopt;
  std::deque<Mode> queue;
  for (const auto& modes : s.dims)
    for (const Mode& m : modes) queue.push_back(m);
  ValueState r = s;
  r.dims.assign(new_dims.size(), {});
  for (size_t d = 0; d < new_dims.size(); ++d) {
    int64_t rem = new_dims[d];
    while (rem > 1 || (!queue.empty() && queue.front().extent == 1 && new_dims[d] != 1 && !r.dims[d].empty())) {
      if (queue.empty()) return std::nullopt;
      const Mode m = queue.front();
      if (m.extent == 1) {
        r.dims[d].push_back(m);
        queue.pop_front();
        continue;
      }
      if (rem % m.extent == 0) {
        r.dims[d].push_back(m);
        rem /= m.extent;
        queue.pop_front();
        continue;
      }
      if (m.extent % rem == 0) {
        Mode major, minor;
        if (!SplitMode(m, rem, &major, &minor)) return std::nullopt;
        r.dims[d].push_back(major);
        queue.front() = minor;
        rem = 1;
        continue;
      }
      return std::nullopt;
    }
  }
  while (!queue.empty()) {
    if (queue.front().extent != 1) return std::nullopt;
    if (!r.dims.empty()) r.dims.back().push_back(queue.front());
    queue.pop_front();
  }
  NormalizeModes(r);
  return r;
}

std::optional<ValueState> Transpose(const ValueState& s, const std::vector<int64_t>& perm) {
  if (perm.size() != s.dims.size()) return std::nullopt;
  std::vector<bool> seen(perm.size(), false);
  ValueState r = s;
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(perm.size()) || seen[perm[i]]) return std::nullopt;
    seen[perm[i]] = true;
    r.dims[i] = s.dims[perm[i]];
  }
  return r;
}

std::optional<ValueState> Bitcast(const ValueState& s, const HloShape& from, const HloShape& to) {
  if (from.is_tuple || to.is_tuple || ElementBits(from.element_type) != ElementBits(to.element_type)) return std::nullopt;
  if (from.dims != s.LocalShape()) return std::nullopt;
  std::optional<ValueState> phys = Transpose(s, from.MajorToMinor());
  if (!phys) return std::nullopt;
  const std::vector<int64_t> order = to.MajorToMinor();
  std::vector<int64_t> phys_dims;
  for (int64_t d : order) phys_dims.push_back(to.dims[d]);
  std::optional<ValueState> r = Reshape(*phys, phys_dims);
  if (!r) return std::nullopt;
  std::vector<int64_t> inverse(order.size());
  for (size_t pos = 0; pos < order.size(); ++pos) inverse[order[pos]] = static_cast<int64_t>(pos);
  return Transpose(*r, inverse);
}

std::optional<ValueState> SliceDim(const ValueState& s, size_t d, const std::vector<int64_t>& starts, int64_t size) {
  if (d >= s.dims.size() || starts.empty() || (starts.size() != 1 && static_cast<int64_t>(starts.size()) != s.devices))
    return std::nullopt;
  const int64_t extent = s.Extent(d);
  for (int64_t start : starts)
    if (start < 0 || size < 0 || start > extent - size) return std::nullopt;
  ValueState r = s;
  Offsets o = *s.offsets;
  if (!SliceModes(r.dims[d], o, s.rank(), s.devices, starts, size)) return std::nullopt;
  if (o != *s.offsets) r.offsets = std::make_shared<Offsets>(std::move(o));
  NormalizeModes(r);
  return r;
}

std::optional<ValueState> PadHigh(const ValueState& s, size_t d, int64_t high) {
  if (d >= s.dims.size()) return std::nullopt;
  if (high == 0) return s;
  if (high < 0) return SliceDim(s, d, {0}, s.Extent(d) + high);
  ValueState r = s;
  auto& modes = r.dims[d];
  if (modes.empty()) {
    modes.push_back(Mode{1 + high, -1, 0, 1});
  } else if (modes.size() == 1) {
    modes[0].extent += high;
  } else {
    return std::nullopt;
  }
  return r;
}

std::optional<ValueState> Concatenate(const std::vector<const ValueState*>& parts, size_t d) {
  if (parts.empty()) return std::nullopt;
  const ValueState& first = *parts[0];
  if (d >= first.dims.size()) return std::nullopt;
  if (parts.size() == 1) return first;
  const auto modes = IndexModes(first.dims);
  for (const ValueState* p : parts)
    if (IndexModes(p->dims) != modes || p->global_shape != first.global_shape || p->devices != first.devices) return std::nullopt;
  const int64_t rank = first.rank(), k = static_cast<int64_t>(parts.size());
  std::vector<std::vector<int64_t>> deltas(static_cast<size_t>(k), std::vector<int64_t>(static_cast<size_t>(rank)));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t g = 0; g < rank; ++g) deltas[j][g] = parts[j]->Offset(0, g) - first.Offset(0, g);
  for (int64_t j = 1; j < k; ++j)
    for (int64_t p = 0; p < first.devices; ++p)
      for (int64_t g = 0; g < rank; ++g)
        if (parts[j]->Offset(p, g) - first.Offset(p, g) != deltas[j][g]) return std::nullopt;
  std::optional<std::vector<Mode>> part_modes = PartModes(deltas);
  if (!part_modes) return std::nullopt;
  ValueState r = first;
  r.dims[d].insert(r.dims[d].begin(), part_modes->begin(), part_modes->end());
  NormalizeModes(r);
  return r;
}

std::optional<ValueState> AllGather(const ValueState& s, size_t d, const DeviceGroups& groups) {
  if (d >= s.dims.size()) return std::nullopt;
  std::vector<int64_t> group_of, pos_of;
  if (!GroupIndex(groups, s.devices, &group_of, &pos_of)) return std::nullopt;
  std::optional<std::vector<Mode>> member = MemberModes(*s.offsets, s.rank(), groups);
  if (!member) return std::nullopt;
  const int64_t rank = s.rank();
  auto o = std::make_shared<Offsets>(*s.offsets);
  for (int64_t p = 0; p < s.devices; ++p) {
    const int64_t first = groups[group_of[p]][0];
    for (int64_t g = 0; g < rank; ++g) (*o)[p * rank + g] = (*s.offsets)[first * rank + g];
  }
  ValueState r = s;
  r.offsets = std::move(o);
  r.dims[d].insert(r.dims[d].begin(), member->begin(), member->end());
  NormalizeModes(r);
  return r;
}

std::optional<ValueState> AllToAll(const ValueState& s, size_t d, const DeviceGroups& groups) {
  if (d >= s.dims.size()) return std::nullopt;
  std::vector<int64_t> group_of, pos_of;
  if (!GroupIndex(groups, s.devices, &group_of, &pos_of)) return std::nullopt;
  const int64_t k = static_cast<int64_t>(groups[0].size());
  const std::vector<int64_t> shape = s.LocalShape();
  if (shape[d] % k != 0) return std::nullopt;
  std::vector<int64_t> split = shape;
  split[d] = k;
  split.insert(split.begin() + static_cast<std::ptrdiff_t>(d) + 1, shape[d] / k);
  std::optional<ValueState> st = Reshape(s, split);
  if (!st) return std::nullopt;
  if (k == 1) return s;
  // The head modes index the chunk a device sends to each member.
  const std::vector<Mode> head = st->dims[d];
  for (const Mode& h : head)
    if (h.valid != h.extent) return std::nullopt;
  std::optional<std::vector<Mode>> member = MemberModes(*s.offsets, s.rank(), groups);
  if (!member) return std::nullopt;
  const int64_t rank = s.rank();
  auto o = std::make_shared<Offsets>(*s.offsets);
  for (int64_t p = 0; p < s.devices; ++p) {
    const int64_t first = groups[group_of[p]][0];
    for (int64_t g = 0; g < rank; ++g) (*o)[p * rank + g] = (*s.offsets)[first * rank + g];
    int64_t rest = pos_of[p];
    for (size_t m = head.size(); m-- > 0;) {
      const int64_t digit = rest % head[m].extent;
      rest /= head[m].extent;
      if (head[m].dim < 0) continue;
      const std::optional<int64_t> d = MulWithinLimit(digit, head[m].stride);
      if (!d || !AddTo(&(*o)[p * rank + head[m].dim], *d)) return std::nullopt;
    }
  }
  st->offsets = std::move(o);
  st->dims[d] = *member;
  return Reshape(*st, shape);
}

std::optional<std::vector<ValueState>> AllToAllTuple(const std::vector<const ValueState*>& operands, const DeviceGroups& groups) {
  if (operands.empty()) return std::nullopt;
  const ValueState& first = *operands[0];
  std::vector<int64_t> group_of, pos_of;
  if (!GroupIndex(groups, first.devices, &group_of, &pos_of)) return std::nullopt;
  const size_t k = groups[0].size();
  if (operands.size() != k) return std::nullopt;
  const auto modes = IndexModes(first.dims);
  for (const ValueState* x : operands)
    if (IndexModes(x->dims) != modes || x->global_shape != first.global_shape || x->devices != first.devices) return std::nullopt;
  const int64_t rank = first.rank();
  std::vector<ValueState> out;
  for (size_t j = 0; j < k; ++j) {
    auto o = std::make_shared<Offsets>(static_cast<size_t>(first.devices * rank));
    for (int64_t p = 0; p < first.devices; ++p) {
      const int64_t from = groups[group_of[p]][j];
      const ValueState& x = *operands[pos_of[p]];
      for (int64_t g = 0; g < rank; ++g) (*o)[p * rank + g] = x.Offset(from, g);
    }
    ValueState r = first;
    r.offsets = std::move(o);
    out.push_back(std::move(r));
  }
  return out;
}

std::optional<ValueState> CollectivePermute(const ValueState& s, const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  const int64_t rank = s.rank();
  std::vector<int64_t> source(static_cast<size_t>(s.devices), -1);
  for (const auto& [from, to] : pairs) {
    if (from < 0 || to < 0 || from >= s.devices || to >= s.devices || source[to] != -1) return std::nullopt;
    source[to] = from;
  }
  auto o = std::make_shared<Offsets>(static_cast<size_t>(s.devices * rank));
  for (int64_t p = 0; p < s.devices; ++p) {
    if (source[p] < 0) return std::nullopt;
    for (int64_t g = 0; g < rank; ++g) (*o)[p * rank + g] = s.Offset(source[p], g);
  }
  ValueState r = s;
  r.offsets = std::move(o);
  return r;
}

bool HoldsWholeArray(const ValueState& s) {
  const int64_t rank = s.rank();
  for (int64_t g = 0; g < rank; ++g) {
    std::vector<Mode> modes;
    for (const auto& dm : s.dims)
      for (const Mode& m : dm)
        if (m.dim == g && m.extent > 1) modes.push_back(m);
    std::sort(modes.begin(), modes.end(), [](const Mode& a, const Mode& b) { return a.stride > b.stride; });
    int64_t span = 1;
    if (!modes.empty()) {
      if (modes.back().stride != 1) return false;
      for (size_t k = 0; k < modes.size(); ++k) {
        if (modes[k].valid != modes[k].extent) return false;
        if (k + 1 < modes.size() && MulWithinLimit(modes[k + 1].stride, modes[k + 1].extent) != modes[k].stride) return false;
      }
      span = MulWithinLimit(modes[0].stride, modes[0].extent).value_or(kStateLimit);
    }
    if (span < s.global_shape[g]) return false;
    for (int64_t p = 0; p < s.devices; ++p)
      if (s.Offset(p, g) != 0) return false;
  }
  return true;
}

}  // namespace reshard::audit
