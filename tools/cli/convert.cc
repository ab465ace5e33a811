// reshard convert: the same layout in another notation, where expressible.
#include <fmt/format.h>

#include <cctype>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "reshard/convert.h"

namespace reshard::cli {
namespace {

struct ConvertOptions {
  CommonOptions common;
  std::string sharding;
  std::string to;
};

void RunConvert(const ConvertOptions& o) {
  const ArrayType array = ParseArrayType(o.common);
  Result<Notation> to = ParseNotationName(o.to);
  ThrowIfError(to.status(), "--to");
  const std::optional<Mesh> given = BuildMesh(o.common.mesh, o.common.devices, "--mesh");
  LoadLayout(o.sharding, array.shape, array.dtype, given, "--sharding");  // (its errors name the option)
  Result<ConvertedLayout> c = ConvertLayout(o.sharding, array.shape, array.dtype, given, *to);
  // (NotSupported: the notation cannot state it, exit 1; Internal: a text that does not read back.)
  ThrowIfError(c.status(), c.status().code() == Status::Code::kInternal ? "internal error" : "");
  if (o.common.json) {
    nlohmann::ordered_json j = {{"notation", o.to}, {"text", c->text}};
    if (c->mesh) j["mesh"] = c->mesh->ToString();
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << c->text << "\n";
  if (c->mesh_suggested)
    std::cerr << fmt::format("note: over mesh {} (read off the tile assignment)\n", c->mesh->ToString());
}

}  // namespace
void RegisterConvert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "print a layout in another notation");
  AddCommonOptions(cmd, o->common);
  cmd->add_option("--sharding", o->sharding, "the layout, in any notation (@FILE: read from a file)")
      ->required()
      ->transform(AtFile());
  cmd->add_option("--to", o->to, "hlo, hlo-v3, jax, shardy or dtensor")->required();
  cmd->callback([o]() { RunConvert(*o); });
}

}  // namespace reshard::cli
