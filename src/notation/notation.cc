#include "reshard/notation.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "notation/text_cursor.h"
#include "reshard/block_cyclic.h"
#include "reshard/block_cyclic_text.h"
#include "reshard/dtensor.h"
#include "reshard/dtensor_text.h"
#include "reshard/hlo_text.h"
#include "reshard/named_text.h"

namespace reshard {
namespace {

constexpr std::array<std::pair<Notation, std::string_view>, 6> kNames = {{
    {Notation::kHlo, "hlo"}, {Notation::kHloV3, "hlo-v3"}, {Notation::kJax, "jax"},
    {Notation::kShardy, "shardy"}, {Notation::kDTensor, "dtensor"}, {Notation::kBlockCyclic, "blockcyclic"},
}};

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) s.remove_prefix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool IsIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// The same layout over `mesh` as a tiled HLO sharding, without a mesh:
// explicit ids, each tile's holders ascending as the replica group.
Result<HloSharding> TiledHloOf(const Layout& l) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < l.rank(); ++d) dims.push_back(l.dim(d).tiles);
  const int64_t repl = static_cast<int64_t>(l.Holders(0).size());
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < l.num_tiles(); ++t) {
    auto h = l.Holders(t);
    if (static_cast<int64_t>(h.size()) != repl || repl == 0)
      return Status::InvalidArgument("tiles are held by different numbers of devices, which HLO shardings cannot state");
    ids.insert(ids.end(), h.begin(), h.end());
  }
  if (static_cast<size_t>(l.num_tiles() * repl) != l.devices().size())
    return Status::InvalidArgument("some devices hold nothing, which a tiled HLO sharding cannot state");
  if (repl > 1) dims.push_back(repl);
  bool iota = true;
  for (size_t i = 0; i < ids.size(); ++i) iota = iota && ids[i] == static_cast<int64_t>(i);
  Result<TileAssignment> tiles = iota ? TileAssignment::Iota(dims, {static_cast<int64_t>(ids.size())}, {0})
                                      : TileAssignment::Explicit(dims, ids);
  if (!tiles.ok()) return tiles.status();
  HloSharding s = HloSharding::Tile(std::move(tiles).value(), repl > 1);
  RESHARD_ASSIGN_OR_RETURN(Layout check, s.ToLayout(l.shape(), l.dtype(), std::nullopt));
  if (!(check == l)) return Status::InvalidArgument("the layout's split points are not XLA's even (ceil) splits");
  return s;
}

Result<Mesh> RequireMesh(const std::optional<Mesh>& mesh, Notation n) {
  if (!mesh) return Status::InvalidArgument(std::string(NotationName(n)) + " output needs a mesh (give --mesh)");
  return *mesh;
}

}  // namespace

std::string_view NotationName(Notation n) {
  for (const auto& [k, name] : kNames)
    if (k == n) return name;
  return "?";
}

Result<Notation> ParseNotationName(std::string_view name) {
  for (const auto& [k, n] : kNames)
    if (n == name) return k;
  return Status::InvalidArgument("unknown notation '" + std::string(name) + "' (known: hlo, hlo-v3, jax, shardy, dtensor, blockcyclic)");
}

Result<Notation> DetectNotation(std::string_view text) {
  std::string_view s = TrimLeft(text);
  if (s.empty()) return Status::InvalidArgument("empty sharding text");
  if (StartsWith(s, "{")) {
    std::string_view rest = TrimLeft(s.substr(1));
    return StartsWith(rest, "mesh") ? Notation::kHloV3 : Notation::kHlo;
  }
  if (StartsWith(s, "P(") || StartsWith(s, "P (") || StartsWith(s, "PartitionSpec") || StartsWith(s, "jax.")) return Notation::kJax;
  if (StartsWith(s, "#sdy") || StartsWith(s, "<")) return Notation::kShardy;
  if (StartsWith(s, "blockcyclic")) return Notation::kBlockCyclic;
  if (StartsWith(s, "[") || StartsWith(s, "(")) {
    std::string_view rest = TrimLeft(s.substr(1));
    if (StartsWith(rest, "{") || StartsWith(rest, "]")) return Notation::kShardy;
    return Notation::kDTensor;
  }
  return Status::InvalidArgument(
      "cannot tell the notation of '" + ShortText(text, 60) +
      "': expected HLO '{devices=...}', JAX 'P(...)', Shardy '#sdy.sharding<...>' or '[{...}]', DTensor '[Shard(0), ...]' "
      "or 'blockcyclic(...)'");
}

Result<ParsedLayout> ParseLayout(std::string_view text, const std::vector<int64_t>& shape, DType dtype,
                                 const std::optional<Mesh>& mesh) {
  RESHARD_ASSIGN_OR_RETURN(Notation n, DetectNotation(text));
  switch (n) {
    case Notation::kHlo: {
      RESHARD_ASSIGN_OR_RETURN(HloSharding s, ParseHloSharding(text));
      RESHARD_ASSIGN_OR_RETURN(Layout l, s.ToLayout(shape, dtype, mesh));
      return ParsedLayout{std::move(l), n, mesh};
    }
    case Notation::kHloV3:
    case Notation::kJax:
    case Notation::kShardy: {
      Result<NamedText> t = n == Notation::kJax      ? ParseJaxSpec(text)
                            : n == Notation::kShardy ? ParseShardySharding(text)
                                                     : ParseHloV3(text);
      if (!t.ok()) return t.status();
      // A PartitionSpec may omit trailing dims; they are replicated.
      if (n == Notation::kJax && t->dims.size() < shape.size()) t->dims.resize(shape.size());
      RESHARD_ASSIGN_OR_RETURN(NamedSharding s, BindNamedText(*t, mesh, text));
      RESHARD_ASSIGN_OR_RETURN(Layout l, s.ToLayout(shape, dtype));
      return ParsedLayout{std::move(l), n, s.mesh()};
    }
    case Notation::kDTensor: {
      RESHARD_ASSIGN_OR_RETURN(std::vector<Placement> p, ParsePlacements(text));
      if (!mesh) return Status::InvalidArgument("DTensor placements need a mesh (give --mesh)");
      RESHARD_ASSIGN_OR_RETURN(Layout l, PlacementsToLayout(p, *mesh, shape, dtype));
      return ParsedLayout{std::move(l), n, mesh};
    }
    case Notation::kBlockCyclic: {
      RESHARD_ASSIGN_OR_RETURN(BlockCyclic bc, ParseBlockCyclic(text));
      RESHARD_ASSIGN_OR_RETURN(Layout l, BlockCyclicToLayout(bc, mesh ? mesh->DeviceIds() : std::vector<int64_t>{}, shape, dtype));
      return ParsedLayout{std::move(l), n, mesh};
    }
  }
  return Status::Internal("unhandled notation");
}

Result<std::string> PrintLayout(const Layout& l, Notation n, const std::optional<Mesh>& mesh) {
  if (l.partial() && (n == Notation::kHlo || n == Notation::kBlockCyclic))
    return Status::NotSupported(std::string(NotationName(n)) +
                                " text cannot state a pending reduction (partial sums): print it as DTensor, JAX, Shardy or HLO V3");
  switch (n) {
    case Notation::kHlo: {
      // Everything on every device, or everything on one device.
      if (l.num_tiles() == 1 && l.TileElements(0) == l.num_elements()) {
        auto h = l.Holders(0);
        // {replicated} means every device of the mesh (JAX prints it for one-device meshes too).
        const bool all = h.size() == l.devices().size();
        if (all && mesh && mesh->HasDevices(l.devices())) return std::string("{replicated}");
        if (all && !mesh && h.size() > 1) return std::string("{replicated}");
        if (h.size() == 1) return "{maximal device=" + std::to_string(h[0]) + "}";
      }
      if (mesh) {
        Result<NamedSharding> named = NamedShardingFromLayout(l, *mesh, /*allow_sub_axes=*/true);
        if (named.ok()) {
          RESHARD_ASSIGN_OR_RETURN(HloSharding s, named->ToHlo());
          // Printing must never change the layout: rebuild and compare.
          Result<Layout> back = s.ToLayout(l.shape(), l.dtype(), mesh);
          if (back.ok() && *back == l) return s.ToString();
        }
      }
      RESHARD_ASSIGN_OR_RETURN(HloSharding s, TiledHloOf(l));
      return s.ToString();
    }
    case Notation::kHloV3:
    case Notation::kJax:
    case Notation::kShardy: {
      RESHARD_ASSIGN_OR_RETURN(Mesh m, RequireMesh(mesh, n));
      if (n == Notation::kHloV3 && !m.is_iota())
        return Status::InvalidArgument("HLO V3 text names no device ids, and mesh " + m.ToString() + " is not an iota");
      if (n == Notation::kHloV3)
        for (const Mesh::Axis& a : m.axes())
          if (!IsIdentifier(a.name)) return Status::InvalidArgument("HLO V3 text cannot name mesh axis '" + a.name + "'");
      RESHARD_ASSIGN_OR_RETURN(NamedSharding s, NamedShardingFromLayout(l, m, /*allow_sub_axes=*/n != Notation::kJax));
      const NamedText::Syntax syntax = n == Notation::kJax      ? NamedText::Syntax::kJax
                                       : n == Notation::kShardy ? NamedText::Syntax::kShardy
                                                                : NamedText::Syntax::kHloV3;
      return PrintNamedText(NamedTextOf(s, syntax));
    }
    case Notation::kDTensor: {
      RESHARD_ASSIGN_OR_RETURN(Mesh m, RequireMesh(mesh, n));
      RESHARD_ASSIGN_OR_RETURN(std::vector<Placement> p, PlacementsFromLayout(l, m));
      return PrintPlacements(p);
    }
    case Notation::kBlockCyclic:
      return Status::NotSupported("printing layouts as block-cyclic text is not supported yet");
  }
  return Status::Internal("unhandled notation");
}

std::vector<Mesh> SuggestMeshes(const HloSharding& s) {
  const auto* t = std::get_if<HloSharding::Tiled>(&s.kind());
  if (!t) return {};
  auto name = [](size_t i) { return i < 26 ? std::string(1, static_cast<char>('a' + i)) : "a" + std::to_string(i); };
  std::vector<Mesh> out;
  if (t->tiles.is_iota()) {
    std::vector<Mesh::Axis> axes;
    for (int64_t size : t->tiles.reshape_dims())
      if (size > 1) axes.push_back({name(axes.size()), size});
    if (Result<Mesh> m = Mesh::Create(std::move(axes)); m.ok()) out.push_back(*m);
  }
  std::vector<Mesh::Axis> axes;
  for (int64_t size : t->tiles.dims())
    if (size > 1) axes.push_back({name(axes.size()), size});
  if (Result<Mesh> m = Mesh::Create(std::move(axes), t->tiles.Devices()); m.ok()) out.push_back(*m);
  return out;
}

}  // namespace reshard
