// HLO sharding text: the parser (V1 explicit lists, V2 iota lists); the
// printer is HloSharding::ToString, in the layout library.
#include "reshard/hlo_text.h"

#include <string>
#include <vector>

#include "notation/text_cursor.h"

namespace reshard {
namespace {

// Trailing ", metadata={...}" or " metadata={...}" parts are ignored.
Status SkipMetadata(TextCursor& c) {
  while (true) {
    const size_t before = c.pos();
    c.TryConsume(",");
    if (!c.TryConsumeWord("metadata")) {
      c.set_pos(before);  // a comma belongs to metadata only
      return Status::Ok();
    }
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
    RESHARD_RETURN_IF_ERROR(c.SkipBalanced());
  }
}

Result<HloSharding> ParseTiled(TextCursor& c) {
  const size_t start = c.Mark();
  RESHARD_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.ParseIntList('[', ']'));
  if (dims.empty()) return c.ErrorAt(start, "tile dimensions are empty");
  Result<TileAssignment> tiles = Status::Internal("unset");
  if (c.TryConsume("<=")) {
    RESHARD_ASSIGN_OR_RETURN(std::vector<int64_t> reshape, c.ParseIntList('[', ']'));
    std::vector<int64_t> perm;
    if (c.TryConsume("T")) {
      RESHARD_ASSIGN_OR_RETURN(perm, c.ParseIntList('(', ')'));
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
  bool replicate_last = false;
  if (c.TryConsumeWord("last_tile_dim_replicate")) {
    replicate_last = true;
  } else if (c.TryConsumeWord("last_tile_dims")) {
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
    RESHARD_RETURN_IF_ERROR(c.Expect("{"));
    int64_t count = 0;
    do {
      const size_t at = c.Mark();
      RESHARD_ASSIGN_OR_RETURN(std::string type, c.ParseIdentifier());
      if (type == "manual" || type == "unreduced")
        return Status::NotSupported(c.ErrorAt(at, "'" + type + "' subgroups are not supported yet").message());
      if (type != "replicated") return c.ErrorAt(at, "unknown subgroup type '" + type + "'");
      ++count;
    } while (c.TryConsume(","));
    RESHARD_RETURN_IF_ERROR(c.Expect("}"));
    // Several replicated subgroup dims act as one: merge them.
    std::vector<int64_t> d = tiles->dims();
    if (count >= static_cast<int64_t>(d.size())) return c.ErrorAt(start, "more subgroup dims than tile dims");
    int64_t repl = 1;
    for (int64_t i = 0; i < count; ++i) { repl *= d.back(); d.pop_back(); }
    d.push_back(repl);
    tiles = tiles->is_iota() ? TileAssignment::Iota(d, tiles->reshape_dims(), tiles->perm())
                             : TileAssignment::Explicit(d, tiles->Devices());
    replicate_last = true;
  }
  if (replicate_last && tiles->dims().size() < 1) return c.ErrorAt(start, "last_tile_dim_replicate needs a tile dim");
  return HloSharding::Tile(std::move(tiles).value(), replicate_last);
}

}  // namespace

Result<HloSharding> ParseHloSharding(std::string_view text) {
  TextCursor c(text);
  if (c.AtEnd()) return Status::InvalidArgument("empty sharding text");
  RESHARD_RETURN_IF_ERROR(c.Expect("{"));
  Result<HloSharding> out = Status::Internal("unset");
  const size_t at = c.Mark();
  if (c.Peek() == '{') return Status::NotSupported(c.ErrorAt(at, "tuple shardings are not supported yet").message());
  if (c.TryConsumeWord("replicated")) {
    out = HloSharding::Replicate();
  } else if (c.TryConsumeWord("maximal")) {
    RESHARD_RETURN_IF_ERROR(c.Expect("device"));
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
    RESHARD_ASSIGN_OR_RETURN(int64_t d, c.ParseInt());
    out = HloSharding::AssignDevice(d);
  } else if (c.TryConsumeWord("devices")) {
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
    out = ParseTiled(c);
    if (!out.ok()) return out.status();
  } else if (c.TryConsumeWord("manual") || c.TryConsumeWord("unreduced") || c.TryConsumeWord("unknown")) {
    return Status::NotSupported(c.ErrorAt(at, "'" + std::string(text.substr(at, c.pos() - at)) +
                                                  "' shardings are not supported yet").message());
  } else {
    return c.Error("expected 'replicated', 'maximal', 'devices=' or 'manual' (found " + c.Found() + ")");
  }
  RESHARD_RETURN_IF_ERROR(SkipMetadata(c));
  if (c.TryConsumeWord("shard_as") || c.TryConsumeWord("shard_like"))
    return Status::NotSupported(c.Error("shard_as/shard_like groups are not supported yet").message());
  RESHARD_RETURN_IF_ERROR(c.Expect("}"));
  RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
  return out;
}

}  // namespace reshard
