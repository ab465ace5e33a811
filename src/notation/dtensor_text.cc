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
    const size_t at = c.Mark();
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
    } else if (c.TryConsumeWord("Partial") || c.TryConsumeWord("_StridedShard") || c.TryConsumeWord("_Partial")) {
      const std::string what(text.substr(at, c.pos() - at));
      if (c.Peek() != '(') return c.Error("expected '(' (found " + c.Found() + ")");
      RESHARD_RETURN_IF_ERROR(c.SkipBalanced());  // the arguments, read only as far as their brackets
      if (unsupported.ok())
        unsupported = Status::NotSupported(c.ErrorAt(at, "'" + what + "' placements are not supported yet").message());
    } else {
      return c.Error("expected Shard(d) or Replicate() (found " + c.Found() + ")");
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
    s += placements[i].kind == Placement::Kind::kShard ? "Shard(" + std::to_string(placements[i].dim) + ")" : "Replicate()";
  }
  return s + "]";
}

}  // namespace reshard
