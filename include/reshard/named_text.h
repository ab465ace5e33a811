// The three text forms of a NamedSharding, parsed to one syntax tree that
// keeps axis names unresolved (with their columns, for error messages) and
// remembers how it was written, so Print(Parse(s)) == s for canonical text:
//
//   JAX        P('y', None, 'x')            PartitionSpec(None, ('x', 'y'))
//   Shardy     #sdy.sharding<@mesh, [{"y"}, {}, {"x"}]>   [{"y"}, {}, {"x"}]
//              <@mesh, [{"x":(1)2, ?}, {}], replicated={"z"}>
//              <@mesh, [{"y"}, {}], unreduced={"x"}>   (JAX: P('y', None, unreduced={'x'}))
//   HLO (V3)   {mesh[x=4,y=2], [{y}, {}, {x}]}
//
// Bind() resolves names against a mesh (JAX needs one given; Shardy and V3 may
// carry their own) and drops nothing: size-1 axes stay, as in Shardy.
#ifndef RESHARD_NAMED_TEXT_H_
#define RESHARD_NAMED_TEXT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/mesh.h"
#include "reshard/named_sharding.h"
#include "reshard/status.h"

namespace reshard {

struct NamedText {
  enum class Syntax { kJax, kShardy, kHloV3 };
  enum class ShardyForm { kAttribute, kAngle, kBare };  // #sdy.sharding<..>, <..>, [..]

  struct Axis {
    std::string name;
    int64_t pre_size = 1, size = 0;  // size 0: whole axis
    size_t column = 0;               // where it was written (0-based), for errors
    friend bool operator==(const Axis& a, const Axis& b) { return a.name == b.name && a.pre_size == b.pre_size && a.size == b.size; }
  };
  struct Dim {
    std::vector<Axis> axes;
    bool open = false;                // Shardy '?'
    std::optional<int64_t> priority;  // Shardy 'p<N>'
    bool tuple = false;               // JAX: written as a tuple
    friend bool operator==(const Dim&, const Dim&) = default;
  };

  Syntax syntax = Syntax::kJax;
  std::vector<Dim> dims;
  std::vector<Axis> replicated;
  std::vector<Axis> unreduced;  // axes holding partial sums
  std::vector<Axis> reduced;    // JAX reduced={...}: replicated, kept only to print back
  // JAX style.
  std::string jax_head = "P";
  char quote = '\'';
  // Shardy style.
  ShardyForm shardy_form = ShardyForm::kAttribute;
  std::string mesh_name = "mesh";  // "@mesh"; empty when the mesh is inline
  std::optional<Mesh> inline_mesh; // Shardy "mesh<[...]>" or V3 "mesh[...]"

  friend bool operator==(const NamedText&, const NamedText&) = default;
};

Result<NamedText> ParseJaxSpec(std::string_view text);
Result<NamedText> ParseShardySharding(std::string_view text);
Result<NamedText> ParseHloV3(std::string_view text);
std::string PrintNamedText(const NamedText& t);

// Resolves names: uses t.inline_mesh if present, else `mesh` (error if none).
// `source` is the parsed text, quoted in errors.
Result<NamedSharding> BindNamedText(const NamedText& t, const std::optional<Mesh>& mesh, std::string_view source);
// The text of `s` in `syntax`, in canonical style.
NamedText NamedTextOf(const NamedSharding& s, NamedText::Syntax syntax, bool inline_mesh = false);

// Meshes: "x=4,y=2" (the CLI form), or Shardy "sdy.mesh @mesh = <["x"=4, "y"=2]>",
// "<["x"=4, "y"=2], device_ids=[3,2,1,0]>", "mesh<[...]>", "#sdy.mesh<[...]>".
// `name` (optional) receives the Shardy mesh name.
Result<Mesh> ParseMesh(std::string_view text, std::string* name = nullptr);
// Shardy mesh body: <["x"=4, "y"=2]> or with ", device_ids=[...]".
std::string PrintShardyMesh(const Mesh& m);

}  // namespace reshard

#endif  // RESHARD_NAMED_TEXT_H_
