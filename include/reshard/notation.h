// Notation: every sharding text reshard reads, detected from the text itself,
// and the conversion of any Layout back into each notation where it is
// expressible.
//
//   kHlo         {devices=[2,1,4]<=[4,2]T(1,0)}, {replicated}, {maximal device=0}
//   kHloV3       {mesh[x=4,y=2], [{y}, {}, {x}]}
//   kJax         P('y', None, 'x')                          (needs a mesh)
//   kShardy      #sdy.sharding<@mesh, [{"y"}, {}, {"x"}]>    (mesh inline or given)
//   kDTensor     [Shard(0), Replicate()]                    (needs a mesh)
//   kBlockCyclic blockcyclic(block=[64,64], grid=[2,4])     (devices from the mesh or iota)
#ifndef RESHARD_NOTATION_H_
#define RESHARD_NOTATION_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/dtype.h"
#include "reshard/hlo_sharding.h"
#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/status.h"

namespace reshard {

enum class Notation { kHlo, kHloV3, kJax, kShardy, kDTensor, kBlockCyclic };

std::string_view NotationName(Notation n);  // "hlo", "hlo-v3", "jax", "shardy", "dtensor", "blockcyclic"
Result<Notation> ParseNotationName(std::string_view name);
// Decided by the leading text; the error lists what each notation starts with.
Result<Notation> DetectNotation(std::string_view text);

struct ParsedLayout {
  Layout layout;
  Notation notation;
  std::optional<Mesh> mesh;  // the mesh the text was stated over, if any
};

// Parses `text` in the notation it is written in. `mesh` supplies the axes
// for JAX and DTensor, the device set for {replicated}, and the device order
// for block-cyclic layouts; Shardy and V3 texts may carry their own mesh.
Result<ParsedLayout> ParseLayout(std::string_view text, const std::vector<int64_t>& shape, DType dtype,
                                 const std::optional<Mesh>& mesh);

// Prints `layout` in `notation` over `mesh` (required for JAX, Shardy and
// DTensor; optional for HLO, where it yields JAX's iota form). Fails with a
// reason when the layout cannot be stated in that notation.
Result<std::string> PrintLayout(const Layout& layout, Notation notation, const std::optional<Mesh>& mesh);

// Meshes under which an HLO tiled sharding may be a named sharding, best
// first: the iota's reshape dims (axes "a", "b", ...; iota ids), then the tile
// dims over the sharding's own device list (always works for tiled shardings).
std::vector<Mesh> SuggestMeshes(const HloSharding& s);

}  // namespace reshard

#endif  // RESHARD_NOTATION_H_
