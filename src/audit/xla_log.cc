#include "audit/xla_log.h"

#include "reshard/hlo_text.h"

namespace reshard::audit {
namespace {

constexpr std::string_view kMarker = "Involuntary full rematerialization";

// The brace group that starts at text[*i] (after spaces); advances *i past it.
std::optional<std::string> BraceGroup(std::string_view text, size_t* i) {
  while (*i < text.size() && text[*i] == ' ') ++*i;
  if (*i >= text.size() || text[*i] != '{') return std::nullopt;
  const size_t end = MatchClose(text, *i);
  if (end == std::string_view::npos) return std::nullopt;
  std::string out(text.substr(*i, end - *i));
  *i = end;
  return out;
}

}  // namespace

bool IsRematerializationLine(std::string_view line) { return line.find(kMarker) != std::string_view::npos; }

Result<LogRematerialization> ParseRematerializationLine(std::string_view line) {
  LogRematerialization r;
  const size_t from_at = line.find("go from sharding ");
  if (from_at == std::string_view::npos) return Status::NotSupported("no 'go from sharding' in the rematerialization line");
  size_t i = from_at + 17;
  std::optional<std::string> from = BraceGroup(line, &i);
  if (!from) return Status::NotSupported("the source sharding is not a balanced {...} group");
  if (line.substr(i, 4) != " to ") return Status::NotSupported("expected ' to ' after the source sharding");
  i += 4;
  std::optional<std::string> to = BraceGroup(line, &i);
  if (!to) return Status::NotSupported("the target sharding is not a balanced {...} group");
  const size_t op_at = line.find("HLO operation ", i);
  if (op_at == std::string_view::npos) return Status::NotSupported("no 'HLO operation' in the rematerialization line");
  i = op_at + 14;
  std::string_view rest = line.substr(i);
  if (!rest.empty() && rest[0] == '%') rest = rest.substr(1);
  const size_t eq = rest.find(" = ");
  if (eq == std::string_view::npos || eq == 0) return Status::NotSupported("the HLO operation has no 'name = shape'");
  r.instruction = std::string(rest.substr(0, eq));
  size_t used = 0;
  Result<HloShape> shape = ParseHloShape(rest.substr(eq + 3), &used);
  if (!shape.ok()) return Status::NotSupported("the HLO operation's shape: " + shape.status().message());
  if (shape->is_tuple) return Status::NotSupported("tuple-shaped operations are not audited");
  r.local_shape = std::move(shape).value();
  // metadata={op_name="jit(f)/while/body/mul" ...}: names the jitted function.
  if (const size_t at = rest.find("op_name=\"", eq); at != std::string_view::npos) {
    const size_t begin = at + 9;
    size_t end = begin;
    while (end < rest.size() && rest[end] != '"') end += rest[end] == '\\' ? 2 : 1;
    if (end < rest.size()) r.op_name = std::string(rest.substr(begin, end - begin));
  }
  r.from = std::move(*from);
  r.to = std::move(*to);
  Result<HloSharding> s = ParseHloSharding(r.from);
  if (!s.ok()) return Status::NotSupported("source sharding " + r.from + ": " + s.status().message());
  r.global_shape = r.local_shape.dims;
  if (const auto* t = std::get_if<HloSharding::Tiled>(&s->kind())) {
    const size_t rank = r.local_shape.dims.size();
    if (t->tiles.dims().size() != rank + (t->replicate_last ? 1 : 0))
      return Status::NotSupported("source sharding " + r.from + " does not have the operation's rank");
    for (size_t d = 0; d < rank; ++d)
      if (__builtin_mul_overflow(r.local_shape.dims[d], t->tiles.dims()[d], &r.global_shape[d]) || r.global_shape[d] > (int64_t{1} << 50))
        return Status::NotSupported("the global shape is too large");
  } else if (!std::holds_alternative<HloSharding::Replicated>(s->kind())) {
    return Status::NotSupported("source sharding " + r.from + " is not tiled or replicated");
  }
  return r;
}

}  // namespace reshard::audit
