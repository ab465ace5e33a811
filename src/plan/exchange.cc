#include "reshard/exchange.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "plan/dim_overlap.h"
#include "plan/tile_routes.h"

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

// Index of `device` among `devices` (ascending). REQUIRES: it is there.
int64_t IndexOf(std::span<const int64_t> devices, int64_t device) {
  return std::lower_bound(devices.begin(), devices.end(), device) - devices.begin();
}

// The sender rule for replicated sources (exchange.h). Source tile S's
// receiving pairs (target tile T, holder r of T) have position
// rank(T) * target_slots + index of r among T's holders, where rank(T) is the
// row-major index of T's overlap ids in the cross product of S's per-dim
// overlap lists (the order ForEachChoice visits them). A pair whose receiver
// holds S copies locally; any other goes to S's holder
// (position - local copies at earlier positions) mod h. Everything is a
// closed form of (S, T, r), so each device computes its senders alone.
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
  // Rank of the choice's target tile among those its source tile overlaps:
  // its row-major index in the cross product of the source tile's per-dim
  // overlap lists (each ascending in target coordinate).
  int64_t ChoiceRank(const std::vector<int32_t>& choice) const {
    int64_t i = 0;
    for (int64_t d = 0; d < rank_; ++d) {
      const DimOverlap& o = t_.dims[d];
      const int32_t s = o.overlaps[choice[d]].src;
      i = i * (o.by_src_begin[s + 1] - o.by_src_begin[s]) + (choice[d] - o.by_src_begin[s]);
    }
    return i;
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

  // Local copies of replicated source tile `tile` at positions before `position`.
  int64_t LocalsBefore(int64_t tile, int64_t position) const {
    const auto& local = t_.local_receivers;
    const auto first = std::lower_bound(local.begin(), local.end(), std::pair<int64_t, int64_t>{tile, INT64_MIN});
    return std::lower_bound(first, local.end(), std::pair<int64_t, int64_t>{tile, position}) - first;
  }

  // Who sends `receiver` (the holder at `index` among the holders of the
  // choice's target tile) its part of source tile `tile`.
  // The holder of source tile `tile` in `receiver`'s group, or -1 (always
  // -1 without sender groups).
  int64_t GroupSender(int64_t tile, int64_t receiver) const {
    if (!t_.group_key) return -1;
    const int64_t key = t_.group_key(receiver);
    const auto begin = t_.keyed_holders.begin() + t_.keyed_begin[tile], end = t_.keyed_holders.begin() + t_.keyed_begin[tile + 1];
    const auto it = std::lower_bound(begin, end, std::pair<int64_t, int64_t>{key, INT64_MIN});
    return it != end && it->first == key ? it->second : -1;
  }

  int64_t SenderFor(int64_t tile, const std::vector<int32_t>& choice, int64_t receiver, int64_t index) const {
    std::span<const int64_t> holders = t_.source.Holders(tile);
    if (Holds(holders, receiver)) return receiver;
    if (const int64_t g = GroupSender(tile, receiver); g >= 0) return g;
    if (holders.size() == 1) return holders[0];
    const int64_t position = ChoiceRank(choice) * t_.target_slots + index;
    return holders[(position - LocalsBefore(tile, position)) % static_cast<int64_t>(holders.size())];
  }

  // Every transfer out of source tile `tile`, in position order (so the
  // local copies before a position are counted as they pass).
  void VisitSourceTile(int64_t tile, Transfer& tr, const std::function<void(const Transfer&)>& visit) const {
    std::span<const int64_t> holders = t_.source.Holders(tile);
    if (holders.empty()) return;
    const int64_t h = static_cast<int64_t>(holders.size());
    std::vector<std::vector<int32_t>> storage;
    auto lists = SourceLists(tile, storage);
    std::vector<int32_t> choice;
    int64_t rank = 0;    // ChoiceRank(c): ForEachChoice walks the cross product row-major
    int64_t locals = 0;  // local copies so far
    ForEachChoice(lists, choice, [&](const std::vector<int32_t>& c) {
      tr.elements = Elements(c);
      tr.overlaps = c;
      const int64_t target_tile = TargetTileOf(c);
      std::span<const int64_t> receivers = t_.target.Holders(target_tile);
      if (t_.receivers) {
        // Only the receivers kept, each with its sender by the closed form
        // (its position among all the target tile's holders).
        for (int64_t to : t_.receivers(tile, target_tile)) {
          tr.to = to;
          tr.from = SenderFor(tile, c, to, IndexOf(receivers, to));
          visit(tr);
        }
        return;
      }
      for (size_t j = 0; j < receivers.size(); ++j) {
        tr.to = receivers[j];
        if (Holds(holders, tr.to)) {
          tr.from = tr.to;
          ++locals;
        } else if (const int64_t g = GroupSender(tile, tr.to); g >= 0) {
          tr.from = g;
        } else if (h == 1) {
          tr.from = holders[0];
        } else {
          tr.from = holders[(rank * t_.target_slots + static_cast<int64_t>(j) - locals) % h];
        }
        if (!t_.delivers || t_.delivers(tile, tr.to)) visit(tr);
      }
      ++rank;
    });
  }

 private:
  const ExchangeTables& t_;
  int64_t rank_;
};

// Fills the sender rule's tables: target_slots and the positions of the
// holders of each replicated source tile that receive from it themselves.
// O(tiles + devices * rank * log(cells)), once per Exchange.
void BuildSenderRule(ExchangeTables& t) {
  for (int64_t tile = 0; tile < t.target.num_tiles(); ++tile)
    t.target_slots = std::max<int64_t>(t.target_slots, static_cast<int64_t>(t.target.Holders(tile).size()));
  const int64_t rank = t.source.rank();
  for (int64_t tile = 0; tile < t.source.num_tiles(); ++tile) {
    std::span<const int64_t> holders = t.source.Holders(tile);
    if (holders.size() < 2) continue;
    const std::vector<int32_t> sc = t.source.TileCoords(tile);
    for (int64_t g : holders) {
      const int64_t dst_tile = t.target.TileOf(g);
      if (dst_tile < 0) continue;
      const std::vector<int32_t> tc = t.target.TileCoords(dst_tile);
      int64_t i = 0;
      bool overlaps = true;
      for (int64_t d = 0; d < rank && overlaps; ++d) {
        const DimOverlap& o = t.dims[d];
        const auto begin = o.overlaps.begin() + o.by_src_begin[sc[d]], end = o.overlaps.begin() + o.by_src_begin[sc[d] + 1];
        const auto it = std::lower_bound(begin, end, tc[d], [](const DimOverlap::Overlap& ov, int32_t dst) { return ov.dst < dst; });
        overlaps = it != end && it->dst == tc[d];
        i = i * (end - begin) + (it - begin);
      }
      if (overlaps) t.local_receivers.push_back({tile, i * t.target_slots + IndexOf(t.target.Holders(dst_tile), g)});
    }
  }
  std::sort(t.local_receivers.begin(), t.local_receivers.end());
}

bool ByEndpoints(const Transfer& a, const Transfer& b) { return a.from != b.from ? a.from < b.from : a.to < b.to; }

}  // namespace

const Layout& ExchangePlan::source() const { return tables_->source; }
const Layout& ExchangePlan::target() const { return tables_->target; }

std::vector<int64_t> TransferClip::Shape(const ExchangePlan& plan, const Transfer& t) const {
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < plan.source().rank(); ++d) {
    int64_t n = 0;
    for (const Segment& s : plan.Segments(t, d)) n += Apply(s, d).length;
    shape.push_back(n);
  }
  return shape;
}

int64_t TransferClip::Elements(const ExchangePlan& plan, const Transfer& t) const {
  int64_t elements = 1;
  for (int64_t n : Shape(plan, t)) elements *= n;
  return elements;
}

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

Result<std::vector<Exchange>> Exchange::CreateReducing(const Layout& source, const Layout& target) {
  if (!(source.partial() || target.partial()) || source == target)
    return Status::InvalidArgument("a reducing exchange goes from or to a partial layout, between different layouts");
  if (source.partial()) RESHARD_RETURN_IF_ERROR(CheckReducible(source.dtype(), source.reduction().op));
  if (target.partial()) RESHARD_RETURN_IF_ERROR(CheckReducible(target.dtype(), target.reduction().op));
  const PartRoutes routes = RouteParts(source, target);
  const Layout every = target.WithoutReduction();
  std::vector<Exchange> parts;
  if (routes.tile_to) {
    // Each target tile's holders by part, so that each part's exchange
    // lists the receivers a tile is routed to rather than testing every
    // holder of the target tile.
    auto holders = std::make_shared<const TileHolders>(target);
    for (int64_t part = 0; part < source.reduction().parts; ++part) {
      RESHARD_ASSIGN_OR_RETURN(
          Exchange e,
          CreateRouted(source.partial() ? source.PartLayout(part) : source, every,
                       [routes, target, part](int64_t tile, int64_t to) { return routes.RoutesTileTo(target, part, tile, to); },
                       [routes, holders, part](int64_t tile, int64_t target_tile) {
                         return holders->Devices(target_tile, routes.TileTo(part, tile, target_tile));
                       }));
      parts.push_back(std::move(e));
    }
    return parts;
  }
  for (int64_t part = 0; part < source.reduction().parts; ++part) {
    const int64_t into = routes.to[static_cast<size_t>(part)];
    RESHARD_ASSIGN_OR_RETURN(Exchange e, Create(source.PartLayout(part), into < 0 ? every : target.PartLayout(into)));
    parts.push_back(std::move(e));
  }
  return parts;
}

Status Exchange::Validate(const Layout& source, const Layout& target) {
  if (source.shape() != target.shape())
    return Status::InvalidArgument("source and target layouts are of different shapes");
  if (source.dtype() != target.dtype())
    return Status::InvalidArgument("source and target layouts have different element types");
  if (source.partial() || target.partial())
    return Status::NotSupported(
        "layouts with a pending reduction (partial sums) have no exchange of their own: plan them (a reducing step "
        "is compiled part by part, device_program.h)");
  // Every byte count the plan reports (totals over the devices taking part,
  // peaks of four buffers) is at most the array's bytes times (devices + 4),
  // devices counted once where both layouts use them: keep that in int64.
  const std::vector<int64_t>& a = source.devices();
  const std::vector<int64_t>& b = target.devices();
  int64_t devices = 0;
  for (size_t i = 0, j = 0; i < a.size() || j < b.size(); ++devices) {
    if (j == b.size() || (i < a.size() && a[i] < b[j])) ++i;
    else if (i == a.size() || b[j] < a[i]) ++j;
    else ++i, ++j;
  }
  int64_t bound = 0;
  if (__builtin_mul_overflow(source.num_elements() * source.element_bytes(), devices + 4, &bound))
    return Status::InvalidArgument("the array is too large for its byte counts over " +
                                   std::to_string(a.size()) + " source and " + std::to_string(b.size()) +
                                   " target devices to fit in int64");
  return Status::Ok();
}

Result<Exchange> Exchange::Create(const Layout& source, const Layout& target) { return Create(source, target, nullptr); }

Result<Exchange> Exchange::CreateRouted(
    const Layout& source, const Layout& target, std::function<bool(int64_t source_tile, int64_t receiver)> delivers,
    std::function<std::span<const int64_t>(int64_t source_tile, int64_t target_tile)> receivers) {
  RESHARD_ASSIGN_OR_RETURN(Exchange e, Create(source, target, nullptr));
  auto tables = std::make_shared<ExchangeTables>(*e.tables_);
  tables->delivers = std::move(delivers);
  tables->receivers = std::move(receivers);
  e.tables_ = std::move(tables);
  return e;
}

Result<Exchange> Exchange::Create(const Layout& source, const Layout& target,
                                  std::function<int64_t(int64_t device)> group_key) {
  RESHARD_RETURN_IF_ERROR(Validate(source, target));
  std::vector<int64_t> all = DevicesOfBoth(source, target);
  auto tables = std::make_shared<ExchangeTables>(ExchangeTables{source, target, {}, 1, {}, {}, {}, {}, {}, {}});
  for (int64_t d = 0; d < source.rank(); ++d) tables->dims.push_back(BuildDimOverlap(source, target, d));
  BuildSenderRule(*tables);
  if (group_key) {
    // The group rule: each source tile's holders by (group key, id).
    tables->group_key = std::move(group_key);
    const Layout& s = tables->source;
    tables->keyed_begin.reserve(static_cast<size_t>(s.num_tiles()) + 1);
    for (int64_t tile = 0; tile < s.num_tiles(); ++tile) {
      tables->keyed_begin.push_back(static_cast<int64_t>(tables->keyed_holders.size()));
      const size_t first = tables->keyed_holders.size();
      for (int64_t h : s.Holders(tile)) tables->keyed_holders.push_back({tables->group_key(h), h});
      // Sorted by key, then id: the lowest id of a group comes first.
      std::sort(tables->keyed_holders.begin() + static_cast<std::ptrdiff_t>(first), tables->keyed_holders.end());
    }
    tables->keyed_begin.push_back(static_cast<int64_t>(tables->keyed_holders.size()));
  }
  Exchange e;
  e.tables_ = std::move(tables);
  e.devices_ = std::move(all);
  return e;
}

OverlapIds::OverlapIds(OverlapIds&& o) noexcept : size_(o.size_), inline_{} {
  if (size_ > kInline) {
    heap_ = o.heap_;
  } else {
    std::copy(o.inline_, o.inline_ + size_, inline_);
  }
  o.size_ = 0;
}

OverlapIds& OverlapIds::operator=(const OverlapIds& o) {
  if (this != &o) Assign(std::span<const int32_t>(o.begin(), o.end()));
  return *this;
}

OverlapIds& OverlapIds::operator=(OverlapIds&& o) noexcept {
  if (this == &o) return *this;
  Free();
  size_ = o.size_;
  if (size_ > kInline) {
    heap_ = o.heap_;
  } else {
    std::copy(o.inline_, o.inline_ + size_, inline_);
  }
  o.size_ = 0;
  return *this;
}

void OverlapIds::Assign(std::span<const int32_t> ids) {
  if (ids.size() > kInline) {
    // (A copy of itself is copied out before the old storage is freed.)
    int32_t* fresh = new int32_t[ids.size()];
    std::copy(ids.begin(), ids.end(), fresh);
    Free();
    heap_ = fresh;
  } else {
    int32_t tmp[kInline];
    std::copy(ids.begin(), ids.end(), tmp);
    Free();
    std::copy(tmp, tmp + ids.size(), inline_);
  }
  size_ = static_cast<uint32_t>(ids.size());
}

void OverlapIds::Free() {
  if (size_ > kInline) delete[] heap_;
  size_ = 0;
}

bool operator==(const OverlapIds& a, const OverlapIds& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

std::strong_ordering operator<=>(const OverlapIds& a, const OverlapIds& b) {
  return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
}

size_t StagedBoxes::BoxHash::operator()(const std::pair<int64_t, OverlapIds>& box) const {
  uint64_t h = static_cast<uint64_t>(box.first) * 0x9e3779b97f4a7c15ull;
  for (int32_t o : box.second) h = (h ^ static_cast<uint32_t>(o)) * 0x100000001b3ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

bool StagedBoxes::Add(const Transfer& t) {
  if (t.from == t.to) return false;
  return seen_.try_emplace({t.from, t.overlaps}, 0).second;
}

bool StagedBoxes::AddInRuns(const Transfer& t) {
  if (t.from == t.to) return false;
  if (has_last_ && last_from_ == t.from && last_box_ == t.overlaps) return false;
  has_last_ = true;
  last_from_ = t.from;
  last_box_ = t.overlaps;
  return true;
}

int64_t StagedBoxes::Stager(const Transfer& t, int64_t message) {
  if (t.from == t.to) return -1;
  return seen_.try_emplace({t.from, t.overlaps}, message).first->second;
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

namespace {

// What `device` receives (and copies locally) in the exchange of tables `t`.
void VisitReceives(const ExchangeTables& t, int64_t device, const std::function<void(const Transfer&)>& visit) {
  const int64_t dst_tile = t.target.TileOf(device);
  if (dst_tile < 0) return;
  Planner p(t);
  std::vector<int32_t> choice;
  const int64_t index = IndexOf(t.target.Holders(dst_tile), device);
  Transfer tr;
  tr.to = device;
  ForEachChoice(p.TargetLists(dst_tile), choice, [&](const std::vector<int32_t>& c) {
    const int64_t src_tile = p.SourceTileOf(c);
    if (t.delivers && !t.delivers(src_tile, device)) return;
    tr.from = p.SenderFor(src_tile, c, device, index);
    tr.elements = p.Elements(c);
    tr.overlaps = c;
    visit(tr);
  });
}

}  // namespace

void Exchange::ForEachDeviceTransfer(int64_t device, const std::function<void(const Transfer&)>& visit) const {
  const ExchangeTables& t = *tables_;
  VisitReceives(t, device, visit);
  // What it sends: VisitSourceTile walks the tile's boxes one at a time,
  // each to all its receivers (StagedBoxes::AddInRuns relies on it).
  const int64_t src_tile = t.source.TileOf(device);
  if (src_tile >= 0) {
    Planner p(t);
    Transfer tr;
    p.VisitSourceTile(src_tile, tr, [&](const Transfer& x) {
      if (x.from == device && x.to != device) visit(x);
    });
  }
}

void Exchange::ForEachReceived(const Layout& source, const Layout& target, int64_t receiver,
                               const std::function<void(int64_t source_tile, int64_t elements)>& visit) {
  const int64_t dst_tile = target.TileOf(receiver);
  if (dst_tile < 0) return;
  const int64_t rank = target.rank();
  const std::vector<int32_t> tc = target.TileCoords(dst_tile);
  // Per dim, the source coordinates sharing elements with the receiver's
  // coordinate and how many: the overlaps the tables would list for it,
  // found by binary search over the source's cuts. Where the receiver's
  // coordinate is one cell and the source's cell k is its tile k (every
  // mesh tiling), they are the source cells in one range, read in place (an
  // all-gather's receiver overlaps every source cell: 2^24 of them);
  // otherwise listed, sorted and merged.
  struct DimView {
    const DimGrid* source = nullptr;
    bool in_place = false;
    size_t first = 0, last = 0;  // in place: source cells [first, last), clipped to [lo, hi)
    int64_t lo = 0, hi = 0;
    std::vector<std::pair<int32_t, int64_t>> list;
    size_t size() const { return in_place ? last - first : list.size(); }
    std::pair<int32_t, int64_t> at(size_t i) const {
      if (!in_place) return list[i];
      const size_t j = first + i;
      return {static_cast<int32_t>(j), std::min(hi, source->cuts[j + 1]) - std::max(lo, source->cuts[j])};
    }
  };
  auto cells_over = [](const DimGrid& s, int64_t lo, int64_t hi) {
    size_t j = static_cast<size_t>(std::upper_bound(s.cuts.begin(), s.cuts.end(), lo) - s.cuts.begin()) - 1;
    size_t end = j;
    while (end + 1 < s.cuts.size() && s.cuts[end] < hi) ++end;
    return std::pair<size_t, size_t>{j, end};
  };
  std::vector<DimView> views(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    const DimGrid& s = source.dim(d);
    const DimGrid& t = target.dim(d);
    DimView& v = views[static_cast<size_t>(d)];
    v.source = &s;
    const std::span<const int32_t> cells = target.TileCells(d, tc[static_cast<size_t>(d)]);
    if (cells.size() == 1 && source.CellsAreTiles(d)) {
      v.in_place = true;
      v.lo = t.cuts[static_cast<size_t>(cells[0])];
      v.hi = t.cuts[static_cast<size_t>(cells[0]) + 1];
      if (v.lo == v.hi) return;
      std::tie(v.first, v.last) = cells_over(s, v.lo, v.hi);
      continue;
    }
    for (int32_t cell : cells) {
      const int64_t lo = t.cuts[static_cast<size_t>(cell)], hi = t.cuts[static_cast<size_t>(cell) + 1];
      if (lo == hi) continue;
      const auto [first, last] = cells_over(s, lo, hi);
      for (size_t j = first; j < last; ++j) {
        const int64_t length = std::min(hi, s.cuts[j + 1]) - std::max(lo, s.cuts[j]);
        if (length > 0) v.list.push_back({s.cell_tile[j], length});
      }
    }
    std::sort(v.list.begin(), v.list.end());
    size_t kept = 0;
    for (size_t i = 0; i < v.list.size(); ++i) {
      if (kept > 0 && v.list[kept - 1].first == v.list[i].first) {
        v.list[kept - 1].second += v.list[i].second;
      } else {
        v.list[kept++] = v.list[i];
      }
    }
    v.list.resize(kept);
    if (v.list.empty()) return;
  }
  // The cross product, row-major: one source tile per choice (in place,
  // empty cells share nothing and are passed over).
  std::vector<size_t> at(static_cast<size_t>(rank), 0);
  while (true) {
    int64_t tile = 0, elements = 1;
    for (int64_t d = 0; d < rank; ++d) {
      const auto [coord, length] = views[static_cast<size_t>(d)].at(at[static_cast<size_t>(d)]);
      tile = tile * source.dim(d).tiles + coord;
      elements *= length;
    }
    if (elements > 0) visit(tile, elements);
    int64_t d = rank;
    while (d > 0) {
      --d;
      if (++at[static_cast<size_t>(d)] < views[static_cast<size_t>(d)].size()) break;
      at[static_cast<size_t>(d)] = 0;
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

ExchangePlan Exchange::DevicePlan(int64_t device) const {
  ExchangePlan plan;
  plan.tables_ = tables_;
  ForEachDeviceTransfer(device, [&](const Transfer& x) { plan.transfers_.push_back(x); });
  std::sort(plan.transfers_.begin(), plan.transfers_.end(), ByEndpoints);
  return plan;
}

ExchangePlan Exchange::ReceivePlan(int64_t device) const {
  ExchangePlan plan;
  plan.tables_ = tables_;
  VisitReceives(*tables_, device, [&](const Transfer& x) { plan.transfers_.push_back(x); });
  std::sort(plan.transfers_.begin(), plan.transfers_.end(), ByEndpoints);
  return plan;
}

}  // namespace reshard
