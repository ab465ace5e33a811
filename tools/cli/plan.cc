// reshard plan: the cheapest plan of collectives between two layouts under a
// cost model, its cost, the lower bound and the baselines; or the plan
// emitted as HLO, JAX or JSON.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <span>
#include <nlohmann/json.hpp>

#include "common.h"
#include "reshard/emit.h"
#include "reshard/exchange.h"
#include "reshard/plan_stats.h"
#include "reshard/planner.h"

namespace reshard::cli {
namespace {

struct PlanCliOptions {
  PairOptions pair;
  bool transfers = false;
  bool explain = false;
  std::string emit;
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


std::string GroupText(const PlanStep& s) {
  if (s.group_axes.empty()) return "";
  return fmt::format(" over {} ({} of {})", s.group_spec, Plural(s.num_groups, "group"), s.group_size);
}

void PrintExplain(std::ostream& out, const PlanResult& r) {
  out << fmt::format("\ncandidates ({} states explored; memory cap {}):\n", r.states_explored,
                     r.memory_cap_bytes ? FormatBytes(r.memory_cap_bytes) : std::string("none"));
  for (const PlanCandidate& c : r.candidates) {
    out << fmt::format("  {:>10.2f} us  max recv {:>9} B  peak {:>9} B  [{}]\n", c.time_us, c.max_recv_bytes,
                       c.peak_bytes, c.note);
    for (const std::string& step : c.steps) out << "      " << step << "\n";
  }
  for (const BaselineCost& b : r.baselines)
    out << fmt::format("  {:>10.2f} us  max recv {:>9} B  peak {:>9} B  [baseline {}: {}]\n", b.time_us,
                       b.max_recv_bytes, b.peak_bytes, b.name, fmt::join(b.ops, ", "));
}

// Flags that contradict each other, or that the output asked for would ignore, are bad input.
void CheckFlags(const PlanCliOptions& o) {
  if (!o.emit.empty() && o.emit != "hlo" && o.emit != "jax" && o.emit != "json")
    throw CliError(kExitBadInput, fmt::format("--emit: '{}' is not one of hlo, jax, json", Short(o.emit)));
  const bool emitting = o.emit == "hlo" || o.emit == "jax";
  if (emitting && o.pair.common.json)
    throw CliError(kExitBadInput,
                   fmt::format("--json conflicts with --emit {}, which prints the plan as {} instead; give one "
                               "of them",
                               o.emit, o.emit == "hlo" ? "an HLO module" : "a Python module"));
  if (emitting && o.explain)
    throw CliError(
        kExitBadInput,
        fmt::format("--explain conflicts with --emit {}, which prints the plan alone; give one of them", o.emit));
  if (o.transfers && !o.pair.common.json && o.emit != "json")
    throw CliError(kExitBadInput, emitting
                                      ? fmt::format("--transfers conflicts with --emit {}: it lists the transfers in "
                                                    "the JSON output (--json)",
                                                    o.emit)
                                      : std::string("--transfers lists the transfers in the JSON output; add --json"));
}

void RunPlan(const PlanCliOptions& o) {
  CheckFlags(o);
  LayoutPair pair = LoadPair(o.pair);
  const Layout& src = pair.source.layout;
  const Layout& dst = pair.target.layout;
  const bool emitting = o.emit == "hlo" || o.emit == "jax";
  const PlannerOptions options = MakePlannerOptions(o.pair, pair, emitting);
  Result<PlanResult> planned = PlanReshard(src, dst, options);
  if (!planned.ok())
    ThrowIfError(planned.status(), "", planned.status().code() == Status::Code::kNotSupported ? kExitUnmet : kExitBadInput);
  const PlanResult& r = *planned;
  const CollectivePlan& plan = r.plan;
  if (emitting) {
    Result<std::string> text = o.emit == "hlo" ? EmitHlo(plan) : EmitJax(plan);
    ThrowIfError(text.status(), "--emit", kExitUnmet);
    std::cout << *text;
    return;
  }
  const bool single_exchange = plan.steps().size() == 1 && plan.steps()[0].op == StepOp::kExchange;
  // A reducing exchange (from or into partial sums) is one exchange per
  // routed part: its traffic matrix sums them; its transfers are not listed.
  const bool reducing = single_exchange && (src.partial() || dst.partial());
  if (o.transfers && (!single_exchange || reducing))
    throw CliError(kExitBadInput, reducing ? std::string("--transfers: the plan is a reducing exchange (partial sums), "
                                                         "one exchange per routed part; it has no single transfer list")
                   : plan.steps().empty()
                       ? std::string("--transfers: the plan is empty (nothing moves); it has no transfers")
                       : fmt::format("--transfers: the plan is {}, not one exchange; --strategy exchange plans one",
                                     fmt::join(plan.OpNames(), " + ")));
  if (o.pair.common.json || o.emit == "json") {
    const PlanJsonContext context{o.pair.strategy, options.topology.ToString(), std::string(PlanTargetName(options.target)),
                                  o.transfers, o.explain};
    ThrowIfError(WritePlanJson(r, context, std::cout), "--transfers");
    return;
  }

  std::ostream& out = std::cout;
  const PlanTotals& t = plan.totals();
  out << fmt::format("reshard plan: {} on {} (strategy: {}, for: {})\n", FormatShape(src.shape(), src.dtype()),
                     Plural(plan.devices().size(), "device"), o.pair.strategy, PlanTargetName(options.target));
  out << fmt::format("  from {}   [{}]\n  to   {}   [{}]\n", o.pair.from, NotationName(pair.source.notation), o.pair.to,
                     NotationName(pair.target.notation));
  out << fmt::format("  topology {}\n", options.topology.ToString());
  if (plan.mesh() && plan.mesh()->num_axes() > 0) out << fmt::format("  plan mesh {}\n", plan.mesh()->ToString());
  out << "\nsteps:\n";
  int step_no = 0;
  for (const PlanStep& s : plan.steps()) {
    const int64_t recv = s.recv_bytes.Max();
    out << fmt::format("  {}. {}{}: {}\n", ++step_no, StepOpName(s.op), GroupText(s),
                       IsCollective(s.op) ? fmt::format("{} into the busiest device, {:.2f} us", FormatBytes(recv), s.time_us)
                                          : std::string("local, no communication"));
    if (!s.input_spec.empty()) out << fmt::format("     {} -> {}\n", s.input_spec, s.output_spec);
    // A relayed reducing exchange: its first round (Relay, collective_plan.h).
    if (!s.relays.empty()) {
      out << fmt::format("     in two rounds: first {} relayed (a donor's piece combined at a helper, which then sends it "
                         "to the keeper with its own)\n", Plural(s.relays.size(), "piece"));
      for (size_t i = 0; i < s.relays.size() && i < 8; ++i) {
        const Relay& r = s.relays[i];
        out << fmt::format("       device {} -> {} for {}: dim {} below {}, {}\n", r.donor, r.helper, r.keeper, r.dim,
                           r.split, FormatBytes(r.elements * src.element_bytes()));
      }
      if (s.relays.size() > 8) out << fmt::format("       ... {} more\n", s.relays.size() - 8);
    }
  }
  if (step_no == 0) out << "  (nothing to do)\n";
  out << "\nper device (all steps):\n";
  out << fmt::format("  {:>6} {:>10} {:>10} {:>9} {:>10}\n", "device", "send B", "recv B", "msgs o/i", "peak B");
  const size_t shown = std::min<size_t>(plan.devices().size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    const CollectivePlan::DeviceTotals d = plan.TotalsOf(i);
    out << fmt::format("  {:>6} {:>10} {:>10} {:>9} {:>10}\n", plan.devices()[i], d.send_bytes, d.recv_bytes,
                       fmt::format("{}/{}", d.sends, d.recvs), d.peak_bytes);
  }
  if (shown < plan.devices().size()) out << fmt::format("  ... {} more devices\n", plan.devices().size() - shown);
  const LowerBound& lb = r.lower_bound;
  out << fmt::format("\nplan:        max recv {}, total {}, {}, peak {}, {:.2f} us modeled\n", FormatBytes(t.max_recv_bytes),
                     FormatBytes(t.total_bytes), Plural(t.collectives, "collective"), FormatBytes(t.peak_bytes), t.time_us);
  // Where the plan misses the bound's bytes but a candidate over the memory
  // cap meets them (a relayed exchange holds a copy of each shard), say so.
  std::string over_cap;
  if (lb.max_recv_bytes < t.max_recv_bytes)
    for (const PlanCandidate& c : r.candidates)
      if (c.note == "over the memory cap" && c.max_recv_bytes == lb.max_recv_bytes) {
        over_cap = fmt::format("  (a plan holding {} meets it: --memory-cap, see --explain)", FormatBytes(c.peak_bytes));
        break;
      }
  out << fmt::format("lower bound: max recv {}, total {}{}{}\n", FormatBytes(lb.max_recv_bytes), FormatBytes(lb.total_bytes),
                     lb.max_recv_bytes == t.max_recv_bytes && lb.total_bytes == t.total_bytes ? "  (the plan meets it)" : "",
                     over_cap);
  for (const BaselineCost& b : r.baselines)
    out << fmt::format("{}: max recv {}, total {}, {} ({}), peak {}, {:.2f} us modeled\n",
                       b.name == "shardy"             ? "Shardy-style (one axis move at a time)"
                       : b.name == "all_reduce_first" ? "all-reduce first (Shardy's order for partial sums)"
                       : b.name == "dtensor_order"    ? "DTensor's order (one mesh dim at a time)"
                                                      : "full rematerialization (XLA's fallback)",
                       FormatBytes(b.max_recv_bytes), FormatBytes(b.total_bytes), Plural(b.collectives, "collective"),
                       fmt::join(b.ops, ", "), FormatBytes(b.peak_bytes), b.time_us);
  if (t.total_bytes == 0) out << "no data moves between devices\n";
  for (const BaselineCost& b : r.baselines) {
    if (b.name != "full_rematerialization") continue;
    if (t.total_bytes > 0 && t.total_bytes < b.total_bytes)
      out << fmt::format("{:.1f}x less traffic than full rematerialization\n", Ratio(b.total_bytes, t.total_bytes));
  }
  if (r.memory_cap_lifted)
    out << "memory cap: none (no plan fits the default cap; see --explain)\n";
  if (o.explain) PrintExplain(out, r);
  if (single_exchange && plan.devices().size() <= 4096) {
    std::vector<Exchange> parts;
    if (reducing)
      parts = Exchange::CreateReducing(src, dst).value();
    else
      parts.push_back(Exchange::Create(src, dst).value());
    TrafficMatrix matrix(parts.front().devices());
    // A relayed exchange: its pieces go to their helpers, the rest as direct delivery.
    const std::vector<Relay>& relays = plan.steps().front().relays;
    for (const Exchange& ex : parts)
      ex.ForEachTransfer([&](const Transfer& tr) {
        matrix.Add(tr.from, tr.to, RoundTwoOf(relays, tr).elements * src.element_bytes());
      });
    for (const Relay& rl : relays) matrix.Add(rl.donor, rl.helper, rl.elements * src.element_bytes());
    out << "\n";
    matrix.Print(out);
  }
}

}  // namespace

void RegisterPlan(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "plan the cheapest sequence of collectives between two layouts");
  AddPairOptions(cmd, o->pair);
  cmd->add_flag(
      "--transfers", o->transfers,
      "with --json and a one-step exchange plan: list every transfer with its runs (default: up to 64 devices); "
      "requires --json or --emit json");
  cmd->add_flag("--explain", o->explain,
                "list the candidate plans the search priced, and the baselines (not with --emit hlo|jax)");
  cmd->add_option("--emit", o->emit,
                  "print the plan as: hlo (an HLO module per device), jax (a Python module with reshard(x, mesh)), "
                  "json (as --json)");
  cmd->callback([o]() { RunPlan(*o); });
}

}  // namespace reshard::cli
