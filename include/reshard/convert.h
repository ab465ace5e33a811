// ConvertLayout: a layout text stated again in another notation, the one
// answer `reshard convert` and Python's reshard.convert give.
//
// The output is stated over the mesh given, else the one the text was stated
// over, else (HLO input) one read off its tile assignment (axes a, b, ...,
// `mesh_suggested`), else none. A named text (JAX, Shardy, V3) keeps its axes
// as written, size-1 axes included, where the target notation can state them
// so; an HLO text printed as HLO keeps its own form (an iota stays an iota, a
// list a list), as XLA prints it. Every text returned reads back to the same
// layout (checked: Internal otherwise).
//
// Errors: the text's own (ParseLayout's); NotSupported where the notation
// cannot state the layout over any mesh tried, with the first reason.
#ifndef RESHARD_CONVERT_H_
#define RESHARD_CONVERT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/dtype.h"
#include "reshard/mesh.h"
#include "reshard/notation.h"
#include "reshard/status.h"

namespace reshard {

struct ConvertedLayout {
  std::string text;
  std::optional<Mesh> mesh;     // the mesh a named text is stated over (none for HLO and DTensor without one)
  bool mesh_suggested = false;  // that mesh was read off an HLO tile assignment
};

Result<ConvertedLayout> ConvertLayout(std::string_view text, const std::vector<int64_t>& shape, DType dtype,
                                      const std::optional<Mesh>& mesh, Notation to);

}  // namespace reshard

#endif  // RESHARD_CONVERT_H_
