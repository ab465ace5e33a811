// reshard show: a layout in words (per device: boxes and bytes) and as a
// picture of two of its dims, in the spirit of jax.debug.visualize_sharding.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"

namespace reshard::cli {
namespace {

struct ShowOptions {
  CommonOptions common;
  std::string sharding;
  std::string dims;
};

std::string Label(std::span<const int64_t> holders) {
  if (holders.empty()) return "-";
  if (holders.size() <= 3) return fmt::format("{}", fmt::join(holders, ","));
  return fmt::format("{},{}..({})", holders[0], holders[1], holders.size());
}

// The tile coordinate of the cell holding index `at` along dim d.
int32_t TileAt(const Layout& l, int64_t d, int64_t at) {
  const DimGrid& g = l.dim(d);
  for (size_t k = 0; k < g.cell_tile.size(); ++k)
    if (g.cuts[k] <= at && at < g.cuts[k + 1]) return g.cell_tile[k];
  return 0;
}

void DrawPicture(const Layout& l, int64_t di, int64_t dj, std::ostream& out) {
  const DimGrid& gi = l.dim(di);
  const DimGrid& gj = l.dim(dj);
  if (gi.cell_tile.size() > 32 || gj.cell_tile.size() > 32) {
    out << fmt::format("(picture omitted: {} x {} cells)\n", gi.cell_tile.size(), gj.cell_tile.size());
    return;
  }
  std::vector<int32_t> base(l.rank(), 0);
  std::vector<int64_t> others;
  for (int64_t d = 0; d < l.rank(); ++d)
    if (d != di && d != dj) { base[d] = TileAt(l, d, 0); others.push_back(d); }
  std::vector<std::vector<std::string>> labels;
  size_t width = 5;
  for (size_t a = 0; a < gi.cell_tile.size(); ++a) {
    labels.emplace_back();
    for (size_t b = 0; b < gj.cell_tile.size(); ++b) {
      std::vector<int32_t> c = base;
      c[di] = gi.cell_tile[a];
      c[dj] = gj.cell_tile[b];
      labels.back().push_back(Label(l.Holders(l.TileIndex(c))));
      width = std::max(width, labels.back().back().size() + 2);
    }
  }
  out << fmt::format("dims {} (rows) x {} (columns){}; each cell lists the devices holding it\n", di, dj,
                     others.empty() ? "" : fmt::format(", at index 0 of dims {}", fmt::join(others, ",")));
  auto rule = [&]() {
    std::string s = "+";
    for (size_t b = 0; b < gj.cell_tile.size(); ++b) s += std::string(width, '-') + "+";
    out << "  " << s << "\n";
  };
  out << "  ";
  for (size_t b = 0; b < gj.cell_tile.size(); ++b) out << fmt::format(" {:^{}}", fmt::format("{}:{}", gj.cuts[b], gj.cuts[b + 1]), width);
  out << "\n";
  for (size_t a = 0; a < gi.cell_tile.size(); ++a) {
    rule();
    out << "  |";
    for (const std::string& s : labels[a]) out << fmt::format("{:^{}}|", s, width);
    out << fmt::format("  {}:{}\n", gi.cuts[a], gi.cuts[a + 1]);
  }
  rule();
}

// Appends JSON text to a string, integers through std::to_chars.
struct JsonText {
  std::string s;
  void Int(int64_t v) {
    char digits[24];
    s.append(digits, std::to_chars(digits, digits + sizeof(digits), v).ptr);
  }
  void Ints(std::span<const int64_t> v) {
    s += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) s += ',';
      Int(v[i]);
    }
    s += ']';
  }
};

// `show --json`, written as it is produced: one device entry at a time, so
// that memory stays that of the layout (the text of 2^24 devices is about 1.5
// GB, and a JSON value of it would take several times that).
void WriteJson(const ParsedLayout& p, const std::vector<int64_t>& shape, DType dtype, std::ostream& out) {
  const Layout& l = p.layout;
  JsonText j;
  nlohmann::ordered_json head = {{"shape", shape},
                                 {"dtype", std::string(DTypeName(dtype))},
                                 {"notation", std::string(NotationName(p.notation))}};
  if (l.partial()) head["reduction"] = {{"op", std::string(ReduceOpName(l.reduction().op))}, {"parts", l.reduction().parts}};
  j.s = head.dump();
  j.s.pop_back();  // the closing brace: the devices follow
  j.s += ",\"devices\":[";
  // Block-cyclic layouts can hold very many boxes; past kMaxListed only counts
  // are printed. A layout with one cell per tile in every dim holds at most
  // one box per device.
  constexpr int64_t kMaxListed = 1'000'000;
  bool one_cell_per_tile = true;
  for (int64_t d = 0; d < l.rank(); ++d)
    one_cell_per_tile = one_cell_per_tile && static_cast<int64_t>(l.dim(d).cell_tile.size()) == l.dim(d).tiles;
  int64_t total_boxes = 0;
  if (!one_cell_per_tile || static_cast<int64_t>(l.devices().size()) > kMaxListed)
    for (int64_t dev : l.devices()) total_boxes += l.DeviceBoxCount(dev);
  const bool listed = total_boxes <= kMaxListed;
  const std::vector<int64_t> zeros(l.rank(), 0);
  for (size_t i = 0; i < l.devices().size(); ++i) {
    const int64_t dev = l.devices()[i];
    j.s += i ? ",{\"id\":" : "{\"id\":";
    j.Int(dev);
    if (l.partial()) {
      j.s += ",\"part\":";
      j.Int(l.PartOf(dev));
    }
    if (listed) {
      const std::vector<Box> boxes = l.DeviceBoxes(dev);
      j.s += ",\"boxes\":[";
      int64_t elements = 0;
      for (size_t b = 0; b < boxes.size(); ++b) {
        j.s += b ? ",[" : "[";
        int64_t n = 1;
        for (size_t d = 0; d < boxes[b].dims.size(); ++d) {
          const Interval& iv = boxes[b].dims[d];
          j.s += d ? ",[" : "[";
          j.Int(iv.lo);
          j.s += ',';
          j.Int(iv.hi);
          j.s += ']';
          n *= iv.hi - iv.lo;
        }
        elements += n;
        j.s += ']';
      }
      j.s += "],\"bytes\":";
      j.Int(elements * l.element_bytes());
      j.s += ",\"box_count\":";
      j.Int(static_cast<int64_t>(boxes.size()));
      j.s += ",\"local_shape\":";
      j.Ints(l.LocalShape(dev));
      j.s += ",\"box_origins\":[";
      if (boxes.size() == 1) {
        j.Ints(zeros);
      } else if (boxes.size() > 1) {
        const std::vector<std::vector<int64_t>> origins = l.DeviceBoxOrigins(dev);
        for (size_t b = 0; b < origins.size(); ++b) {
          if (b) j.s += ',';
          j.Ints(origins[b]);
        }
      }
      j.s += "]}";
    } else {
      j.s += ",\"bytes\":";
      j.Int(l.LocalBytes(dev));
      j.s += ",\"box_count\":";
      j.Int(l.DeviceBoxCount(dev));
      j.s += ",\"local_shape\":";
      j.Ints(l.LocalShape(dev));
      j.s += '}';
    }
    if (j.s.size() >= (1 << 20)) {
      out.write(j.s.data(), static_cast<std::streamsize>(j.s.size()));
      j.s.clear();
    }
  }
  j.s += "]}\n";
  out.write(j.s.data(), static_cast<std::streamsize>(j.s.size()));
}

void RunShow(const ShowOptions& o) {
  if (o.common.json && !o.dims.empty())
    throw CliError(kExitBadInput,
                   "--dims conflicts with --json: it picks the dims of the picture, which --json leaves out");
  const ArrayType array = ParseArrayType(o.common);
  const std::vector<int64_t>& shape = array.shape;
  const DType dtype = array.dtype;
  const std::optional<Mesh> mesh = BuildMesh(o.common.mesh, o.common.devices, "--mesh");
  const ParsedLayout p = LoadLayout(o.sharding, shape, dtype, mesh, "--sharding");
  const Layout& l = p.layout;
  int64_t di = 0, dj = 1;
  if (!o.dims.empty()) {
    std::vector<int64_t> d = ParseIntList(o.dims, "--dims");
    if (d.size() != 2 || d[0] >= l.rank() || d[1] >= l.rank() || d[0] == d[1])
      throw CliError(kExitBadInput, fmt::format("--dims: '{}' must name two different dims below rank {}", Short(o.dims), l.rank()));
    di = d[0];
    dj = d[1];
  }
  if (o.common.json) {
    WriteJson(p, shape, dtype, std::cout);
    return;
  }
  std::cout << fmt::format("{} on {}, {} notation: {}\n", FormatShape(shape, dtype), Plural(l.devices().size(), "device"),
                           NotationName(p.notation), o.sharding);
  if (l.partial())
    std::cout << fmt::format("  pending {}: the array is the {} over {} parts; each device holds one part of its boxes\n",
                             ReduceOpName(l.reduction().op), ReduceOpName(l.reduction().op), l.reduction().parts);  const bool blocks = std::any_of(l.devices().begin(), l.devices().end(), [&](int64_t d) { return l.DeviceBoxCount(d) > 1; });
  for (int64_t dev : l.devices()) {
    const int64_t count = l.DeviceBoxCount(dev);
    std::string shown = "nothing";
    if (count > 0 && count <= 4) {
      std::vector<std::string> boxes;
      for (const Box& b : l.DeviceBoxes(dev)) boxes.push_back(b.ToString());
      shown = fmt::format("{}", fmt::join(boxes, " "));
    } else if (count > 4 && count <= 100'000) {
      std::vector<Box> all = l.DeviceBoxes(dev);
      shown = fmt::format("{} {} ... ({} boxes)", all[0].ToString(), all[1].ToString(), count);
    } else if (count > 4) {
      shown = fmt::format("{} boxes", count);
    }
    // Where the boxes concatenate into a local buffer, say its shape.
    const std::string local = blocks && count > 0 ? fmt::format("  local [{}]", fmt::join(l.LocalShape(dev), ",")) : "";
    const std::string part = l.partial() && count > 0 ? fmt::format("  part {}", l.PartOf(dev)) : "";
    std::cout << fmt::format("  device {:>4}: {:>10} bytes  {}{}{}\n", dev, l.LocalBytes(dev), shown, local, part);
  }
  if (l.rank() == 2 || (!o.dims.empty() && l.rank() > 2)) {
    std::cout << "\n";
    DrawPicture(l, di, dj, std::cout);
  } else if (l.rank() > 2) {
    std::cout << "\n(add --dims i,j for a picture of two dims)\n";
  }
}

}  // namespace

void RegisterShow(CLI::App& app) {
  auto o = std::make_shared<ShowOptions>();
  CLI::App* cmd = app.add_subcommand("show", "describe a layout: per device its boxes and bytes, and a picture");
  AddCommonOptions(cmd, o->common);
  cmd->add_option("--sharding", o->sharding, "the layout, in any notation (@FILE: read from a file)")
      ->required()
      ->transform(AtFile());
  cmd->add_option("--dims", o->dims, "two dims to draw, e.g. 0,2 (default 0,1 for 2-D arrays; not with --json)");
  cmd->callback([o]() { RunShow(*o); });
}

}  // namespace reshard::cli
