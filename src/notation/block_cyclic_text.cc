// Block-cyclic text: "blockcyclic(block=[64,64], grid=[2,4])"; the two
// keywords may come in either order.
#include "reshard/block_cyclic_text.h"

#include "layout/int_list.h"
#include "notation/text_cursor.h"

namespace reshard {
Result<BlockCyclic> ParseBlockCyclic(std::string_view text) {
  TextCursor c(text);
  if (c.AtEnd()) return Status::InvalidArgument("empty block-cyclic text");
  RESHARD_RETURN_IF_ERROR(c.Expect("blockcyclic"));
  RESHARD_RETURN_IF_ERROR(c.Expect("("));
  BlockCyclic bc;
  bool have_block = false, have_grid = false;
  do {
    const size_t at = c.Mark();
    RESHARD_ASSIGN_OR_RETURN(std::string key, c.ParseIdentifier());
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
    if (key == "block" && !have_block) {
      RESHARD_ASSIGN_OR_RETURN(bc.block, c.ParseIntList('[', ']'));
      have_block = true;
    } else if (key == "grid" && !have_grid) {
      RESHARD_ASSIGN_OR_RETURN(bc.grid, c.ParseIntList('[', ']'));
      have_grid = true;
    } else {
      return c.ErrorAt(at, "expected 'block=' or 'grid=' once each, found '" + key + "'");
    }
  } while (c.TryConsume(","));
  RESHARD_RETURN_IF_ERROR(c.Expect(")"));
  RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
  if (!have_block || !have_grid) return c.ErrorAt(0, "block-cyclic needs both block=[...] and grid=[...]");
  if (bc.block.size() != bc.grid.size()) return c.ErrorAt(0, "block and grid have different lengths");
  for (size_t d = 0; d < bc.block.size(); ++d)
    if (bc.block[d] < 1 || bc.grid[d] < 1) return c.ErrorAt(0, "block and grid entries must be >= 1");
  return bc;
}

std::string PrintBlockCyclic(const BlockCyclic& bc) {
  return "blockcyclic(block=[" + JoinInts(bc.block) + "], grid=[" + JoinInts(bc.grid) + "])";
}

}  // namespace reshard
