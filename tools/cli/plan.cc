// reshard plan: the minimal exchange between two layouts, its cost, the lower
// bound and XLA's full-rematerialization baseline.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "common.h"
#include "reshard/exchange.h"
#include "reshard/plan_stats.h"

namespace reshard::cli {
namespace {

struct PlanCliOptions {
  PairOptions pair;
  bool transfers = false;
};

// Bytes between buckets of devices (rows: senders, columns: receivers). With
// more devices than kMaxBuckets, consecutive devices share a bucket.
struct TrafficMatrix {
  static constexpr size_t kMaxBuckets = 32;
  std::vector<int64_t> devices;
  size_t per_bucket = 1, buckets = 0;
  std::vector<int64_t> bytes;  // buckets x buckets

  explicit TrafficMatrix(const std::vector<int64_t>& devs) : devices(devs) {
    per_bucket = (devs.size() + kMaxBuckets - 1) / kMaxBuckets;
    if (per_bucket == 0) per_bucket = 1;
    buckets = (devs.size() + per_bucket - 1) / per_bucket;
    bytes.assign(buckets * buckets, 0);
  }
  size_t Bucket(int64_t dev) const {
    return static_cast<size_t>(std::lower_bound(devices.begin(), devices.end(), dev) - devices.begin()) / per_bucket;
  }
  void Add(int64_t from, int64_t to, int64_t b) {
    if (from != to) bytes[Bucket(from) * buckets + Bucket(to)] += b;
  }
  void Print(std::ostream& out) const {
    if (buckets == 0) return;
    int64_t max = *std::max_element(bytes.begin(), bytes.end());
    out << fmt::format("traffic (row sends to column{}):\n",
                       per_bucket > 1 ? fmt::format("; each row/column is {} consecutive devices", per_bucket) : "");
    if (buckets <= 16 && per_bucket == 1) {
      const size_t w = std::max<size_t>(5, fmt::format("{}", max).size() + 1);
      out << fmt::format("{:>6}", "");
      for (size_t c = 0; c < buckets; ++c) out << fmt::format("{:>{}}", devices[c], w);
      out << "\n";
      for (size_t r = 0; r < buckets; ++r) {
        out << fmt::format("{:>6}", devices[r]);
        for (size_t c = 0; c < buckets; ++c) {
          const int64_t b = bytes[r * buckets + c];
          out << fmt::format("{:>{}}", r == c ? "." : b == 0 ? "-" : fmt::format("{}", b), w);
        }
        out << "\n";
      }
      return;
    }
    static const char kShades[] = " .:-=+*#%@";
    for (size_t r = 0; r < buckets; ++r) {
      out << fmt::format("{:>6} |", devices[r * per_bucket]);
      for (size_t c = 0; c < buckets; ++c) {
        const int64_t b = bytes[r * buckets + c];
        const int shade = b == 0 || max == 0 ? 0 : 1 + static_cast<int>((8.0 * b) / max);
        out << kShades[std::min(shade, 9)] << kShades[std::min(shade, 9)];
      }
      out << "|\n";
    }
    out << fmt::format("       (darkest = {} per cell)\n", FormatBytes(max));
  }
};

double Ratio(int64_t a, int64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b); }

void RunPlan(const PlanCliOptions& o) {
  LayoutPair pair = LoadPair(o.pair);
  const Layout& src = pair.source.layout;
  const Layout& dst = pair.target.layout;
  Result<Exchange> ex = Exchange::Create(src, dst);
  ThrowIfError(ex.status(), "");
  TrafficMatrix matrix(ex->devices());
  int64_t local_copies = 0;
  bool uniform = true;
  int64_t first_size = -1;
  // One pass over the plan gives the stats, the traffic matrix and the step shapes.
  const PlanStats stats = ComputeStats(*ex, [&](const Transfer& t) {
    const int64_t b = t.elements * src.element_bytes();
    matrix.Add(t.from, t.to, b);
    if (t.from == t.to) { ++local_copies; return; }
    if (first_size < 0) first_size = b;
    uniform = uniform && b == first_size;
  });
  const LowerBound lb = ComputeLowerBound(src, dst);
  const Baseline base = FullRematerialization(src, dst);
  const bool list_transfers = o.transfers || (o.pair.common.json && ex->devices().size() <= 64);
  nlohmann::ordered_json transfers = nlohmann::ordered_json::array();
  // All-to-all-v is uniform only if every pair of participants exchanges the same amount.
  uniform = uniform && stats.messages == static_cast<int64_t>(ex->devices().size() * (ex->devices().size() - 1));

  if (o.pair.common.json) {
    nlohmann::ordered_json steps = nlohmann::ordered_json::array();
    if (stats.messages > 0)
      steps.push_back({{"op", "all-to-all"},
                       {"variant", uniform ? "uniform" : "all-to-all-v"},
                       {"messages", stats.messages},
                       {"bytes", stats.total_bytes}});
    if (stats.local_bytes > 0) steps.push_back({{"op", "copy"}, {"copies", local_copies}, {"bytes", stats.local_bytes}});
    nlohmann::ordered_json per_device = nlohmann::ordered_json::array();
    for (const DeviceStats& d : stats.per_device)
      per_device.push_back({{"id", d.device}, {"send_bytes", d.send_bytes}, {"recv_bytes", d.recv_bytes},
                            {"local_bytes", d.local_bytes}, {"sends", d.sends}, {"recvs", d.recvs},
                            {"source_bytes", d.source_bytes}, {"target_bytes", d.target_bytes}, {"peak_bytes", d.peak_bytes}});
    nlohmann::ordered_json j = {
        {"shape", src.shape()},
        {"dtype", std::string(DTypeName(src.dtype()))},
        {"devices", stats.devices},
        {"strategy", o.pair.strategy},
        {"steps", steps},
        {"stats",
         {{"collectives", stats.collectives}, {"messages", stats.messages}, {"max_send_bytes", stats.max_send_bytes},
          {"max_recv_bytes", stats.max_recv_bytes}, {"total_bytes", stats.total_bytes}, {"local_bytes", stats.local_bytes},
          {"peak_bytes", stats.peak_bytes}}},
        {"lower_bound", {{"max_recv_bytes", lb.max_recv_bytes}, {"total_bytes", lb.total_bytes}}},
        {"baseline_full_remat",
         {{"max_recv_bytes", base.max_recv_bytes}, {"total_bytes", base.total_bytes}, {"peak_bytes", base.peak_bytes}}},
        {"per_device", per_device}};
    if (list_transfers) {
      // Each transfer with what it moves: per dim, runs [global_lo, length,
      // offset in the sender's source buffer, offset in the receiver's target
      // buffer]; the elements moved are their cross product.
      const ExchangePlan plan = ex->Plan();
      for (const Transfer& t : plan.transfers()) {
        nlohmann::ordered_json dims = nlohmann::ordered_json::array();
        for (int64_t d = 0; d < src.rank(); ++d) {
          nlohmann::ordered_json runs = nlohmann::ordered_json::array();
          for (const Segment& seg : plan.Segments(t, d)) runs.push_back({seg.global_lo, seg.length, seg.src_offset, seg.dst_offset});
          dims.push_back(runs);
        }
        transfers.push_back({{"from", t.from}, {"to", t.to}, {"bytes", plan.Bytes(t)}, {"runs", dims}});
      }
      j["transfers"] = transfers;
    }
    std::cout << j.dump() << "\n";
    return;
  }

  std::ostream& out = std::cout;
  out << fmt::format("reshard plan: {} on {} (strategy: {})\n", FormatShape(src.shape(), src.dtype()),
                     Plural(ex->devices().size(), "device"), o.pair.strategy);
  out << fmt::format("  from {}   [{}]\n  to   {}   [{}]\n\n", o.pair.from, NotationName(pair.source.notation), o.pair.to,
                     NotationName(pair.target.notation));
  out << "steps:\n";
  int step = 0;
  if (stats.messages > 0)
    out << fmt::format("  {}. all-to-all{}  {}, {} in total\n", ++step, uniform ? "" : " (variable sizes: all-to-all-v)",
                       Plural(stats.messages, "message"), FormatBytes(stats.total_bytes));
  if (stats.local_bytes > 0)
    out << fmt::format("  {}. copy        {}, {} (no communication)\n", ++step, (local_copies == 1 ? std::string("1 local copy") : fmt::format("{} local copies", local_copies)),
                       FormatBytes(stats.local_bytes));
  if (step == 0) out << "  (nothing to do)\n";
  out << "\nper device:\n";
  out << fmt::format("  {:>6} {:>10} {:>10} {:>10} {:>9} {:>10}\n", "device", "send B", "recv B", "local B", "msgs o/i", "peak B");
  const size_t shown = std::min<size_t>(stats.per_device.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    const DeviceStats& d = stats.per_device[i];
    out << fmt::format("  {:>6} {:>10} {:>10} {:>10} {:>9} {:>10}\n", d.device, d.send_bytes, d.recv_bytes, d.local_bytes,
                       fmt::format("{}/{}", d.sends, d.recvs), d.peak_bytes);
  }
  if (shown < stats.per_device.size()) out << fmt::format("  ... {} more devices\n", stats.per_device.size() - shown);
  out << fmt::format("\nplan:                   max recv {}, total {}, max send {}, peak {}\n", FormatBytes(stats.max_recv_bytes),
                     FormatBytes(stats.total_bytes), FormatBytes(stats.max_send_bytes), FormatBytes(stats.peak_bytes));
  out << fmt::format("lower bound:            max recv {}, total {}{}\n", FormatBytes(lb.max_recv_bytes), FormatBytes(lb.total_bytes),
                     lb.max_recv_bytes == stats.max_recv_bytes && lb.total_bytes == stats.total_bytes ? "  (the plan meets it)" : "");
  out << fmt::format("full rematerialization: max recv {}, total {}, peak {}\n", FormatBytes(base.max_recv_bytes),
                     FormatBytes(base.total_bytes), FormatBytes(base.peak_bytes));
  if (stats.total_bytes > 0 && stats.total_bytes == base.total_bytes)
    out << "the same traffic as full rematerialization, ";
  else if (stats.total_bytes > 0)
    out << fmt::format("{:.1f}x less traffic than full rematerialization, ", Ratio(base.total_bytes, stats.total_bytes));
  else
    out << "no data moves between devices, ";
  // The plan's peak counts source, target and staging buffers; the baseline's only the gathered array.
  if (stats.peak_bytes <= base.peak_bytes)
    out << fmt::format("{:.1f}x less peak memory\n", Ratio(base.peak_bytes, stats.peak_bytes));
  else
    out << fmt::format("{:.1f}x more peak memory (the plan counts source, target and staging buffers; the baseline only "
                       "the gathered array)\n", Ratio(stats.peak_bytes, base.peak_bytes));
  out << "\n";
  matrix.Print(out);
}

}  // namespace

void RegisterPlan(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "plan the minimal exchange between two layouts");
  AddPairOptions(cmd, o->pair);
  cmd->add_flag("--transfers", o->transfers,
                "list every transfer (local copies included) with its runs in --json output (default: up to 64 devices)");
  cmd->callback([o]() { RunPlan(*o); });
}

}  // namespace reshard::cli
