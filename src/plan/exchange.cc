#include "reshard/exchange.h"

#include <algorithm>
#include <queue>

#include "plan/dim_overlap.h"

namespace reshard {
namespace {

// Calls f(choice) for each element of the cross product of `lists`
// (one entry per dim; a rank-0 product has one empty choice).
template <typename F>
void ForEachChoice(const std::vector<std::span<const int32_t>>& lists, std::vector<int32_t>& choice, F&& f) {
  const size_t rank = lists.size();
  for (const auto& l : lists)
    if (l.empty()) return;
  std::vector<size_t> idx(rank, 0);
  choice.resize(rank);
  for (size_t d = 0; d < rank; ++d) choice[d] = lists[d][0];
  while (true) {
    f(choice);
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++idx[d] < lists[d].size()) { choice[d] = lists[d][idx[d]]; break; }
      idx[d] = 0;
      choice[d] = lists[d][0];
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

bool Holds(std::span<const int64_t> holders, int64_t device) {
  return std::binary_search(holders.begin(), holders.end(), device);
}

struct Receiver {
  int64_t device;
  int64_t elements;
};

// Longest-processing-time assignment of a replicated tile's receivers to its
// holders. Returns (receiver, sender) sorted by receiver.
std::vector<std::pair<int64_t, int64_t>> AssignSenders(std::span<const int64_t> holders, std::vector<Receiver> receivers) {
  std::sort(receivers.begin(), receivers.end(), [](const Receiver& a, const Receiver& b) {
    return a.elements != b.elements ? a.elements > b.elements : a.device < b.device;
  });
  using Load = std::pair<int64_t, int64_t>;  // (elements assigned, holder id): least first
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (int64_t h : holders) heap.push({0, h});
  std::vector<std::pair<int64_t, int64_t>> out;
  out.reserve(receivers.size());
  for (const Receiver& r : receivers) {
    Load l = heap.top();
    heap.pop();
    out.push_back({r.device, l.second});
    heap.push({l.first + r.elements, l.second});
  }
  std::sort(out.begin(), out.end());
  return out;
}

class Planner {
 public:
  explicit Planner(const ExchangeTables& t) : t_(t), rank_(t.source.rank()) {}

  int64_t SourceTileOf(const std::vector<int32_t>& choice) const {
    int64_t tile = 0;
    for (int64_t d = 0; d < rank_; ++d) tile = tile * t_.source.dim(d).tiles + t_.dims[d].overlaps[choice[d]].src;
    return tile;
  }
  int64_t TargetTileOf(const std::vector<int32_t>& choice) const {
    int64_t tile = 0;
    for (int64_t d = 0; d < rank_; ++d) tile = tile * t_.target.dim(d).tiles + t_.dims[d].overlaps[choice[d]].dst;
    return tile;
  }
  int64_t Elements(const std::vector<int32_t>& choice) const {
    int64_t n = 1;
    for (int64_t d = 0; d < rank_; ++d) n *= t_.dims[d].overlaps[choice[d]].length;
    return n;
  }

  // Overlap lists of source tile `tile` (against every target coordinate).
  std::vector<std::span<const int32_t>> SourceLists(int64_t tile, std::vector<std::vector<int32_t>>& storage) const {
    std::vector<int32_t> coords = t_.source.TileCoords(tile);
    storage.assign(rank_, {});
    std::vector<std::span<const int32_t>> lists;
    for (int64_t d = 0; d < rank_; ++d) {
      const DimOverlap& o = t_.dims[d];
      for (int32_t k = o.by_src_begin[coords[d]]; k < o.by_src_begin[coords[d] + 1]; ++k) storage[d].push_back(k);
      lists.push_back(storage[d]);
    }
    return lists;
  }
  std::vector<std::span<const int32_t>> TargetLists(int64_t tile) const {
    std::vector<int32_t> coords = t_.target.TileCoords(tile);
    std::vector<std::span<const int32_t>> lists;
    for (int64_t d = 0; d < rank_; ++d) lists.push_back(t_.dims[d].OfTarget(coords[d]));
    return lists;
  }

  // Receivers of source tile `tile` that do not hold it.
  std::vector<Receiver> ReceiversOf(int64_t tile) const {
    std::span<const int64_t> holders = t_.source.Holders(tile);
    std::vector<std::vector<int32_t>> storage;
    auto lists = SourceLists(tile, storage);
    std::vector<Receiver> out;
    std::vector<int32_t> choice;
    ForEachChoice(lists, choice, [&](const std::vector<int32_t>& c) {
      const int64_t n = Elements(c);
      for (int64_t r : t_.target.Holders(TargetTileOf(c)))
        if (!Holds(holders, r)) out.push_back({r, n});
    });
    return out;
  }

  int64_t SenderFor(int64_t tile, int64_t receiver) const {
    std::span<const int64_t> holders = t_.source.Holders(tile);
    if (Holds(holders, receiver)) return receiver;
    if (holders.size() == 1) return holders[0];
    auto assignment = AssignSenders(holders, ReceiversOf(tile));
    auto it = std::lower_bound(assignment.begin(), assignment.end(), std::pair<int64_t, int64_t>{receiver, INT64_MIN});
    return it->second;
  }

  // Every transfer out of source tile `tile`.
  void VisitSourceTile(int64_t tile, Transfer& tr, const std::function<void(const Transfer&)>& visit) const {
    std::span<const int64_t> holders = t_.source.Holders(tile);
    if (holders.empty()) return;
    std::vector<std::pair<int64_t, int64_t>> assignment;
    if (holders.size() > 1) assignment = AssignSenders(holders, ReceiversOf(tile));
    std::vector<std::vector<int32_t>> storage;
    auto lists = SourceLists(tile, storage);
    std::vector<int32_t> choice;
    ForEachChoice(lists, choice, [&](const std::vector<int32_t>& c) {
      tr.elements = Elements(c);
      tr.overlaps = c;
      for (int64_t r : t_.target.Holders(TargetTileOf(c))) {
        tr.to = r;
        if (Holds(holders, r)) tr.from = r;
        else if (holders.size() == 1) tr.from = holders[0];
        else tr.from = std::lower_bound(assignment.begin(), assignment.end(), std::pair<int64_t, int64_t>{r, INT64_MIN})->second;
        visit(tr);
      }
    });
  }

 private:
  const ExchangeTables& t_;
  int64_t rank_;
};

bool ByEndpoints(const Transfer& a, const Transfer& b) { return a.from != b.from ? a.from < b.from : a.to < b.to; }

}  // namespace

const Layout& ExchangePlan::source() const { return tables_->source; }
const Layout& ExchangePlan::target() const { return tables_->target; }

std::span<const Segment> ExchangePlan::Segments(const Transfer& t, int64_t d) const {
  const DimOverlap& o = tables_->dims[d];
  const DimOverlap::Overlap& ov = o.overlaps[t.overlaps[d]];
  return {o.segments.data() + ov.seg_begin, o.segments.data() + ov.seg_end};
}

std::vector<Box> ExchangePlan::Boxes(const Transfer& t) const {
  const int64_t rank = source().rank();
  std::vector<std::span<const Segment>> segs;
  for (int64_t d = 0; d < rank; ++d) segs.push_back(Segments(t, d));
  std::vector<Box> out;
  std::vector<size_t> idx(rank, 0);
  while (true) {
    Box b;
    for (int64_t d = 0; d < rank; ++d) b.dims.push_back({segs[d][idx[d]].global_lo, segs[d][idx[d]].global_lo + segs[d][idx[d]].length});
    out.push_back(std::move(b));
    int64_t d = rank - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < segs[d].size()) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
  return out;
}

Result<Exchange> Exchange::Create(const Layout& source, const Layout& target) {
  if (source.shape() != target.shape())
    return Status::InvalidArgument("source and target layouts are of different shapes");
  if (source.dtype() != target.dtype())
    return Status::InvalidArgument("source and target layouts have different element types");
  // Every byte count the plan reports (totals over devices, peaks of four
  // buffers) is at most the array's bytes times (devices + 4): keep that in int64.
  size_t devices = source.devices().size() + target.devices().size();
  int64_t bound = 0;
  if (__builtin_mul_overflow(source.num_elements() * source.element_bytes(), static_cast<int64_t>(devices) + 4, &bound))
    return Status::InvalidArgument("the array is too large for its byte counts over " + std::to_string(devices) +
                                   " devices to fit in int64");
  auto tables = std::make_shared<ExchangeTables>(ExchangeTables{source, target, {}});
  for (int64_t d = 0; d < source.rank(); ++d) tables->dims.push_back(BuildDimOverlap(source, target, d));
  Exchange e;
  e.tables_ = std::move(tables);
  std::merge(source.devices().begin(), source.devices().end(), target.devices().begin(), target.devices().end(),
             std::back_inserter(e.devices_));
  e.devices_.erase(std::unique(e.devices_.begin(), e.devices_.end()), e.devices_.end());
  return e;
}

const Layout& Exchange::source() const { return tables_->source; }
const Layout& Exchange::target() const { return tables_->target; }

void Exchange::ForEachTransfer(const std::function<void(const Transfer&)>& visit) const {
  Planner p(*tables_);
  Transfer tr;
  for (int64_t tile = 0; tile < tables_->source.num_tiles(); ++tile) p.VisitSourceTile(tile, tr, visit);
}

ExchangePlan Exchange::Plan() const {
  ExchangePlan plan;
  plan.tables_ = tables_;
  ForEachTransfer([&](const Transfer& t) { plan.transfers_.push_back(t); });
  std::sort(plan.transfers_.begin(), plan.transfers_.end(), ByEndpoints);
  return plan;
}

ExchangePlan Exchange::DevicePlan(int64_t device) const {
  const ExchangeTables& t = *tables_;
  Planner p(t);
  ExchangePlan plan;
  plan.tables_ = tables_;
  std::vector<int32_t> choice;
  // What it receives (and copies locally).
  const int64_t dst_tile = t.target.TileOf(device);
  if (dst_tile >= 0) {
    ForEachChoice(p.TargetLists(dst_tile), choice, [&](const std::vector<int32_t>& c) {
      const int64_t src_tile = p.SourceTileOf(c);
      plan.transfers_.push_back(Transfer{p.SenderFor(src_tile, device), device, p.Elements(c), c});
    });
  }
  // What it sends.
  const int64_t src_tile = t.source.TileOf(device);
  if (src_tile >= 0) {
    Transfer tr;
    p.VisitSourceTile(src_tile, tr, [&](const Transfer& x) {
      if (x.from == device && x.to != device) plan.transfers_.push_back(x);
    });
  }
  std::sort(plan.transfers_.begin(), plan.transfers_.end(), ByEndpoints);
  return plan;
}

}  // namespace reshard
