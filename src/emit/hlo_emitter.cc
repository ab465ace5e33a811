// The plan as one HLO module: the program every partition runs.
#include <fmt/format.h>

#include <map>

#include "reshard/emit.h"

namespace reshard {
namespace {

std::string ZeroLiteral(DType t) {
  switch (t) {
    case DType::kPred: return "false";
    case DType::kC64:
    case DType::kC128: return "(0, 0)";
    default: return "0";
  }
}

class HloWriter {
 public:
  explicit HloWriter(const CollectivePlan& plan) : plan_(plan), type_(DTypeName(plan.source().dtype())) {}

  std::string Shape(const std::vector<int64_t>& dims, std::string_view type = {}) const {
    return fmt::format("{}[{}]", type.empty() ? type_ : type, fmt::join(dims, ","));
  }
  // Appends `%vN = <shape> <text>` and returns %vN.
  std::string Emit(const std::string& shape, const std::string& text) {
    const std::string name = fmt::format("%v{}", next_++);
    body_ += fmt::format("  {} = {} {}\n", name, shape, text);
    return name;
  }
  std::string S32(int64_t v) {
    auto it = constants_.find(v);
    if (it != constants_.end()) return it->second;
    return constants_[v] = Emit("s32[]", fmt::format("constant({})", v));
  }
  // The device at a position: of the plan mesh, else of plan.devices().
  int64_t DeviceAt(int64_t p) const { return plan_.mesh() ? plan_.mesh()->device(p) : plan_.devices()[p]; }
  int64_t Positions() const {
    return plan_.mesh() ? plan_.mesh()->num_devices() : static_cast<int64_t>(plan_.devices().size());
  }
  // This device's position, as s32[].
  std::string Position() {
    if (!position_.empty()) return position_;
    const std::string pid = Emit("s32[]", fmt::format("convert({})", Emit("u32[]", "partition-id()")));
    bool iota = true;
    int64_t max_id = 0;
    for (int64_t p = 0; p < Positions(); ++p) {
      iota = iota && DeviceAt(p) == p;
      max_id = std::max(max_id, DeviceAt(p));
    }
    if (iota) return position_ = pid;
    std::vector<int64_t> table(max_id + 1, 0);
    for (int64_t p = 0; p < Positions(); ++p) table[DeviceAt(p)] = p;
    return position_ = Lookup(table, pid);
  }
  // table[index] as s32[].
  std::string Lookup(const std::vector<int64_t>& table, const std::string& index) {
    const std::string t = Emit(fmt::format("s32[{}]", table.size()), fmt::format("constant({{{}}})", fmt::join(table, ",")));
    const std::string one = Emit("s32[1]", fmt::format("dynamic-slice({}, {}), dynamic_slice_sizes={{1}}", t, index));
    return Emit("s32[]", fmt::format("reshape({})", one));
  }
  // Linear index of this device over `axes` (row-major), as s32[].
  std::string LinearIndex(const std::vector<int32_t>& axes) {
    // Mesh::MemberIndex, written as HLO arithmetic.
    const Mesh& mesh = *plan_.mesh();
    std::string linear;
    for (int32_t a : axes) {
      const std::string q = Emit("s32[]", fmt::format("divide({}, {})", Position(), S32(mesh.Stride(a))));
      const std::string c = Emit("s32[]", fmt::format("remainder({}, {})", q, S32(mesh.axes()[a].size)));
      linear = linear.empty() ? c
                              : Emit("s32[]", fmt::format("add({}, {})",
                                                          Emit("s32[]", fmt::format("multiply({}, {})", linear,
                                                                                    S32(mesh.axes()[a].size))),
                                                          c));
    }
    return linear.empty() ? S32(0) : linear;
  }

  Result<std::string> Write() {
    std::vector<int64_t> in_shape;
    if (!plan_.steps().empty()) {
      in_shape = plan_.steps().front().input_shard;
    } else {  // nothing moves: the program returns its (largest) shard as it is
      in_shape.assign(plan_.source().rank(), 0);
      for (int64_t d : plan_.source().devices()) {
        const std::vector<int64_t> local = plan_.source().LocalShape(d);
        for (size_t i = 0; i < local.size(); ++i) in_shape[i] = std::max(in_shape[i], local[i]);
      }
    }
    std::string cur = Emit(Shape(in_shape), "parameter(0)");
    std::vector<int64_t> shape = in_shape;
    int channel = 1;
    for (const PlanStep& step : plan_.steps()) {
      for (const ProgramOp& op : step.program) {
        const std::string out = Shape(op.shape);
        switch (op.kind) {
          case ProgramOp::Kind::kReshape: cur = Emit(out, fmt::format("reshape({})", cur)); break;
          case ProgramOp::Kind::kTranspose:
            cur = Emit(out, fmt::format("transpose({}), dimensions={{{}}}", cur, fmt::join(op.perm, ",")));
            break;
          case ProgramOp::Kind::kPad: {
            std::vector<std::string> cfg;
            for (size_t d = 0; d < op.shape.size(); ++d) cfg.push_back(fmt::format("0_{}", op.shape[d] - shape[d]));
            const std::string zero = Emit(Shape({}), fmt::format("constant({})", ZeroLiteral(plan_.source().dtype())));
            cur = Emit(out, fmt::format("pad({}, {}), padding={}", cur, zero, fmt::join(cfg, "x")));
            break;
          }
          case ProgramOp::Kind::kSlice: {
            std::vector<std::string> cfg;
            for (int64_t e : op.shape) cfg.push_back(fmt::format("[0:{}]", e));
            cur = Emit(out, fmt::format("slice({}), slice={{{}}}", cur, fmt::join(cfg, ", ")));
            break;
          }
          case ProgramOp::Kind::kDynamicSlice: {
            const std::string offset =
                Emit("s32[]", fmt::format("multiply({}, {})", LinearIndex(op.axes), S32(op.shape[op.dim])));
            std::vector<std::string> idx(op.shape.size(), S32(0));
            idx[op.dim] = offset;
            cur = Emit(out, fmt::format("dynamic-slice({}, {}), dynamic_slice_sizes={{{}}}", cur, fmt::join(idx, ", "),
                                        fmt::join(op.shape, ",")));
            break;
          }
          case ProgramOp::Kind::kAllToAll:
            cur = Emit(out, fmt::format("all-to-all({}), channel_id={}, replica_groups={}, dimensions={{0}}", cur,
                                        channel++, ReplicaGroupsText(plan_, op.axes)));
            break;
          case ProgramOp::Kind::kAllGather:
            cur = Emit(out, fmt::format("all-gather({}), channel_id={}, replica_groups={}, dimensions={{0}}, "
                                        "use_global_device_ids=true",
                                        cur, channel++, ReplicaGroupsText(plan_, op.axes)));
            break;
          case ProgramOp::Kind::kCollectivePermute: {
            std::vector<std::string> pairs;
            std::vector<int64_t> targeted(Positions(), 0);
            for (const auto& [s, t] : op.pairs) {
              pairs.push_back(fmt::format("{{{},{}}}", DeviceAt(s), DeviceAt(t)));
              targeted[t] = 1;
            }
            const std::string moved = Emit(out, fmt::format("collective-permute({}), channel_id={}, "
                                                            "source_target_pairs={{{}}}",
                                                            cur, channel++, fmt::join(pairs, ",")));
            if (std::find(targeted.begin(), targeted.end(), 0) == targeted.end()) {
              cur = moved;
              break;
            }
            // Devices no pair targets keep their own shard (a permute leaves them zeros).
            const std::string flag = Lookup(targeted, Position());
            const std::string is_target =
                Emit("pred[]", fmt::format("compare({}, {}), direction=EQ", flag, S32(1)));
            const std::string mask = Emit(Shape(op.shape, "pred"), fmt::format("broadcast({}), dimensions={{}}", is_target));
            cur = Emit(out, fmt::format("select({}, {}, {})", mask, moved, cur));
            break;
          }
          case ProgramOp::Kind::kReduceScatter:
          case ProgramOp::Kind::kAllReduce: {
            const bool scatter = op.kind == ProgramOp::Kind::kReduceScatter;
            std::string text = fmt::format("{}({}), channel_id={}, replica_groups={}, use_global_device_ids=true", 
                                           scatter ? "reduce-scatter" : "all-reduce", cur, channel++,
                                           ReplicaGroupsText(plan_, op.axes));
            if (scatter) text += ", dimensions={0}";
            cur = Emit(out, text + ", to_apply=" + Reducer(op.reduce));
            if (op.reduce == ReduceOp::kAvg) {  // the group's sum over its size
              int64_t k = 1;
              for (int32_t a : op.axes) k *= plan_.mesh()->axes()[a].size;
              const std::string size = Emit(Shape({}), fmt::format("constant({})", k));
              cur = Emit(out, fmt::format("divide({}, {})", cur,
                                          Emit(out, fmt::format("broadcast({}), dimensions={{}}", size))));
            }
            break;
          }
          case ProgramOp::Kind::kExchange:
            return Status::NotSupported(
                "the plan has a ragged exchange step, which --emit hlo does not write yet; where a structured plan "
                "exists, --for jax-cpu or --strategy collectives finds it");
        }
        shape = op.shape;
      }
    }
    // The last instruction is the result.
    const size_t at = body_.rfind("  %v");
    body_.replace(at, 2, "  ROOT ");
    int64_t partitions = 0;
    for (int64_t d : plan_.devices()) partitions = std::max(partitions, d + 1);
    return fmt::format("HloModule reshard_plan, replica_count=1, num_partitions={}\n\n{}ENTRY %main {{\n{}}}\n",
                       partitions, reducers_, body_);
  }

 private:
  const CollectivePlan& plan_;
  std::string type_;
  std::string body_;
  int next_ = 0;
  std::map<int64_t, std::string> constants_;
  std::string position_;
  std::string reducers_;  // the reductions' computations, each once
  std::map<ReduceOp, std::string> reducer_names_;

  // The scalar computation a reduce-scatter or all-reduce applies (avg sums).
  std::string Reducer(ReduceOp op) {
    auto it = reducer_names_.find(op);
    if (it != reducer_names_.end()) return it->second;
    const char* what = op == ReduceOp::kMax ? "maximum" : op == ReduceOp::kMin ? "minimum" : "add";
    const std::string name = fmt::format("%reduce_{}", what);
    const std::string s = Shape({});
    reducers_ += fmt::format("{} (a: {}, b: {}) -> {} {{\n  %a = {} parameter(0)\n  %b = {} parameter(1)\n  ROOT %r = {} "
                             "{}(%a, %b)\n}}\n\n",
                             name, s, s, s, s, s, s, what);
    return reducer_names_[op] = name;
  }
};

}  // namespace

Result<std::string> EmitHlo(const CollectivePlan& plan) { return HloWriter(plan).Write();
}

}  // namespace reshard
