// reshard convert: the same layout in another notation, where expressible.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "reshard/hlo_text.h"
#include "reshard/named_text.h"

namespace reshard::cli {
namespace {

struct ConvertOptions {
  CommonOptions common;
  std::string sharding;
  std::string to;
};

void RunConvert(const ConvertOptions& o) {
  const std::vector<int64_t> shape = ParseShape(o.common.shape);
  const DType dtype = ParseDTypeOrThrow(o.common.dtype);
  Result<Notation> to = ParseNotationName(o.to);
  ThrowIfError(to.status(), "--to");
  const std::optional<Mesh> given = BuildMesh(o.common.mesh, o.common.devices, "--mesh");
  const ParsedLayout p = LoadLayout(o.sharding, shape, dtype, given, "--sharding");
  // The output mesh: the one given, the one the input was stated over, or else
  // one read off an HLO tile assignment (axes a, b, ...), then none at all.
  std::vector<std::optional<Mesh>> meshes;
  bool suggested = false;
  if (given || p.mesh) {
    meshes.push_back(given ? given : p.mesh);
  } else {
    if (p.notation == Notation::kHlo)
      if (Result<HloSharding> hlo = ParseHloSharding(o.sharding); hlo.ok())
        for (Mesh& m : SuggestMeshes(*hlo)) meshes.push_back(std::move(m));
    suggested = !meshes.empty();
    meshes.push_back(std::nullopt);
  }
  Result<std::string> text = Status::Internal("no mesh tried");
  Status first_error;
  std::optional<Mesh> mesh;
  for (const std::optional<Mesh>& m : meshes) {
    text = PrintLayout(p.layout, *to, m);
    if (text.ok()) { mesh = m; break; }
    if (first_error.ok()) first_error = text.status();
  }
  if (!text.ok()) ThrowIfError(first_error, fmt::format("cannot state this layout in {} notation", o.to), kExitUnmet);
  suggested = suggested && mesh.has_value();
  const bool named = *to != Notation::kHlo && mesh.has_value();
  if (o.common.json) {
    nlohmann::ordered_json j = {{"notation", o.to}, {"text", *text}};
    if (named) j["mesh"] = mesh->ToString();
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << *text << "\n";
  if (named && suggested) std::cerr << fmt::format("note: over mesh {} (read off the tile assignment)\n", mesh->ToString());
}

}  // namespace

void RegisterConvert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "print a layout in another notation");
  AddCommonOptions(cmd, o->common);
  cmd->add_option("--sharding", o->sharding, "the layout, in any notation")->required();
  cmd->add_option("--to", o->to, "hlo, hlo-v3, jax, shardy or dtensor")->required();
  cmd->callback([o]() { RunConvert(*o); });
}

}  // namespace reshard::cli
