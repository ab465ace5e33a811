#include "exec/simulator.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "exec/block_copy.h"

namespace reshard {
namespace {

using Tag = uint64_t;
constexpr int64_t kTagBytes = sizeof(Tag);

// Global row-major index of every element of a device's local buffer.
std::vector<int64_t> GlobalIndexOfLocal(const Layout& l, int64_t device) {
  const int64_t t = l.TileOf(device);
  if (t < 0) return {};
  std::vector<int32_t> coords = l.TileCoords(t);
  std::vector<std::vector<int64_t>> per_dim(l.rank());  // local index -> global coordinate
  for (int64_t d = 0; d < l.rank(); ++d)
    for (int32_t k : l.TileCells(d, coords[d]))
      for (int64_t g = l.dim(d).cuts[k]; g < l.dim(d).cuts[k + 1]; ++g) per_dim[d].push_back(g);
  std::vector<int64_t> strides(l.rank(), 1);
  for (int64_t d = l.rank() - 2; d >= 0; --d) strides[d] = strides[d + 1] * l.shape()[d + 1];
  std::vector<int64_t> out = {0};
  for (int64_t d = 0; d < l.rank(); ++d) {
    std::vector<int64_t> next;
    next.reserve(out.size() * per_dim[d].size());
    for (int64_t base : out)
      for (int64_t g : per_dim[d]) next.push_back(base + g * strides[d]);
    out = std::move(next);
  }
  return out;
}

struct Device {
  std::vector<Tag> source, target;
  std::vector<uint8_t> writes;  // per target element
  int64_t held = 0, peak = 0;
  void Hold(int64_t bytes) { held += bytes; peak = std::max(peak, held); }
};

}  // namespace

SimulationReport Simulate(const ExchangePlan& plan, const PlanStats& claimed) {
  const Layout& src = plan.source();
  const Layout& dst = plan.target();
  const int64_t eb = src.element_bytes();
  SimulationReport report;
  std::map<int64_t, Device> devices;
  auto problem = [&](const std::string& what) {
    if (report.first_problem.empty()) report.first_problem = what;
  };
  int64_t elements = 0;
  for (int64_t id : src.devices()) elements += src.TileOf(id) >= 0 ? src.TileElements(src.TileOf(id)) : 0;
  for (int64_t id : dst.devices()) elements += dst.TileOf(id) >= 0 ? dst.TileElements(dst.TileOf(id)) : 0;
  if (elements > kMaxSimulatedElements) {
    report.too_large = true;
    problem("too large to simulate: " + std::to_string(elements) + " elements in all buffers, more than " +
            std::to_string(kMaxSimulatedElements));
    return report;
  }
  for (int64_t id : src.devices()) {
    Device& d = devices[id];
    for (int64_t g : GlobalIndexOfLocal(src, id)) d.source.push_back(static_cast<Tag>(g) + 1);
  }
  for (int64_t id : dst.devices()) devices[id];
  for (auto& [id, d] : devices) {
    d.target.assign(dst.TileOf(id) >= 0 ? dst.TileElements(dst.TileOf(id)) : 0, 0);
    d.writes.assign(d.target.size(), 0);
    d.Hold(src.LocalBytes(id) + dst.LocalBytes(id));
  }
  auto bytes_of = [](std::vector<Tag>& v) { return reinterpret_cast<std::byte*>(v.data()); };
  // Counts writes: the same runs copy a buffer of ones into a mark buffer.
  auto record_writes = [&](const std::vector<std::vector<Run>>& runs, std::span<const int64_t> from_shape, Device& to,
                           std::span<const int64_t> to_shape) {
    int64_t n = 1;
    for (int64_t s : from_shape) n *= s;
    std::vector<Tag> src_ones(n, 1), marks(to.target.size(), 0);
    CopyRuns(runs, reinterpret_cast<const std::byte*>(src_ones.data()), from_shape, bytes_of(marks), to_shape, kTagBytes);
    for (size_t i = 0; i < marks.size(); ++i) to.writes[i] = static_cast<uint8_t>(std::min<int>(to.writes[i] + static_cast<int>(marks[i]), 255));
  };

  // Phase 1: local copies; senders pack into staging, each distinct box once
  // (StagedBoxes): a message of a box already staged reads that staging.
  std::vector<std::vector<Tag>> staging(plan.transfers().size());
  std::vector<size_t> staged_at(plan.transfers().size());
  std::map<std::pair<int64_t, OverlapIds>, size_t> first_of_box;
  for (size_t i = 0; i < plan.transfers().size(); ++i) {
    const Transfer& t = plan.transfers()[i];
    Device& from = devices[t.from];
    const std::vector<int64_t> from_shape = src.LocalShape(t.from);
    if (t.from == t.to) {
      const std::vector<int64_t> to_shape = dst.LocalShape(t.to);
      auto runs = TransferRuns(plan, t, CopyKind::kLocal);
      CopyRuns(runs, reinterpret_cast<const std::byte*>(from.source.data()), from_shape, bytes_of(from.target), to_shape, kTagBytes);
      record_writes(runs, from_shape, from, to_shape);
      continue;
    }
    const auto [box, fresh] = first_of_box.emplace(std::pair(t.from, t.overlaps), i);
    staged_at[i] = box->second;
    if (!fresh) continue;
    staging[i].assign(t.elements, 0);
    const std::vector<int64_t> stage_shape = StagingShape(plan, t);
    CopyRuns(TransferRuns(plan, t, CopyKind::kPack), reinterpret_cast<const std::byte*>(from.source.data()), from_shape,
             bytes_of(staging[i]), stage_shape, kTagBytes);
    from.Hold(t.elements * eb);
  }
  // Phase 2: every message lands in its receiver's staging (all at once, as in one all-to-all).
  for (size_t i = 0; i < plan.transfers().size(); ++i) {
    const Transfer& t = plan.transfers()[i];
    if (t.from != t.to) devices[t.to].Hold(t.elements * eb);
  }
  // Phase 3: unpack; staging is released.
  for (size_t i = 0; i < plan.transfers().size(); ++i) {
    const Transfer& t = plan.transfers()[i];
    if (t.from == t.to) continue;
    Device& to = devices[t.to];
    const std::vector<int64_t> stage_shape = StagingShape(plan, t);
    const std::vector<int64_t> to_shape = dst.LocalShape(t.to);
    auto runs = TransferRuns(plan, t, CopyKind::kUnpack);
    CopyRuns(runs, reinterpret_cast<const std::byte*>(staging[staged_at[i]].data()), stage_shape, bytes_of(to.target),
             to_shape, kTagBytes);
    record_writes(runs, stage_shape, to, to_shape);
  }

  // Check every target element, and every device's peak against the claim.
  std::map<int64_t, int64_t> claimed_peak;
  for (const DeviceStats& s : claimed.per_device) claimed_peak[s.device] = s.peak_bytes;
  for (auto& [id, d] : devices) {
    ++report.devices;
    std::vector<int64_t> expect = GlobalIndexOfLocal(dst, id);
    for (size_t i = 0; i < d.target.size(); ++i) {
      ++report.elements_checked;
      if (d.writes[i] != 1 || d.target[i] != static_cast<Tag>(expect[i]) + 1) {
        ++report.mismatches;
        problem("device " + std::to_string(id) + " element " + std::to_string(i) + " (global index " + std::to_string(expect[i]) +
                "): " + (d.writes[i] == 0 ? "never written" : d.writes[i] > 1 ? "written " + std::to_string(d.writes[i]) + " times"
                                                                              : "holds global index " + std::to_string(static_cast<int64_t>(d.target[i]) - 1)));
      }
    }
    report.peak_bytes = std::max(report.peak_bytes, d.peak);
    if (d.peak > claimed_peak[id]) {
      ++report.peak_excess_devices;
      problem("device " + std::to_string(id) + " held " + std::to_string(d.peak) + " bytes; the plan claims " +
              std::to_string(claimed_peak[id]));
    }
  }
  return report;
}

}  // namespace reshard
