// Block-cyclic text (notation library):
//
//   blockcyclic(block=[64,64], grid=[2,4])     (the keywords in either order)
//
// read into and printed from the BlockCyclic value of block_cyclic.h (layout
// library). PrintBlockCyclic(*ParseBlockCyclic(s)) == s for canonical text
// (block first, no spaces inside the lists). The grammar is in
// docs/notations/blockcyclic.md. Stateless; thread-safe.
#ifndef RESHARD_BLOCK_CYCLIC_TEXT_H_
#define RESHARD_BLOCK_CYCLIC_TEXT_H_

#include <string>
#include <string_view>

#include "reshard/block_cyclic.h"
#include "reshard/status.h"

namespace reshard {

// Fails unless block and grid are given once each, have the same length and
// hold entries >= 1.
// Example: "blockcyclic(grid=[2,4], block=[64,64])" is {block {64,64}, grid {2,4}}.
Result<BlockCyclic> ParseBlockCyclic(std::string_view text);
// The canonical text: "blockcyclic(block=[64,64], grid=[2,4])".
std::string PrintBlockCyclic(const BlockCyclic& bc);

}  // namespace reshard

#endif  // RESHARD_BLOCK_CYCLIC_TEXT_H_
