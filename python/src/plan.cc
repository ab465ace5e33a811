// plan(), PlanResult, Step and the emitters, as Python types. Conversions
// only; errors follow the rule in bindings.h.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "bindings.h"
#include "reshard/byte_count.h"
#include "reshard/collective_plan.h"
#include "reshard/emit.h"
#include "reshard/exchange.h"
#include "reshard/planner.h"
#include "reshard/topology.h"

namespace nb = nanobind;

namespace reshard::python {
namespace {

// A plan with the options it was made under (the JSON names them, as the CLI's does).
struct Plan {
  PlanResult result;
  std::string strategy, topology, backend;
};

// One step, with the plan-mesh axis names its groups and programs refer to.
struct Step {
  PlanStep step;
  std::vector<std::string> axis_names;
  std::vector<int64_t> mesh_ids;  // plan-mesh position -> device id (empty: explicit layouts)
  std::vector<int64_t> devices;   // the plan's devices (explicit layouts: pair positions index these)

  std::vector<std::string> Names(const std::vector<int32_t>& axes) const {
    std::vector<std::string> out;
    for (int32_t a : axes) out.push_back(axis_names[a]);
    return out;
  }
  int64_t DeviceAt(int64_t position) const { return mesh_ids.empty() ? devices[position] : mesh_ids[position]; }
};

nb::dict OpDict(const Step& s, const ProgramOp& op) {
  nb::dict d;
  d["op"] = std::string(ProgramOpName(op.kind));
  d["shape"] = op.shape;
  if (op.kind == ProgramOp::Kind::kTranspose) d["perm"] = op.perm;
  if (op.kind == ProgramOp::Kind::kDynamicSlice) d["dim"] = op.dim;
  if (op.kind == ProgramOp::Kind::kReduceScatter || op.kind == ProgramOp::Kind::kAllReduce)
    d["reduce"] = std::string(ReduceOpName(op.reduce));
  if (!op.axes.empty()) d["axes"] = s.Names(op.axes);
  if (op.kind == ProgramOp::Kind::kCollectivePermute) {
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (const auto& [a, b] : op.pairs) pairs.emplace_back(s.DeviceAt(a), s.DeviceAt(b));
    d["source_target_pairs"] = pairs;
  }
  return d;
}

// Per dim, the (offset, length) runs of a transfer in the sender's (src) or
// receiver's (dst) local buffer.
using Runs = std::vector<std::vector<std::pair<int64_t, int64_t>>>;
// With `clip`, what it keeps of the transfer (a relay's piece: Relay,
// collective_plan.h).
Runs TransferRuns(const ExchangePlan& xp, const Transfer& t, bool src, const TransferClip& clip = {}) {
  Runs out(xp.source().rank());
  for (int64_t d = 0; d < xp.source().rank(); ++d)
    for (const Segment& whole : xp.Segments(t, d)) {
      const Segment g = clip.Apply(whole, d);
      if (g.length > 0) out[d].emplace_back(src ? g.src_offset : g.dst_offset, g.length);
    }
  return out;
}

nb::dict DeviceExchange(const Step& s, int64_t device) {
  // The exchanges the simulator and the compiled programs lower an exchange
  // op through: between the step's own input and output layouts, or from
  // partial sums or into them one per part (Exchange::CreateReducing).
  const bool reducing = (s.step.input.partial() || s.step.output.partial()) && !(s.step.input == s.step.output);
  std::vector<Exchange> exchanges;
  if (reducing)
    exchanges = Unwrap(Exchange::CreateReducing(s.step.input, s.step.output));
  else
    exchanges.push_back(Unwrap(Exchange::Create(s.step.input.WithoutReduction(), s.step.output.WithoutReduction())));
  struct Message {
    int64_t peer;
    Runs runs;
    int64_t part;
  };
  std::vector<Message> send, recv;
  std::vector<std::pair<Runs, Runs>> local;
  for (size_t part = 0; part < exchanges.size(); ++part) {
    const ExchangePlan xp = exchanges[part].DevicePlan(device);
    const int64_t p = static_cast<int64_t>(part);
    for (const Transfer& t : xp.transfers()) {
      // A relayed transfer (round 2) without the piece its helper carries; none where that is all of it.
      const RoundTwoTransfer kept = RoundTwoOf(s.step.relays, t);
      if (kept.elements == 0) continue;
      const TransferClip& clip = kept.clip;
      if (t.from == device && t.to == device) local.emplace_back(TransferRuns(xp, t, true), TransferRuns(xp, t, false));
      else if (t.from == device) send.push_back({t.to, TransferRuns(xp, t, true, clip), p});
      else if (t.to == device) recv.push_back({t.from, TransferRuns(xp, t, false, clip), p});
    }
  }
  // Round 1 of a relayed exchange: each relay's piece from its donor into
  // its helper's copy of the same tile (source-side runs on both ends), and
  // combined there by the source's op (avg as a sum).
  std::vector<Message> relay_send, relay_recv;
  for (const Relay& r : s.step.relays) {
    if (r.donor != device && r.helper != device) continue;
    const std::optional<DonorTransfer> piece = DonorTransferOf(exchanges, r);
    if (!piece) Raise(Status::Internal("a relay's donor sends its keeper nothing"));
    Message m{r.donor == device ? r.helper : r.donor, TransferRuns(piece->plan, piece->transfer(), true, RoundOneClip(r)), 0};
    (r.donor == device ? relay_send : relay_recv).push_back(std::move(m));
  }
  // Ascending peer: the order of an all-to-all-v's chunks (a peer sends in one part only).
  auto by_peer = [](const Message& a, const Message& b) { return a.peer < b.peer; };
  std::stable_sort(send.begin(), send.end(), by_peer);
  std::stable_sort(recv.begin(), recv.end(), by_peer);
  auto listed = [](const std::vector<Message>& v) {
    std::vector<std::pair<int64_t, Runs>> out;
    for (const Message& m : v) out.emplace_back(m.peer, m.runs);
    return out;
  };
  nb::dict d;
  d["send"] = listed(send);
  d["recv"] = listed(recv);
  d["local"] = local;
  if (!s.step.relays.empty()) {
    std::stable_sort(relay_send.begin(), relay_send.end(), by_peer);
    std::stable_sort(relay_recv.begin(), relay_recv.end(), by_peer);
    d["relay_send"] = listed(relay_send);
    d["relay_recv"] = listed(relay_recv);
  }
  if (reducing) {
    std::vector<int64_t> recv_parts;
    for (const Message& m : recv) recv_parts.push_back(m.part);
    const PartRoutes routes = Exchange::RouteParts(s.step.input, s.step.output);
    d["parts"] = s.step.input.reduction().parts;
    d["reduce"] = std::string(ReduceOpName(routes.combine));
    d["scale"] = routes.scale;  // an avg target's parts: what they multiply their combined value by
    d["recv_parts"] = recv_parts;
    d["local_part"] = s.step.input.PartOf(device);
    // A partial target's device no part is routed to holds the identity of the target's op.
    const Layout& out = s.step.output;
    d["fill"] = routes.Fills(out, device) ? nb::object(nb::str(std::string(ReduceOpName(routes.fill)).c_str())) : nb::none();
  }
  return d;
}

std::vector<int64_t> PerDevice(const DeviceValues& v) {
  std::vector<int64_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i];
  return out;
}

nb::dict BaselineDict(const BaselineCost& b) {
  nb::dict d;
  d["name"] = b.name;
  d["max_recv_bytes"] = b.max_recv_bytes;
  d["total_bytes"] = b.total_bytes;
  d["collectives"] = b.collectives;
  d["peak_bytes"] = b.peak_bytes;
  d["modeled_time_us"] = b.time_us;
  d["ops"] = b.ops;
  return d;
}

Plan MakePlan(const Layout& source, const Layout& target, const std::string& strategy, const std::string& topology,
              const std::string& backend, int64_t memory_cap, bool bandwidth_only, const std::vector<Mesh>& meshes) {
  PlannerOptions o;
  o.strategy = Unwrap(ParseStrategy(strategy));
  o.topology = Unwrap(Topology::Parse(topology));
  if (bandwidth_only) o.topology = o.topology.BandwidthOnly();
  o.target = Unwrap(ParsePlanTarget(backend));
  if (memory_cap < 0) Raise(Status::InvalidArgument("memory_cap: " + std::to_string(memory_cap) + " must be >= 0"));
  o.memory_cap_bytes = memory_cap;
  o.meshes = meshes;
  Plan p{Unwrap(PlanReshard(source, target, o)), std::string(StrategyName(o.strategy)), o.topology.ToString(),
         std::string(PlanTargetName(o.target))};
  return p;
}

std::vector<Step> Steps(const Plan& p) {
  const CollectivePlan& plan = p.result.plan;
  std::vector<std::string> names;
  std::vector<int64_t> ids;
  if (plan.mesh()) {
    for (const Mesh::Axis& a : plan.mesh()->axes()) names.push_back(a.name);
    ids = plan.mesh()->DeviceIds();
  }
  std::vector<Step> out;
  for (const PlanStep& s : plan.steps()) out.push_back(Step{s, names, ids, plan.devices()});
  return out;
}

}  // namespace

void BindPlan(nb::module_& m) {
  nb::class_<Step>(m, "Step", "One step of a plan: a collective over a group, or a local slice.")
      .def_prop_ro("op", [](const Step& s) { return std::string(StepOpName(s.step.op)); },
                   "'all-to-all', 'all-gather', 'collective-permute', 'reduce-scatter', 'all-reduce', 'exchange', "
                   "'slice', 'pad' or 'copy'")
      .def_prop_ro("is_collective", [](const Step& s) { return IsCollective(s.step.op); })
      .def_prop_ro("group", [](const Step& s) { return s.Names(s.step.group_axes); },
                   "plan-mesh axes of the group, in member order; [] for local steps and the exchange")
      .def_prop_ro("group_spec", [](const Step& s) { return s.step.group_spec; })
      .def_prop_ro("group_size", [](const Step& s) { return s.step.group_size; })
      .def_prop_ro("num_groups", [](const Step& s) { return s.step.num_groups; })
      .def_prop_ro("input_spec", [](const Step& s) { return s.step.input_spec; }, "'[{y}, {}, {x}]' over the plan mesh")
      .def_prop_ro("output_spec", [](const Step& s) { return s.step.output_spec; })
      .def_prop_ro("input_shard", [](const Step& s) { return s.step.input_shard; }, "padded local shape before")
      .def_prop_ro("output_shard", [](const Step& s) { return s.step.output_shard; }, "padded local shape after")
      .def_prop_ro("input", [](const Step& s) { return s.step.input; })
      .def_prop_ro("output", [](const Step& s) { return s.step.output; })
      .def_prop_ro("program",
                   [](const Step& s) {
                     nb::list out;
                     for (const ProgramOp& op : s.step.program) out.append(OpDict(s, op));
                     return out;
                   },
                   "the SPMD program every device runs (docs/plan_format.md#program)")
      .def_prop_ro("relays",
                   [](const Step& s) {
                     nb::list out;
                     for (const Relay& r : s.step.relays) {
                       nb::dict d;
                       d["donor"] = r.donor;
                       d["helper"] = r.helper;
                       d["keeper"] = r.keeper;
                       d["dim"] = r.dim;
                       d["split"] = r.split;
                       d["bytes"] = r.elements * s.step.input.element_bytes();
                       out.append(d);
                     }
                     return out;
                   },
                   "a relayed reducing exchange's first round (docs/plan_format.md): per relay, the donor's piece of "
                   "the keeper's rows below `split` along `dim`, sent to the helper; [] elsewhere")
      .def_prop_ro("max_recv_bytes", [](const Step& s) { return s.step.recv_bytes.Max(); })
      .def_prop_ro("max_send_bytes", [](const Step& s) { return s.step.send_bytes.Max(); })
      .def_prop_ro("total_bytes", [](const Step& s) { return s.step.recv_bytes.Sum(); })
      .def_prop_ro("peak_bytes", [](const Step& s) { return s.step.peak_bytes.Max(); })
      .def_prop_ro("recv_bytes", [](const Step& s) { return PerDevice(s.step.recv_bytes); },
                   "per device of the plan (PlanResult.devices order)")
      .def_prop_ro("send_bytes", [](const Step& s) { return PerDevice(s.step.send_bytes); })
      .def_prop_ro("modeled_time_us", [](const Step& s) { return s.step.time_us; })
      .def("exchange", &DeviceExchange, nb::arg("device"),
           "one device's part of the minimal exchange from this step's input to its output layout (what an "
           "'exchange' program op moves; from or into partial sums, each part's, with 'parts', 'reduce' (how a "
           "receiver combines), 'scale' (what a receiver then multiplies what it combined by: an avg target's "
           "part count where its parts are not routed one to one, else 1), 'local_part', 'fill' (the op whose identity a partial target's device holds "
           "where nothing routed to it lands: everywhere if it receives nothing, else outside its received and "
           "local runs; None where it holds none) and 'recv_parts', the part of each received message, added: combine "
           "element by element in part order, the first part landing on an element written, later ones combined "
           "with it): {'send': [(peer, runs)], "
           "'recv': [(peer, runs)], 'local': [(src_runs, "
           "dst_runs)]}, where runs lists per dim the (offset, length) runs in the device's local buffer; a "
           "message's elements are the cross product of its runs, row-major, the same order on both sides")
      .def("__repr__", [](const Step& s) {
        std::string text = "<reshard.Step " + std::string(StepOpName(s.step.op));
        if (!s.step.group_spec.empty()) text += " over " + s.step.group_spec;
        if (!s.step.input_spec.empty()) text += ": " + s.step.input_spec + " -> " + s.step.output_spec;
        return text + ">";
      });

  nb::class_<Plan>(m, "PlanResult", "A collective plan with its costs, lower bound and baselines. Immutable.")
      .def_prop_ro("steps", &Steps)
      .def_prop_ro("op_names", [](const Plan& p) { return p.result.plan.OpNames(); })
      .def_prop_ro("source", [](const Plan& p) { return p.result.plan.source(); })
      .def_prop_ro("target", [](const Plan& p) { return p.result.plan.target(); })
      .def_prop_ro("devices", [](const Plan& p) { return p.result.plan.devices(); }, "every device of either layout, ascending")
      .def_prop_ro("mesh", [](const Plan& p) { return p.result.plan.mesh(); },
                   "the plan mesh (axes cut into pieces where needed), or None for explicit layouts")
      .def_prop_ro("axis_labels", [](const Plan& p) { return p.result.plan.axis_labels(); })
      .def_prop_ro("stats",
                   [](const Plan& p) {
                     const PlanTotals& t = p.result.plan.totals();
                     nb::dict d;
                     d["collectives"] = t.collectives;
                     d["max_send_bytes"] = t.max_send_bytes;
                     d["max_recv_bytes"] = t.max_recv_bytes;
                     d["total_bytes"] = t.total_bytes;
                     d["peak_bytes"] = t.peak_bytes;
                     d["modeled_time_us"] = t.time_us;
                     return d;
                   })
      .def_prop_ro("modeled_time_us", [](const Plan& p) { return p.result.plan.totals().time_us; })
      .def_prop_ro("lower_bound",
                   [](const Plan& p) {
                     nb::dict d;
                     d["max_recv_bytes"] = p.result.lower_bound.max_recv_bytes;
                     d["total_bytes"] = p.result.lower_bound.total_bytes;
                     return d;
                   })
      .def_prop_ro("baselines",
                   [](const Plan& p) {
                     nb::list out;
                     for (const BaselineCost& b : p.result.baselines) out.append(BaselineDict(b));
                     return out;
                   },
                   "'full_rematerialization' (XLA's fallback) and 'shardy' (one axis move at a time), or from partial "
                   "sums 'all_reduce_first', priced alike")
      .def_prop_ro("candidates",
                   [](const Plan& p) {
                     nb::list out;
                     for (const PlanCandidate& c : p.result.candidates) {
                       nb::dict d;
                       d["steps"] = c.steps;
                       d["modeled_time_us"] = c.time_us;
                       d["max_recv_bytes"] = c.max_recv_bytes;
                       d["peak_bytes"] = c.peak_bytes;
                       d["note"] = c.note;
                       out.append(d);
                     }
                     return out;
                   })
      .def_prop_ro("memory_cap_bytes", [](const Plan& p) { return p.result.memory_cap_bytes; })
      .def_prop_ro("states_explored", [](const Plan& p) { return p.result.states_explored; })
      .def_prop_ro("strategy", [](const Plan& p) { return p.strategy; })
      .def_prop_ro("topology", [](const Plan& p) { return p.topology; })
      .def_prop_ro("backend", [](const Plan& p) { return p.backend; }, "where the plan runs ('--for')")
      .def(
          "per_device",
          [](const Plan& p) {
            nb::list out;
            for (size_t i = 0; i < p.result.plan.devices().size(); ++i) {
              const CollectivePlan::DeviceTotals t = p.result.plan.TotalsOf(i);
              nb::dict d;
              d["id"] = p.result.plan.devices()[i];
              d["send_bytes"] = t.send_bytes;
              d["recv_bytes"] = t.recv_bytes;
              d["sends"] = t.sends;
              d["recvs"] = t.recvs;
              d["peak_bytes"] = t.peak_bytes;
              out.append(d);
            }
            return out;
          },
          "per device, over all steps: send/recv bytes, messages, peak")
      .def(
          "emit",
          [](const Plan& p, const std::string& format) {
            if (format == "hlo") return Unwrap(EmitHlo(p.result.plan));
            if (format == "jax") return Unwrap(EmitJax(p.result.plan));
            if (format == "json") {  // `reshard plan --json`'s text, written by the same function
              std::ostringstream out;
              const Status written = WritePlanJson(p.result, PlanJsonContext{p.strategy, p.topology, p.backend}, out);
              if (!written.ok()) Raise(written);
              std::string text = out.str();
              if (!text.empty() && text.back() == '\n') text.pop_back();
              return text;
            }
            Raise(Status::InvalidArgument("emit: '" + format + "' is not one of hlo, jax, json"));
          },
          nb::arg("format"),
          "the plan as 'hlo' (an HLO module), 'jax' (a module defining reshard(x, mesh)) or 'json' "
          "(docs/plan_format.md). HLO and JAX raise NotImplementedError for a plan with a ragged exchange step.")
      .def("__repr__", [](const Plan& p) {
        std::string ops;
        for (const std::string& o : p.result.plan.OpNames()) ops += (ops.empty() ? "" : ", ") + o;
        return "<reshard.PlanResult [" + ops + "], max recv " + std::to_string(p.result.plan.totals().max_recv_bytes) +
               " B>";
      });

  m.def("plan", &MakePlan, nb::arg("source"), nb::arg("target"), nb::arg("strategy") = "auto",
        nb::arg("topology") = "flat", nb::arg("backend") = "any", nb::arg("memory_cap") = 0,
        nb::arg("bandwidth_only") = false, nb::arg("meshes") = std::vector<Mesh>{},
        "The cheapest plan of collectives from source to target (PlanReshard). strategy: auto, exchange, "
        "collectives; topology: flat, nodes:K, torus:AxB[xC]; backend: any, xla, jax-cpu, jax-gpu, mpi, nccl; "
        "memory_cap: bytes per device (0: the default); bandwidth_only: price plans by received bytes alone; "
        "meshes: meshes to try first for the plan mesh.");
  m.def(
      "lower_bound",
      [](const Layout& source, const Layout& target) {
        if (source.shape() != target.shape() || source.dtype() != target.dtype())
          Raise(Status::InvalidArgument("source and target layouts differ in shape or dtype"));
        const LowerBound lb = ComputeLowerBound(source, target);
        nb::dict d;
        d["max_recv_bytes"] = lb.max_recv_bytes;
        d["total_bytes"] = lb.total_bytes;
        return d;
      },
      nb::arg("source"), nb::arg("target"),
      "What any plan must receive, from the layouts alone: {'max_recv_bytes', 'total_bytes'}. Where a layout "
      "carries a pending reduction, the bound counts what combining partial values needs (docs/cost_model.md).");
  m.def(
      "parse_byte_count", [](const std::string& text) { return Unwrap(ParseByteCount(text)); }, nb::arg("text"),
      "A byte count as the CLI's --memory-cap reads it: '65536', '64K', '1.5M', '2G', '1T' (KiB..TiB too); "
      "ValueError naming the column.");
  m.attr("MAX_BYTE_COUNT") = kMaxByteCount;
}

}  // namespace reshard::python
