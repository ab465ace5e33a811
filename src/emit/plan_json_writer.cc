// WritePlanJson (emit.h): the plan as `reshard plan --json` prints it,
// written as it is produced, with a one-step exchange's transfers.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "reshard/emit.h"
#include "reshard/exchange.h"

namespace reshard {
namespace {

// The transfers of the exchange from `src` to `dst` as a JSON array, sorted by
// (from, to), each with what it moves: per dim, runs [global_lo, length,
// offset in the sender's source buffer, offset in the receiver's target
// buffer]; the elements moved are their cross product. They are written as
// they are produced, never held as a whole (4096 devices exchanging all to
// all make 16.7 million transfers, 1.3 GB of text), in one of three ways:
//
// - When no source tile is replicated and the tiles' holders ascend with
//   the tile index, Exchange::ForEachTransfer visits each sender's transfers
//   together and the senders in order: each sender's are sorted and written
//   (memory: one device's peers).
// - Otherwise, one sender at a time from its part of the exchange
//   (Exchange::DevicePlan). A part walks every transfer of the sender's
//   source tile, so where tiles are replicated the walks add up to the
//   transfers times the holders;
// - past kMaxWalk steps, the transfers are gathered compactly and sorted
//   instead, and when even that would take more than kMaxGathered bytes, the
//   request is refused before anything is gathered.
class TransferWriter {
 public:
  TransferWriter(const Exchange& ex, std::ostream& out) : ex_(ex), out_(out), rank_(ex.source().rank()) {
    at_ = end_ = buf_.data();
  }

  Status Write() {
    const Layout& src = ex_.source();
    bool replicated = false, ascending = true;
    int64_t last_holder = -1;
    for (int64_t tile = 0; tile < src.num_tiles(); ++tile) {
      std::span<const int64_t> h = src.Holders(tile);
      replicated = replicated || h.size() > 1;
      if (h.empty()) continue;
      ascending = ascending && h[0] > last_holder;
      last_holder = h[0];
    }
    Room(1);
    *at_++ = '[';
    if (!replicated && ascending) {
      tables_ = ex_.DevicePlan(ex_.devices().front());  // any part: every part shares the tables
      int64_t sender = -1;
      ex_.ForEachTransfer([&](const Transfer& t) {
        if (t.from != sender) Flush();
        sender = t.from;
        Gather(t);
      });
      Flush();
    } else {
      RESHARD_RETURN_IF_ERROR(WriteByParts());
    }
    Room(1);
    *at_++ = ']';
    buf_.resize(static_cast<size_t>(at_ - buf_.data()));
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    return Status::Ok();
  }

 private:
  static constexpr int64_t kMaxWalk = int64_t{1} << 27;
  static constexpr int64_t kMaxGathered = int64_t{1} << 31;

  struct Row {
    int64_t from, to, elements;
    size_t overlaps;  // offset of its rank_ overlap ids in overlaps_
  };

  Status WriteByParts() {
    const Layout& src = ex_.source();
    std::vector<int64_t> out_of(src.num_tiles(), 0);
    int64_t transfers = 0, walk = 0;
    ex_.ForEachTransfer([&](const Transfer& t) { ++transfers; ++out_of[src.TileOf(t.from)]; });
    for (int64_t tile = 0; tile < src.num_tiles(); ++tile) walk += out_of[tile] * static_cast<int64_t>(src.Holders(tile).size());
    if (walk <= std::max<int64_t>(kMaxWalk, 4 * transfers)) {
      for (int64_t device : ex_.devices()) {
        const ExchangePlan part = ex_.DevicePlan(device);
        for (const Transfer& t : part.transfers())  // sorted by (from, to)
          if (t.from == device) Append(part, t.from, t.to, t.elements, t.overlaps);
      }
      return Status::Ok();
    }
    const int64_t bytes = transfers * static_cast<int64_t>(sizeof(Row) + 4 * rank_);
    if (bytes > kMaxGathered)
      return Status::InvalidArgument(fmt::format("the exchange has {} transfers from replicated source tiles; "
                                                 "listing them sorted would take about {} bytes of memory, more than {}",
                                                 transfers, bytes, kMaxGathered));
    tables_ = ex_.DevicePlan(ex_.devices().front());
    rows_.reserve(static_cast<size_t>(transfers));
    ex_.ForEachTransfer([&](const Transfer& t) { Gather(t); });
    Flush();
    return Status::Ok();
  }

  void Gather(const Transfer& t) {
    rows_.push_back({t.from, t.to, t.elements, overlaps_.size()});
    overlaps_.insert(overlaps_.end(), t.overlaps.begin(), t.overlaps.end());
  }

  // Writes the gathered rows sorted by (from, to), and forgets them.
  void Flush() {
    std::sort(rows_.begin(), rows_.end(),
              [](const Row& a, const Row& b) { return a.from != b.from ? a.from < b.from : a.to < b.to; });
    std::vector<int32_t> ids(rank_);
    for (const Row& r : rows_) {
      std::copy(overlaps_.begin() + r.overlaps, overlaps_.begin() + r.overlaps + rank_, ids.begin());
      Append(*tables_, r.from, r.to, r.elements, ids);
    }
    rows_.clear();
    overlaps_.clear();
  }

  // The text goes into buf_ through a cursor; Room(n) makes room for n more bytes.
  void Room(size_t n) {
    if (static_cast<size_t>(end_ - at_) >= n) return;
    buf_.resize(static_cast<size_t>(at_ - buf_.data()));
    if (buf_.size() >= (1 << 20)) {
      out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
      buf_.clear();
    }
    const size_t used = buf_.size();
    buf_.resize(std::max<size_t>(used + n, (1 << 20) + 4096));
    at_ = buf_.data() + used;
    end_ = buf_.data() + buf_.size();
  }
  template <size_t N>
  void Lit(const char (&s)[N]) {
    std::memcpy(at_, s, N - 1);
    at_ += N - 1;
  }
  void Int(int64_t v) { at_ = std::to_chars(at_, end_, v).ptr; }

  void Append(const ExchangePlan& part, int64_t from, int64_t to, int64_t elements, const OverlapIds& overlaps) {
    Room(128);
    if (!first_) *at_++ = ',';
    first_ = false;
    Lit("{\"from\":");
    Int(from);
    Lit(",\"to\":");
    Int(to);
    Lit(",\"bytes\":");
    Int(elements * ex_.source().element_bytes());
    Lit(",\"runs\":[");
    scratch_.overlaps = overlaps;
    for (int64_t d = 0; d < rank_; ++d) {
      Room(8);
      if (d) *at_++ = ',';
      *at_++ = '[';
      bool first_run = true;
      for (const Segment& seg : part.Segments(scratch_, d)) {
        Room(96);  // four int64 and punctuation
        if (!first_run) *at_++ = ',';
        first_run = false;
        *at_++ = '[';
        Int(seg.global_lo);
        *at_++ = ',';
        Int(seg.length);
        *at_++ = ',';
        Int(seg.src_offset);
        *at_++ = ',';
        Int(seg.dst_offset);
        *at_++ = ']';
      }
      Room(8);
      *at_++ = ']';
    }
    Lit("]}");
  }

  const Exchange& ex_;
  std::ostream& out_;
  const int64_t rank_;
  std::optional<ExchangePlan> tables_;
  std::vector<Row> rows_;
  std::vector<int32_t> overlaps_;
  Transfer scratch_;
  std::string buf_;
  char* at_ = nullptr;   // the cursor in buf_
  char* end_ = nullptr;  // buf_'s end
  bool first_ = true;
};

Status WriteTransfers(const Layout& src, const Layout& dst, std::ostream& out) {
  RESHARD_ASSIGN_OR_RETURN(const Exchange ex, Exchange::Create(src, dst));
  return TransferWriter(ex, out).Write();
}

}  // namespace

Status WritePlanJson(const PlanResult& r, const PlanJsonContext& context, std::ostream& out) {
  const CollectivePlan& plan = r.plan;
  const bool single_exchange = plan.steps().size() == 1 && plan.steps()[0].op == StepOp::kExchange;
  // A reducing exchange (from or into partial sums) is one exchange per
  // routed part: its transfers are not listed.
  const bool reducing = single_exchange && (plan.source().partial() || plan.target().partial());
  // per_device is streamed row by row after the rest: it is the only part
  // that grows with the device count (2^24 devices fit in a few MB of memory).
  nlohmann::ordered_json j = PlanJson(r, JsonOptions{.programs = true, .per_device = false});
  j["strategy"] = context.strategy;
  j["topology"] = context.topology;
  j["for"] = context.target;
  const bool list_transfers = single_exchange && !reducing && (context.all_transfers || plan.devices().size() <= 64);
  // The transfers are written as they are produced (WriteTransfers), in
  // their place among the fields: they grow as devices squared.
  if (list_transfers) j["transfers"] = nullptr;
  if (context.candidates) {
    nlohmann::ordered_json cands = nlohmann::ordered_json::array();
    for (const PlanCandidate& c : r.candidates)
      cands.push_back({{"steps", c.steps}, {"modeled_time_us", c.time_us}, {"max_recv_bytes", c.max_recv_bytes},
                       {"peak_bytes", c.peak_bytes}, {"note", c.note}});
    j["candidates"] = cands;
  }
  std::string head = j.dump();
  head.pop_back();  // the closing brace: per_device follows
  if (list_transfers) {
    const size_t at = head.find("\"transfers\":null") + std::string("\"transfers\":").size();
    out << head.substr(0, at);
    RESHARD_RETURN_IF_ERROR(WriteTransfers(plan.source(), plan.target(), out));
    head = head.substr(at + std::string("null").size());
  }
  out << head << ",\"per_device\":[";
  for (size_t i = 0; i < plan.devices().size(); ++i) out << (i ? "," : "") << DeviceJson(plan, i).dump();
  out << "]}\n";
  return Status::Ok();
}

}  // namespace reshard
