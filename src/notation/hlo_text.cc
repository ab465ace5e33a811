// HLO sharding text: the parser (V1 explicit lists, V2 iota lists), and
// XlaText, what XLA prints for a sharding; the plain printer is
// HloSharding::ToString, in the layout library.
//
// The parser keeps the text's device order (a replica group may be listed in
// any order), so that print(parse(s)) == s for every text it reads whose
// iota is canonical. XlaText applies what XLA's parser does on top (checked
// against jaxlib's HloSharding.from_string in
// tests/jax/test_named_shardings_live.py): HloSharding::PartialTile sorts
// each replica group, regrouping an iota where it can, and drops a size-1
// replication dim; a sharding that only replicates is {replicated}. That
// last step loses the devices, which is why the parser does not take it: the
// tile assignment is the only device set such a text gives.
//
// Forms reshard does not support yet (manual, unreduced, unknown, tuples,
// shard_as/shard_like groups) are refused with NotSupported only when the
// whole text parses; a malformed text is InvalidArgument wherever it fails.
#include "reshard/hlo_text.h"

#include <algorithm>
#include <string>
#include <variant>
#include <vector>

#include "notation/text_cursor.h"

namespace reshard {
namespace {

// The most nested tuples read before giving up (XLA's parser has no limit;
// this keeps hostile input from exhausting the stack).
constexpr int kMaxTupleDepth = 64;

// Remembers the first form that parsed but is not supported yet.
struct Unsupported {
  Status status;
  void Note(const TextCursor& c, size_t at, const std::string& what) {
    if (status.ok()) status = Status::NotSupported(c.ErrorAt(at, what).message());
  }
};

// "[" int {"," int} "]" (or with other brackets): never empty.
Result<std::vector<int64_t>> ParseInts(TextCursor& c, char open, char close) {
  RESHARD_RETURN_IF_ERROR(c.Expect(std::string(1, open)));
  std::vector<int64_t> v;
  do {
    RESHARD_ASSIGN_OR_RETURN(int64_t x, c.ParseInt());
    v.push_back(x);
  } while (c.TryConsume(","));
  RESHARD_RETURN_IF_ERROR(c.Expect(std::string(1, close)));
  return v;
}

// XLA's sorted grouping of an iota's minor dims: the transposed dims that make
// up the last `group` devices of each row (splitting one if it straddles the
// group's edge) are put in ascending source order, so that each replica group
// lists its devices ascending. False when the group does not fall on whole
// factors of the iota.
bool SortMinorIotaDims(const std::vector<int64_t>& reshape, const std::vector<int64_t>& perm, int64_t group,
                       std::vector<int64_t>& new_reshape, std::vector<int64_t>& new_perm) {
  new_reshape = reshape;
  new_perm = perm;
  size_t grouped = 0;  // transposed dims, from the last, whose devices are in the group
  for (size_t i = perm.size(); i-- > 0;) {
    const int64_t dim = perm[i];
    const int64_t size = reshape[dim];
    ++grouped;
    if (size <= group) {
      if (group % size != 0) return false;
      group /= size;
      continue;
    }
    // This dim straddles the group's edge: split it into a major part that
    // stays and a minor part of the `group` devices left, which joins it.
    if (size % group != 0) return false;
    new_reshape.insert(new_reshape.begin() + dim + 1, group);
    new_reshape[dim] = size / group;
    new_perm.clear();
    for (int64_t p : perm) {
      new_perm.push_back(p <= dim ? p : p + 1);
      if (p == dim) new_perm.push_back(dim + 1);
    }
    break;  // the minor half is the group's most major place
  }
  std::stable_sort(new_perm.end() - static_cast<int64_t>(grouped), new_perm.end());
  return true;
}

// HloSharding::PartialTile in XLA: a tile assignment whose last dim
// replicates, canonical. REQUIRES: its data dims are not all 1.
Result<HloSharding> PartialTile(const TileAssignment& tiles) {
  const std::vector<int64_t>& dims = tiles.dims();
  const int64_t group = dims.back();
  if (group == 1) {
    std::vector<int64_t> data(dims.begin(), dims.end() - 1);
    Result<TileAssignment> t = tiles.is_iota() ? TileAssignment::Iota(data, tiles.reshape_dims(), tiles.perm())
                                               : TileAssignment::Explicit(data, tiles.Devices());
    if (!t.ok()) return t.status();
    return HloSharding::Tile(std::move(t).value(), false);
  }
  if (tiles.is_iota()) {
    if (tiles.reshape_dims()[tiles.perm().back()] == group) return HloSharding::Tile(tiles, true);
    std::vector<int64_t> reshape, perm;
    if (SortMinorIotaDims(tiles.reshape_dims(), tiles.perm(), group, reshape, perm)) {
      RESHARD_ASSIGN_OR_RETURN(TileAssignment t, TileAssignment::Iota(dims, reshape, perm));
      return HloSharding::Tile(std::move(t), true);
    }
  }
  std::vector<int64_t> ids = tiles.Devices();
  for (size_t g = 0; g < ids.size(); g += group) std::sort(ids.begin() + g, ids.begin() + g + group);
  RESHARD_ASSIGN_OR_RETURN(TileAssignment t, TileAssignment::Explicit(dims, std::move(ids)));
  return HloSharding::Tile(std::move(t), true);
}

// A tile assignment with its dims reshaped to `dims` (same device order).
Result<TileAssignment> Reshaped(const TileAssignment& tiles, std::vector<int64_t> dims) {
  return tiles.is_iota() ? TileAssignment::Iota(std::move(dims), tiles.reshape_dims(), tiles.perm())
                         : TileAssignment::Explicit(std::move(dims), tiles.Devices());
}

Result<HloSharding> ParseTiled(TextCursor& c, Unsupported& unsupported) {
  const size_t start = c.Mark();
  RESHARD_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ParseInts(c, '[', ']'));
  Result<TileAssignment> tiles = Status::Internal("unset");
  if (c.TryConsume("<=")) {
    RESHARD_ASSIGN_OR_RETURN(std::vector<int64_t> reshape, ParseInts(c, '[', ']'));
    std::vector<int64_t> perm;
    if (c.TryConsume("T")) {
      RESHARD_ASSIGN_OR_RETURN(perm, ParseInts(c, '(', ')'));
    }
    tiles = TileAssignment::Iota(dims, reshape, perm);
  } else {
    std::vector<int64_t> devices;
    do {
      RESHARD_ASSIGN_OR_RETURN(int64_t d, c.ParseInt());
      devices.push_back(d);
    } while (c.TryConsume(","));
    tiles = TileAssignment::Explicit(dims, devices);
  }
  if (!tiles.ok()) return c.ErrorAt(start, tiles.status().message());
  if (c.TryConsumeWord("last_tile_dim_replicate")) return HloSharding::Tile(std::move(tiles).value(), true);
  if (!c.TryConsumeWord("last_tile_dims")) return HloSharding::Tile(std::move(tiles).value(), false);
  RESHARD_RETURN_IF_ERROR(c.Expect("="));
  RESHARD_RETURN_IF_ERROR(c.Expect("{"));
  int64_t count = 0;
  do {
    const size_t at = c.Mark();
    RESHARD_ASSIGN_OR_RETURN(std::string type, c.ParseIdentifier());
    if (type == "manual" || type == "unreduced") unsupported.Note(c, at, "'" + type + "' subgroups are not supported yet");
    else if (type != "replicated") return c.ErrorAt(at, "unknown subgroup type '" + type + "'");
    ++count;
  } while (c.TryConsume(","));
  RESHARD_RETURN_IF_ERROR(c.Expect("}"));
  // The subgroup dims are the last `count` tile dims; a rank-0 array has only them.
  if (count > static_cast<int64_t>(dims.size()))
    return c.ErrorAt(start, "last_tile_dims names " + std::to_string(count) + " subgroup dims but there are only " +
                                std::to_string(dims.size()) + " tile dims");
  if (!unsupported.status.ok()) return HloSharding::Tile(std::move(tiles).value(), false);  // refused by the caller
  // The replicated subgroup dims act as one: merge them.
  std::vector<int64_t> d(dims.begin(), dims.end() - count);
  int64_t repl = 1;
  for (int64_t i = static_cast<int64_t>(dims.size()) - count; i < static_cast<int64_t>(dims.size()); ++i) repl *= dims[i];
  d.push_back(repl);
  RESHARD_ASSIGN_OR_RETURN(TileAssignment t, Reshaped(*tiles, d));
  return HloSharding::Tile(std::move(t), true);
}

// Trailing " metadata={...}", ", metadata={...}", " shard_as N", " shard_like N".
Status ParseTrailer(TextCursor& c, Unsupported& unsupported) {
  while (true) {
    const size_t before = c.pos();
    c.TryConsume(",");
    const size_t at = c.Mark();
    if (c.TryConsumeWord("metadata")) {
      RESHARD_RETURN_IF_ERROR(c.Expect("="));
      RESHARD_RETURN_IF_ERROR(c.SkipBalanced());
    } else if (c.TryConsumeWord("shard_as") || c.TryConsumeWord("shard_like")) {
      RESHARD_ASSIGN_OR_RETURN(int64_t group, c.ParseInt());
      (void)group;
      unsupported.Note(c, at, "shard_as/shard_like groups are not supported yet");
    } else {
      c.set_pos(before);  // a comma belongs to metadata only
      return Status::Ok();
    }
  }
}

// One sharding "{...}", or a tuple of them "{{...}, {...}}".
Result<HloSharding> ParseOne(TextCursor& c, Unsupported& unsupported, int depth) {
  RESHARD_RETURN_IF_ERROR(c.Expect("{"));
  Result<HloSharding> out = Status::Internal("unset");
  const size_t at = c.Mark();
  if (c.Peek() == '{' || c.Peek() == '}') {
    if (depth >= kMaxTupleDepth) return c.Error("tuples are nested more than " + std::to_string(kMaxTupleDepth) + " deep");
    unsupported.Note(c, at, "tuple shardings are not supported yet");
    if (!c.TryConsume("}")) {
      do {
        RESHARD_ASSIGN_OR_RETURN(HloSharding element, ParseOne(c, unsupported, depth + 1));
        (void)element;
      } while (c.TryConsume(","));
      RESHARD_RETURN_IF_ERROR(c.Expect("}"));
    }
    return HloSharding::Replicate();  // refused by the caller
  }
  if (c.TryConsumeWord("replicated")) {
    out = HloSharding::Replicate();
  } else if (c.TryConsumeWord("maximal")) {
    RESHARD_RETURN_IF_ERROR(c.Expect("device"));
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
    RESHARD_ASSIGN_OR_RETURN(int64_t d, c.ParseInt());
    out = HloSharding::AssignDevice(d);
  } else if (c.TryConsumeWord("devices")) {
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
    out = ParseTiled(c, unsupported);
    if (!out.ok()) return out.status();
  } else if (c.TryConsumeWord("manual") || c.TryConsumeWord("unreduced") || c.TryConsumeWord("unknown")) {
    unsupported.Note(c, at, "'" + std::string(c.text().substr(at, c.pos() - at)) + "' shardings are not supported yet");
    out = HloSharding::Replicate();  // refused by the caller
  } else {
    return c.Error("expected 'replicated', 'maximal', 'devices=' or 'manual' (found " + c.Found() + ")");
  }
  RESHARD_RETURN_IF_ERROR(ParseTrailer(c, unsupported));
  RESHARD_RETURN_IF_ERROR(c.Expect("}"));
  return out;
}

}  // namespace

std::string XlaText(const HloSharding& s) {
  const auto* t = std::get_if<HloSharding::Tiled>(&s.kind());
  if (!t || !t->replicate_last) return s.ToString();
  int64_t data = 1;
  for (size_t d = 0; d + 1 < t->tiles.dims().size(); ++d) data *= t->tiles.dims()[d];
  if (data == 1) return "{replicated}";
  Result<HloSharding> canonical = PartialTile(t->tiles);
  return canonical.ok() ? canonical->ToString() : s.ToString();
}

Result<HloSharding> ParseHloSharding(std::string_view text) {
  TextCursor c(text);
  if (c.AtEnd()) return Status::InvalidArgument("empty sharding text");
  Unsupported unsupported;
  Result<HloSharding> out = ParseOne(c, unsupported, 0);
  if (!out.ok()) return out.status();
  RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
  if (!unsupported.status.ok()) return unsupported.status;
  return out;
}

}  // namespace reshard
