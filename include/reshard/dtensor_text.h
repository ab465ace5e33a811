// DTensor placement text (notation library): one placement per mesh dim,
//
//   [Shard(0), Replicate()]     (Shard(0), Replicate())     [Shard(dim=-1)]
//   [_StridedShard(0, split_factor=2), Shard(0)]     [_StridedShard(dim=0, sf=2), Shard(0)]
//
// read into and printed from the Placement values of dtensor.h (layout
// library). PrintPlacements(*ParsePlacements(s)) == s for canonical text (the
// bracketed list with ", " separators). The grammar is in
// docs/notations/dtensor.md. Stateless; thread-safe.
#ifndef RESHARD_DTENSOR_TEXT_H_
#define RESHARD_DTENSOR_TEXT_H_

#include <string>
#include <string_view>
#include <vector>

#include "reshard/dtensor.h"
#include "reshard/status.h"

namespace reshard {

// Partial() is refused as not supported.
// Example: "[Shard(0), Replicate()]" is {{kShard, 0}, {kReplicate, 0}}.
Result<std::vector<Placement>> ParsePlacements(std::string_view text);
// The canonical text: "[Shard(0), Replicate()]".
std::string PrintPlacements(const std::vector<Placement>& placements);

}  // namespace reshard

#endif  // RESHARD_DTENSOR_TEXT_H_
