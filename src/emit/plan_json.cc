// The plan as JSON (docs/plan_format.md).
#include <fmt/format.h>

#include "reshard/emit.h"
#include "reshard/notation.h"

namespace reshard {
namespace {

using Json = nlohmann::ordered_json;

Json LayoutJson(const CollectivePlan& plan, const Layout& layout, const std::string& spec,
                const std::vector<int64_t>& shard) {
  Json j = Json::object();
  if (!spec.empty()) j["spec"] = spec;
  Result<std::string> hlo = PrintLayout(layout, Notation::kHlo, plan.mesh());
  if (hlo.ok()) j["hlo"] = *hlo;
  j["shard"] = shard;
  return j;
}

Json ProgramJson(const CollectivePlan& plan, const ProgramOp& op) {
  Json j = {{"op", std::string(ProgramOpName(op.kind))}, {"shape", op.shape}};
  if (op.kind == ProgramOp::Kind::kTranspose) j["perm"] = op.perm;
  if (op.kind == ProgramOp::Kind::kDynamicSlice) j["dim"] = op.dim;
  if (op.kind == ProgramOp::Kind::kReduceScatter || op.kind == ProgramOp::Kind::kAllReduce)
    j["reduce"] = std::string(ReduceOpName(op.reduce));
  if (!op.axes.empty()) {
    Json axes = Json::array();
    for (int32_t a : op.axes) axes.push_back(plan.mesh()->axes()[a].name);
    j["axes"] = axes;
  }
  return j;
}

}  // namespace

Json DeviceJson(const CollectivePlan& plan, size_t i) {
  const CollectivePlan::DeviceTotals t = plan.TotalsOf(i);
  const int64_t dev = plan.devices()[i];
  return {{"id", dev},
          {"send_bytes", t.send_bytes},
          {"recv_bytes", t.recv_bytes},
          {"sends", t.sends},
          {"recvs", t.recvs},
          {"source_bytes", plan.source().LocalBytes(dev)},
          {"target_bytes", plan.target().LocalBytes(dev)},
          {"peak_bytes", t.peak_bytes}};
}

Json PlanJson(const PlanResult& r, const JsonOptions& o) {
  const CollectivePlan& plan = r.plan;
  const Layout& src = plan.source();
  Json steps = Json::array();
  for (const PlanStep& s : plan.steps()) {
    Json j = {{"op", std::string(StepOpName(s.op))}};
    if (!s.group_axes.empty()) {
      Json axes = Json::array();
      for (int32_t a : s.group_axes) axes.push_back(plan.mesh()->axes()[a].name);
      j["group"] = {{"axes", axes}, {"size", s.group_size}, {"count", s.num_groups},
                    {"replica_groups", ReplicaGroupsText(plan, s.group_axes)}};
    }
    if (s.op == StepOp::kAllToAll && s.group_size > 0)
      j["chunk_bytes"] = s.send_bytes.Max() / std::max<int64_t>(1, s.group_size - 1);
    if (s.op == StepOp::kCollectivePermute) {
      for (const ProgramOp& op : s.program) {
        if (op.kind != ProgramOp::Kind::kCollectivePermute) continue;
        Json pairs = Json::array();
        for (size_t i = 0; i < op.pairs.size() && i < o.max_pairs; ++i)
          pairs.push_back(plan.mesh() ? Json{plan.mesh()->device(op.pairs[i].first), plan.mesh()->device(op.pairs[i].second)}
                                      : Json{plan.devices()[op.pairs[i].first], plan.devices()[op.pairs[i].second]});
        j["source_target_pairs"] = pairs;
        j["pairs"] = op.pairs.size();
      }
    }
    if (!s.relays.empty()) {
      // A relayed reducing exchange's round 1 (Relay, collective_plan.h).
      Json relays = Json::array();
      for (const Relay& r : s.relays)
        relays.push_back({{"donor", r.donor}, {"helper", r.helper}, {"keeper", r.keeper}, {"dim", r.dim},
                          {"split", r.split}, {"bytes", r.elements * src.element_bytes()}});
      j["relays"] = relays;
    }
    j["messages"] = s.sends.Sum();
    j["max_recv_bytes"] = s.recv_bytes.Max();
    j["total_bytes"] = s.recv_bytes.Sum();
    j["modeled_time_us"] = s.time_us;
    j["peak_bytes"] = s.peak_bytes.Max();
    j["input"] = LayoutJson(plan, s.input, s.input_spec, s.input_shard);
    j["output"] = LayoutJson(plan, s.output, s.output_spec, s.output_shard);
    if (o.programs) {
      Json prog = Json::array();
      for (const ProgramOp& op : s.program) prog.push_back(ProgramJson(plan, op));
      j["program"] = prog;
    }
    steps.push_back(std::move(j));
  }
  const PlanTotals& t = plan.totals();
  int64_t messages = 0, target_total = 0;
  for (const PlanStep& s : plan.steps()) messages += s.sends.Sum();
  for (int64_t d : plan.target().devices()) target_total += plan.target().LocalBytes(d);
  Json baselines = Json::object();
  for (const BaselineCost& b : r.baselines)
    baselines[b.name] = {{"max_recv_bytes", b.max_recv_bytes}, {"total_bytes", b.total_bytes},
                         {"collectives", b.collectives},       {"modeled_time_us", b.time_us},
                         {"peak_bytes", b.peak_bytes},         {"ops", b.ops}};
  const Baseline remat = FullRematerialization(src, plan.target());
  Json j = {
      {"shape", src.shape()},
      {"dtype", std::string(DTypeName(src.dtype()))},
      {"devices", plan.devices().size()},
      {"mesh", plan.mesh() && plan.mesh()->num_axes() > 0 ? Json(plan.mesh()->ToString()) : Json(nullptr)},  // (one device: no axes)
      {"steps", steps},
      {"stats",
       {{"collectives", t.collectives},
        {"messages", messages},
        {"max_send_bytes", t.max_send_bytes},
        {"max_recv_bytes", t.max_recv_bytes},
        {"total_bytes", t.total_bytes},
        {"local_bytes", std::max<int64_t>(0, target_total - t.total_bytes)},
        {"peak_bytes", t.peak_bytes},
        {"modeled_time_us", t.time_us}}},
      {"lower_bound", {{"max_recv_bytes", r.lower_bound.max_recv_bytes}, {"total_bytes", r.lower_bound.total_bytes}}},
      {"baseline_full_remat",
       {{"max_recv_bytes", remat.max_recv_bytes}, {"total_bytes", remat.total_bytes}, {"peak_bytes", remat.peak_bytes}}},
      {"baselines", baselines},
      {"memory_cap_bytes", r.memory_cap_bytes},
      {"memory_cap_lifted", r.memory_cap_lifted}};
  if (o.per_device) {
    Json per = Json::array();
    for (size_t i = 0; i < plan.devices().size(); ++i) per.push_back(DeviceJson(plan, i));
    j["per_device"] = per;
  }
  return j;
}

}  // namespace reshard
