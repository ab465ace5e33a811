// The plan as a self-contained Python module over jax.shard_map.
#include <fmt/format.h>

#include "layout/mesh_grid.h"
#include "reshard/emit.h"
#include "reshard/named_sharding.h"

namespace reshard {
namespace {

std::string PyStr(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

std::string PyTuple(const std::vector<int64_t>& v) {
  if (v.size() == 1) return fmt::format("({},)", v[0]);
  return fmt::format("({})", fmt::join(v, ", "));
}

std::string AxesTuple(const CollectivePlan& plan, const std::vector<int32_t>& axes) {
  std::vector<std::string> names;
  for (int32_t a : axes) names.push_back(PyStr(plan.mesh()->axes()[a].name));
  if (names.size() == 1) return "(" + names[0] + ",)";
  return fmt::format("({})", fmt::join(names, ", "));
}

// P(...) over plan-mesh axis names for a step spec's axis lists.
std::string SpecOf(const CollectivePlan& plan, const Layout& layout) {
  const Mesh& mesh = *plan.mesh();
  Result<std::vector<std::vector<AxisRef>>> axes = InferMeshAxes(layout, mesh, /*allow_sub_axes=*/false);
  std::vector<std::string> dims;
  for (const auto& d : *axes) {
    if (d.empty()) dims.push_back("None");
    else if (d.size() == 1) dims.push_back(PyStr(mesh.axes()[d[0].axis].name));
    else {
      std::vector<std::string> names;
      for (const AxisRef& r : d) names.push_back(PyStr(mesh.axes()[r.axis].name));
      dims.push_back(fmt::format("({})", fmt::join(names, ", ")));
    }
  }
  // Partial values: JAX names their axes unreduced (Explicit mesh axes only).
  std::vector<std::string> unreduced;
  for (int64_t a : PartialMeshAxes(layout, mesh)) unreduced.push_back(PyStr(mesh.axes()[a].name));
  if (!unreduced.empty()) dims.push_back(fmt::format("unreduced={{{}}}", fmt::join(unreduced, ", ")));
  return fmt::format("P({})", fmt::join(dims, ", "));
}

}  // namespace

Result<std::string> EmitJax(const CollectivePlan& plan) {
  if (!plan.mesh())
    return Status::NotSupported(
        "--emit jax needs both layouts to be named shardings over one mesh (jax.shard_map runs over one); these "
        "are not");
  // JAX's unreduced axes hold partial sums: a pending max, min or avg has no
  // JAX sharding to name it (the module's specs would say sum).
  for (const Layout* l : {&plan.source(), &plan.target()})
    if (l->partial() && l->reduction().op != ReduceOp::kSum)
      return Status::NotSupported(fmt::format(
          "--emit jax: the {} holds partial values reduced by {}, and JAX's unreduced axes are partial sums only",
          l == &plan.source() ? "source" : "target", ReduceOpName(l->reduction().op)));
  const Mesh& mesh = *plan.mesh();
  const Layout& src = plan.source();
  std::vector<int64_t> sizes, ids = mesh.DeviceIds();
  std::vector<std::string> names;
  for (const Mesh::Axis& a : mesh.axes()) {
    sizes.push_back(a.size);
    names.push_back(PyStr(a.name));
  }
  const bool any_steps = !plan.steps().empty();
  const std::vector<int64_t> in_shard = any_steps ? plan.steps().front().input_shard : std::vector<int64_t>{};
  const std::vector<int64_t> out_shard = any_steps ? plan.steps().back().output_shard : std::vector<int64_t>{};
  std::string body;
  int step_no = 0;
  for (const PlanStep& step : plan.steps()) {
    body += fmt::format("    # step {}: {} {} -> {}\n", ++step_no, StepOpName(step.op), step.input_spec, step.output_spec);
    std::vector<int64_t> shape = step.input_shard;
    for (const ProgramOp& op : step.program) {
      switch (op.kind) {
        case ProgramOp::Kind::kReshape: body += fmt::format("    x = x.reshape({})\n", PyTuple(op.shape)); break;
        case ProgramOp::Kind::kTranspose: body += fmt::format("    x = jnp.transpose(x, {})\n", PyTuple(op.perm)); break;
        case ProgramOp::Kind::kPad: {
          std::vector<std::string> cfg;
          for (size_t d = 0; d < op.shape.size(); ++d) cfg.push_back(fmt::format("(0, {})", op.shape[d] - shape[d]));
          body += fmt::format("    x = jnp.pad(x, [{}])\n", fmt::join(cfg, ", "));
          break;
        }
        case ProgramOp::Kind::kSlice: {
          std::vector<std::string> cfg;
          for (int64_t e : op.shape) cfg.push_back(fmt::format(":{}", e));
          body += fmt::format("    x = x[{}]\n", op.shape.empty() ? "()" : fmt::format("{}", fmt::join(cfg, ", ")));
          break;
        }
        case ProgramOp::Kind::kDynamicSlice:
          body += fmt::format("    x = jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index({}) * {}, {}, axis={})\n",
                              AxesTuple(plan, op.axes), op.shape[op.dim], op.shape[op.dim], op.dim);
          break;
        case ProgramOp::Kind::kAllToAll:
          body += fmt::format("    x = jax.lax.all_to_all(x, {}, 0, 0, tiled=True)\n", AxesTuple(plan, op.axes));
          break;
        case ProgramOp::Kind::kAllGather:
          body += fmt::format("    x = jax.lax.all_gather(x, {}, axis=0, tiled=True)\n", AxesTuple(plan, op.axes));
          break;
        case ProgramOp::Kind::kCollectivePermute: {
          std::vector<std::string> pairs;
          std::vector<int64_t> targeted(mesh.num_devices(), 0);
          for (const auto& [s, t] : op.pairs) {
            pairs.push_back(fmt::format("({}, {})", s, t));
            targeted[t] = 1;
          }
          std::vector<int32_t> all;
          for (int32_t a = 0; a < mesh.num_axes(); ++a) all.push_back(a);
          body += fmt::format("    moved = jax.lax.ppermute(x, {}, [{}])\n", AxesTuple(plan, all), fmt::join(pairs, ", "));
          if (std::find(targeted.begin(), targeted.end(), 0) == targeted.end()) {
            body += "    x = moved\n";
          } else {
            // A permute leaves untargeted devices zeros; they keep their own shard.
            body += fmt::format("    x = jnp.where(jnp.asarray({})[jax.lax.axis_index({})] == 1, moved, x)\n",
                                PyTuple(targeted), AxesTuple(plan, all));
          }
          break;
        }
        case ProgramOp::Kind::kReduceScatter:
        case ProgramOp::Kind::kAllReduce: {
          const std::string axes = AxesTuple(plan, op.axes);
          const bool scatter = op.kind == ProgramOp::Kind::kReduceScatter;
          if (op.reduce == ReduceOp::kSum || op.reduce == ReduceOp::kAvg) {
            body += scatter ? fmt::format("    x = jax.lax.psum_scatter(x, {}, scatter_dimension=0, tiled=True)\n", axes)
                            : fmt::format("    x = jax.lax.psum(x, {})\n", axes);
            if (op.reduce == ReduceOp::kAvg) body += fmt::format("    x = x / jax.lax.psum(1, {})\n", axes);
          } else {
            // No max/min reduce-scatter in jax.lax: reduce everywhere, keep this member's chunk.
            body += fmt::format("    x = jax.lax.{}(x, {})\n", op.reduce == ReduceOp::kMax ? "pmax" : "pmin", axes);
            if (scatter) body += fmt::format("    x = jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index({}), 1, axis=0)\n", axes);
          }
          break;
        }
        case ProgramOp::Kind::kExchange:
          return Status::NotSupported(
              "the plan has a ragged exchange step, which --emit jax does not write yet; plan with --for jax-cpu or "
              "--strategy collectives");
      }
      shape = op.shape;
    }
  }
  std::vector<int64_t> in_padded(src.rank()), out_padded(src.rank());
  if (any_steps) {
    const Layout& l0 = plan.steps().front().input;
    const Layout& l1 = plan.steps().back().output;
    for (int64_t d = 0; d < src.rank(); ++d) {
      in_padded[d] = in_shard[d] * l0.dim(d).tiles;
      out_padded[d] = out_shard[d] * l1.dim(d).tiles;
    }
  }
  const bool partial = src.partial();
  if (partial && (in_padded != src.shape() || out_padded != src.shape()))
    return Status::NotSupported(
        "--emit jax writes partial sums only where every shard is even: JAX holds an unreduced array's shards "
        "unpadded");
  std::string out;
  out += fmt::format(
      "\"\"\"Generated by reshard: {}[{}] from {} to {} over mesh {} ({} step{}).\n\n"
      "reshard(x, mesh): x is a global jax.Array or traced value with the source\n"
      "sharding; mesh is a jax.sharding.Mesh over the same devices (matched by\n"
      "device id). Returns the array with the target sharding.\n\"\"\"\n",
      DTypeName(src.dtype()), fmt::join(src.shape(), ","), any_steps ? plan.steps().front().input_spec : "",
      any_steps ? plan.steps().back().output_spec : "", mesh.ToString(), plan.steps().size(),
      plan.steps().size() == 1 ? "" : "s");
  out += "import numpy as np\nimport jax\nimport jax.numpy as jnp\n"
         "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n\n";
  out += fmt::format("SHAPE = {}\n", PyTuple(src.shape()));
  out += fmt::format("AXES = ({}{})\n", fmt::join(names, ", "), names.size() == 1 ? "," : "");
  out += fmt::format("AXIS_SIZES = {}\n", PyTuple(sizes));
  out += fmt::format("DEVICE_IDS = {}\n", mesh.is_iota() && ids.size() > 64 ? fmt::format("tuple(range({}))", ids.size())
                                                                             : PyTuple(ids));
  if (any_steps) {
    out += fmt::format("SOURCE = {}\nTARGET = {}\n", SpecOf(plan, plan.steps().front().input),
                       SpecOf(plan, plan.steps().back().output));
    out += fmt::format("SOURCE_PADDED = {}\nTARGET_PADDED = {}\n", PyTuple(in_padded), PyTuple(out_padded));
  }
  // Unreduced arrays live on Explicit mesh axes only.
  out += fmt::format(
      "\n\ndef plan_mesh(mesh):\n"
      "    \"\"\"The plan's mesh: the given mesh's devices, by id, under the plan's axes.\"\"\"\n"
      "    by_id = {{d.id: d for d in np.asarray(mesh.devices).flat}}\n"
      "    devices = np.array([by_id[i] for i in DEVICE_IDS], dtype=object).reshape(AXIS_SIZES)\n"
      "    return Mesh(devices, AXES, axis_types=(jax.sharding.AxisType.{},) * len(AXES))\n\n\n",
      partial ? "Explicit" : "Auto");
  if (!any_steps) {
    out += "def reshard(x, mesh):\n    return x\n";
    return out;
  }
  out += "def _local(x):\n" + body + "    return x\n\n\n";
  if (partial) {
    // x holds partial sums (unreduced on the mesh's Explicit axes): the
    // program's reduction reads them as they lie, with no constraint first.
    out += "def reshard(x, mesh):\n"
           "    pm = plan_mesh(mesh)\n"
           "    return jax.shard_map(_local, mesh=pm, in_specs=SOURCE, out_specs=TARGET, check_vma=False)(x)\n";
    return out;
  }
  out += "def reshard(x, mesh):\n"
         "    pm = plan_mesh(mesh)\n"
         "    if SOURCE_PADDED != SHAPE:  # free: XLA stores uneven shards padded\n"
         "        x = jnp.pad(x, [(0, p - n) for p, n in zip(SOURCE_PADDED, SHAPE)])\n"
         "    x = jax.lax.with_sharding_constraint(x, NamedSharding(pm, SOURCE))\n"
         "    y = jax.shard_map(_local, mesh=pm, in_specs=SOURCE, out_specs=TARGET, check_vma=False)(x)\n"
         "    if TARGET_PADDED != SHAPE:\n"
         "        y = y[tuple(slice(0, n) for n in SHAPE)]\n"
         "    return jax.lax.with_sharding_constraint(y, NamedSharding(pm, TARGET))\n";
  return out;
}

}  // namespace reshard
