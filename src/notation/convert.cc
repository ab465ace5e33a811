#include "reshard/convert.h"

#include <fmt/format.h>

#include <cctype>

#include "reshard/hlo_text.h"
#include "reshard/named_text.h"

namespace reshard {
namespace {

// The named sharding a JAX, Shardy or V3 text states over `mesh`, with only
// its axes (no '?', priorities or replicated={...}); nullopt for other texts,
// or when the text is stated over another mesh.
std::optional<NamedSharding> SourceNamed(std::string_view text, const ParsedLayout& p, const std::optional<Mesh>& given,
                                         const Mesh& mesh, size_t rank) {
  Result<NamedText> t = p.notation == Notation::kJax      ? ParseJaxSpec(text)
                        : p.notation == Notation::kShardy ? ParseShardySharding(text)
                        : p.notation == Notation::kHloV3  ? ParseHloV3(text)
                                                          : Result<NamedText>(Status::InvalidArgument("not named"));
  if (!t.ok()) return std::nullopt;
  if (p.notation == Notation::kJax && t->dims.size() < rank) t->dims.resize(rank);
  Result<NamedSharding> s = BindNamedText(*t, given, text);
  if (!s.ok() || !(s->mesh() == mesh)) return std::nullopt;
  std::vector<NamedSharding::Dim> dims;
  for (const NamedSharding::Dim& d : s->dims()) dims.push_back({d.axes});
  Result<NamedSharding> bare = NamedSharding::Create(mesh, std::move(dims), {}, s->unreduced());
  if (!bare.ok()) return std::nullopt;
  return std::move(bare).value();
}

// `s` in notation `to`, its axes as written (JAX, Shardy and V3 print size-1
// axes too); nullopt where the notation cannot state it so (sub-axes in JAX, or
// a mesh V3 text cannot name), and the layout's own inference decides.
std::optional<std::string> PrintAsWritten(const NamedSharding& s, Notation to) {
  switch (to) {
    case Notation::kHlo: {
      Result<HloSharding> h = s.ToHlo();
      if (!h.ok()) return std::nullopt;
      return h->ToString();
    }
    case Notation::kJax: {
      for (const NamedSharding::Dim& d : s.dims())
        for (const AxisRef& a : d.axes)
          if (a.is_sub_axis()) return std::nullopt;
      NamedText t = NamedTextOf(s, NamedText::Syntax::kShardy);  // keeps size-1 axes
      t.syntax = NamedText::Syntax::kJax;
      for (NamedText::Dim& d : t.dims) d.tuple = d.axes.size() > 1;
      return PrintNamedText(t);
    }
    case Notation::kShardy:
      return PrintNamedText(NamedTextOf(s, NamedText::Syntax::kShardy));
    case Notation::kHloV3: {
      // V3 text names no device ids, and its axis names are identifiers; PrintLayout says why not.
      if (!s.mesh().is_iota()) return std::nullopt;
      for (const Mesh::Axis& a : s.mesh().axes())
        if (a.name.empty() || std::isdigit(static_cast<unsigned char>(a.name[0])) ||
            a.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string::npos)
          return std::nullopt;
      return PrintNamedText(NamedTextOf(s, NamedText::Syntax::kHloV3));
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

Result<ConvertedLayout> ConvertLayout(std::string_view text, const std::vector<int64_t>& shape, DType dtype,
                                      const std::optional<Mesh>& given, Notation to) {
  RESHARD_ASSIGN_OR_RETURN(const ParsedLayout p, ParseLayout(text, shape, dtype, given));
  // The output mesh: the one given, the one the input was stated over, or else
  // one read off an HLO tile assignment (axes a, b, ...), then none at all.
  std::vector<std::optional<Mesh>> meshes;
  bool suggested = false;
  if (given || p.mesh) {
    meshes.push_back(given ? given : p.mesh);
  } else {
    if (p.notation == Notation::kHlo)
      if (Result<HloSharding> hlo = ParseHloSharding(text); hlo.ok())
        for (Mesh& m : SuggestMeshes(*hlo)) meshes.push_back(std::move(m));
    suggested = !meshes.empty();
    meshes.push_back(std::nullopt);
  }
  Result<std::string> out = Status::Internal("no mesh tried");
  Status first_error;
  std::optional<Mesh> mesh;
  if (to == Notation::kHlo && p.notation == Notation::kHlo) {
    // An HLO text prints as XLA prints it, whatever the mesh.
    out = XlaText(ParseHloSharding(text).value());
    mesh = given;
  } else if (meshes.front()) {
    // A named sharding keeps its axes as written, over the mesh it names.
    if (std::optional<NamedSharding> s = SourceNamed(text, p, given, *meshes.front(), shape.size()))
      if (std::optional<std::string> t = PrintAsWritten(*s, to)) {
        out = *t;
        mesh = meshes.front();
      }
  }
  for (const std::optional<Mesh>& m : meshes) {
    if (out.ok()) break;
    out = PrintLayout(p.layout, to, m);
    if (out.ok()) {
      mesh = m;
      break;
    }
    if (first_error.ok()) first_error = out.status();
  }
  if (!out.ok())
    return Status::NotSupported(
        fmt::format("cannot state this layout in {} notation: {}", NotationName(to), first_error.message()));
  // Every printed text reads back to the same layout, over the mesh it was
  // stated over (or, without one, over the layout's own devices). HLO text
  // names no mesh: over a mesh with other devices than the layout's (a text
  // with its own mesh, which a given mesh does not replace) it names the
  // layout's devices, and is read back over them.
  std::optional<Mesh> back_mesh = mesh;
  if (back_mesh && to == Notation::kHlo && !back_mesh->HasDevices(p.layout.devices())) back_mesh.reset();
  if (!back_mesh) {
    Result<Mesh> own = Mesh::Create({{"devices", static_cast<int64_t>(p.layout.devices().size())}}, p.layout.devices());
    if (own.ok()) back_mesh = *own;
  }
  Result<ParsedLayout> back = ParseLayout(*out, shape, dtype, back_mesh);
  if (!back.ok() || !(back->layout == p.layout))
    return Status::Internal(fmt::format("the {} text '{}' does not read back to the layout ({})", NotationName(to), *out,
                                        back.ok() ? "another layout" : back.status().message()));
  ConvertedLayout c;
  c.text = std::move(out).value();
  const bool named = to != Notation::kHlo && mesh.has_value();
  if (named) c.mesh = mesh;
  c.mesh_suggested = named && suggested;
  return c;
}

}  // namespace reshard
