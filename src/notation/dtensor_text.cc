// DTensor placement lists: "[Shard(0), Replicate()]" (also "(...)" tuples and
// "Shard(dim=0)").
#include "reshard/dtensor_text.h"

#include "notation/text_cursor.h"

namespace reshard {

Result<std::vector<Placement>> ParsePlacements(std::string_view text) {
  TextCursor c(text);
  if (c.AtEnd()) return Status::InvalidArgument("empty DTensor placement text");
  const bool tuple = c.Peek() == '(';
  RESHARD_RETURN_IF_ERROR(c.Expect(tuple ? "(" : "["));
  const std::string close = tuple ? ")" : "]";
  std::vector<Placement> out;
  Status unsupported;  // the first placement read in full but not supported yet
  while (!c.TryConsume(close)) {
    if (c.TryConsumeWord("Shard")) {
      RESHARD_RETURN_IF_ERROR(c.Expect("("));
      if (c.TryConsumeWord("dim")) RESHARD_RETURN_IF_ERROR(c.Expect("="));
      const bool negative = c.TryConsume("-");  // Python-style, counted from the last dim
      RESHARD_ASSIGN_OR_RETURN(int64_t d, c.ParseInt());
      if (negative) d = -d;
      RESHARD_RETURN_IF_ERROR(c.Expect(")"));
      out.push_back({Placement::Kind::kShard, d});
    } else if (c.TryConsumeWord("Replicate")) {
      RESHARD_RETURN_IF_ERROR(c.Expect("("));
      RESHARD_RETURN_IF_ERROR(c.Expect(")"));
      out.push_back({Placement::Kind::kReplicate, 0});
    } else if (c.TryConsumeWord("_StridedShard")) {
      // torch's constructor: _StridedShard(dim, *, split_factor=s) or sf=s;
      // its repr is "_StridedShard(dim=0, sf=2)".
      RESHARD_RETURN_IF_ERROR(c.Expect("("));
      if (c.TryConsumeWord("dim")) RESHARD_RETURN_IF_ERROR(c.Expect("="));
      const bool negative = c.TryConsume("-");
      RESHARD_ASSIGN_OR_RETURN(int64_t d, c.ParseInt());
      if (negative) d = -d;
      RESHARD_RETURN_IF_ERROR(c.Expect(","));
      if (!c.TryConsumeWord("split_factor") && !c.TryConsumeWord("sf"))
        return c.Error("expected split_factor= (found " + c.Found() + ")");
      RESHARD_RETURN_IF_ERROR(c.Expect("="));
      const size_t factor_at = c.Mark();
      RESHARD_ASSIGN_OR_RETURN(int64_t s, c.ParseInt());
      if (s < 1) return Status::InvalidArgument(c.ErrorAt(factor_at, "split_factor must be >= 1").message());
      RESHARD_RETURN_IF_ERROR(c.Expect(")"));
      out.push_back({Placement::Kind::kStridedShard, d, s});
    } else if (c.TryConsumeWord("Partial") || c.TryConsumeWord("_Partial")) {
      // Partial(), Partial("avg") or Partial(reduce_op='avg') as constructed;
      // Partial(avg) as torch's repr prints it.
      RESHARD_RETURN_IF_ERROR(c.Expect("("));
      ReduceOp op = ReduceOp::kSum;
      if (!c.TryConsume(")")) {
        if (c.TryConsumeWord("reduce_op")) RESHARD_RETURN_IF_ERROR(c.Expect("="));
        const size_t op_at = c.Mark();
        std::string name;
        if (c.Peek() == '"' || c.Peek() == '\'') {
          RESHARD_ASSIGN_OR_RETURN(name, c.ParseQuoted(nullptr));
        } else {
          RESHARD_ASSIGN_OR_RETURN(name, c.ParseIdentifier());
        }
        Result<ReduceOp> parsed = ParseReduceOp(name);
        if (!parsed.ok()) {
          if (name == "product" || name == "prod" || name == "band" || name == "bor" || name == "bxor") {
            if (unsupported.ok())
              unsupported = Status::NotSupported(c.ErrorAt(op_at, "Partial(\"" + name + "\") is not supported: "
                                                                 "reductions are sum, avg, max and min").message());
          } else {
            return Status::InvalidArgument(c.ErrorAt(op_at, parsed.status().message()).message());
          }
        } else {
          op = *parsed;
        }
        RESHARD_RETURN_IF_ERROR(c.Expect(")"));
      }
      out.push_back({Placement::Kind::kPartial, 0, 1, op});
    } else {
      return c.Error("expected Shard(d), _StridedShard(d, split_factor=s), Replicate() or Partial() (found " + c.Found() + ")");
    }
    if (!c.TryConsume(",")) { RESHARD_RETURN_IF_ERROR(c.Expect(close)); break; }
  }
  RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
  if (!unsupported.ok()) return unsupported;
  return out;
}

std::string PrintPlacements(const std::vector<Placement>& placements) {
  // No placements (a mesh with no axes) print as the empty tuple: "[]" would
  // read back as a rank-0 Shardy sharding.
  if (placements.empty()) return "()";
  std::string s = "[";
  for (size_t i = 0; i < placements.size(); ++i) {
    s += i ? ", " : "";
    const Placement& p = placements[i];
    switch (p.kind) {
      case Placement::Kind::kShard: s += "Shard(" + std::to_string(p.dim) + ")"; break;
      case Placement::Kind::kStridedShard:
        s += "_StridedShard(" + std::to_string(p.dim) + ", split_factor=" + std::to_string(p.split_factor) + ")";
        break;
      case Placement::Kind::kReplicate: s += "Replicate()"; break;
      case Placement::Kind::kPartial:
        s += p.reduce_op == ReduceOp::kSum ? std::string("Partial()") : "Partial(\"" + std::string(ReduceOpName(p.reduce_op)) + "\")";
        break;
    }
  }
  return s + "]";
}

}  // namespace reshard
