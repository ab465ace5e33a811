// HLO sharding text, read into an HloSharding (notation library):
//
//   {replicated}  {maximal device=3}  {devices=[2,2]0,2,1,3}
//   {devices=[2,1,4]<=[4,2]T(1,0)}  {devices=[4,1,2]<=[8] last_tile_dim_replicate}
//
// The printer is HloSharding::ToString (hlo_sharding.h, layout library), and
// ParseHloSharding(s)->ToString() == s for canonical text; XlaText prints
// what XLA prints for any text. The named V3 form
// ("{mesh[x=4,y=2], [{y}, {}, {x}]}") is read by ParseHloV3 (named_text.h).
// The grammar is in docs/notations/hlo.md. Stateless; thread-safe.
#ifndef RESHARD_HLO_TEXT_H_
#define RESHARD_HLO_TEXT_H_

#include <string_view>

#include "reshard/hlo_sharding.h"
#include "reshard/status.h"

namespace reshard {

// Parses V1 and V2 HLO sharding text; `metadata=...` is ignored, and
// last_tile_dims={replicated, ...} becomes one replication dim. Errors name
// the column and the expected token; manual, unreduced and tuple shardings
// are refused as not supported (NotSupported), but only when the whole text
// parses: a malformed text is InvalidArgument wherever it fails.
// Example: "{devices=[2,1,4]<=[4,2]T(1,0)}" is
// HloSharding::Tile(TileAssignment::Iota({2,1,4}, {4,2}, {1,0}).value(), false).
Result<HloSharding> ParseHloSharding(std::string_view text);

// The text XLA prints for `s` (jaxlib's HloSharding.from_string, then str):
// each replica group ascending (an explicit list's groups sorted; an iota
// whose groups are not ascending rewritten as the iota whose groups are, or
// as a sorted list), a size-1 replication dim dropped, and "{replicated}" for
// a tiled sharding that only replicates (all data dims 1). The layout is the
// same, except that "{replicated}" no longer names its devices.
// Example: "{devices=[2,2]3,1,2,0 last_tile_dim_replicate}" prints as
// "{devices=[2,2]1,3,0,2 last_tile_dim_replicate}".
std::string XlaText(const HloSharding& s);

}  // namespace reshard

#endif  // RESHARD_HLO_TEXT_H_
