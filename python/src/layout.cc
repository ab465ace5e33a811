// Mesh, Layout, NamedSharding and the notation parsers and printers, as Python
// types. Conversions only; errors follow the rule in bindings.h.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "bindings.h"
#include "reshard/convert.h"
#include "reshard/hlo_text.h"
#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/named_sharding.h"
#include "reshard/named_text.h"
#include "reshard/notation.h"

namespace nb = nanobind;

namespace reshard::python {
namespace {

using AxisSpec = std::variant<std::string, std::tuple<std::string, int64_t, int64_t>>;  // "x" or ("x", pre, size)

// A parsed layout with the meshes the planner should try for it: the one its
// text was stated over, then those an HLO tile assignment suggests (as the CLI does).
struct Parsed {
  ParsedLayout parsed;
  std::vector<Mesh> meshes;
  std::string text;                // as given to parse(), for convert (ConvertLayout reads the text as written)
  std::optional<Mesh> given_mesh;  // the mesh given to parse()
};

DType ToDType(const std::string& name) { return Unwrap(ParseDType(name)); }

nb::list BoxList(const std::vector<Box>& boxes) {
  nb::list out;
  for (const Box& b : boxes) {
    nb::list dims;
    for (const Interval& iv : b.dims) dims.append(nb::make_tuple(iv.lo, iv.hi));
    out.append(nb::tuple(dims));
  }
  return out;
}

int64_t AxisIndexOrRaise(const Mesh& mesh, const std::string& name) {
  std::optional<int64_t> i = mesh.AxisIndex(name);
  if (!i) Raise(Status::InvalidArgument("unknown mesh axis '" + name + "' (mesh is " + mesh.ToString() + ")"));
  return *i;
}

AxisRef ToAxisRef(const Mesh& mesh, const AxisSpec& a) {
  if (const auto* name = std::get_if<std::string>(&a)) return AxisRef{AxisIndexOrRaise(mesh, *name), 1, 0};
  const auto& [name, pre, size] = std::get<1>(a);
  return AxisRef{AxisIndexOrRaise(mesh, name), pre, size};
}

NamedSharding MakeNamed(const Mesh& mesh, const std::vector<std::vector<AxisSpec>>& dims,
                        const std::vector<AxisSpec>& replicated, const std::vector<AxisSpec>& unreduced) {
  std::vector<NamedSharding::Dim> out;
  for (const auto& d : dims) {
    NamedSharding::Dim dim;
    for (const AxisSpec& a : d) dim.axes.push_back(ToAxisRef(mesh, a));
    out.push_back(std::move(dim));
  }
  std::vector<AxisRef> rep;
  for (const AxisSpec& a : replicated) rep.push_back(ToAxisRef(mesh, a));
  std::vector<AxisRef> partial;
  for (const AxisSpec& a : unreduced) partial.push_back(ToAxisRef(mesh, a));
  return Unwrap(NamedSharding::Create(mesh, std::move(out), std::move(rep), std::move(partial)));
}

std::string LayoutText(const Layout& l) {
  std::ostringstream os;
  os << l;
  return os.str();
}

// The same layout with device d renamed ids[d] (d indexes ids).
Layout WithDevices(const Layout& l, const std::vector<int64_t>& ids) {
  std::vector<DimGrid> dims;
  for (int64_t d = 0; d < l.rank(); ++d) dims.push_back(l.dim(d));
  std::vector<DeviceTile> placement;
  for (int64_t dev : l.devices()) {
    if (dev < 0 || dev >= static_cast<int64_t>(ids.size()))
      Raise(Status::InvalidArgument("device " + std::to_string(dev) + " has no new id (" + std::to_string(ids.size()) +
                                    " ids given)"));
    placement.push_back({ids[dev], l.TileOf(dev), l.PartOf(dev)});
  }
  return Unwrap(Layout::Create(l.shape(), l.dtype(), std::move(dims), std::move(placement), l.reduction()));
}

}  // namespace

void BindLayout(nb::module_& m) {
  nb::class_<Mesh>(m, "Mesh", "Named axes with sizes over a list of device ids (row-major). Immutable.")
      .def(
          "__init__",
          [](Mesh* self, const std::vector<std::pair<std::string, int64_t>>& axes,
             const std::optional<std::vector<int64_t>>& device_ids) {
            std::vector<Mesh::Axis> a;
            for (const auto& [name, size] : axes) a.push_back({name, size});
            new (self) Mesh(Unwrap(Mesh::Create(std::move(a), device_ids.value_or(std::vector<int64_t>{}))));
          },
          nb::arg("axes"), nb::arg("device_ids") = nb::none(),
          "Mesh([('x', 4), ('y', 2)]) puts device 2x+y at (x, y); device_ids lists the ids row-major.")
      .def_static(
          "parse", [](const std::string& text) { return Unwrap(ParseMesh(text)); }, nb::arg("text"),
          "'x=4,y=2' or Shardy mesh text such as '<[\"x\"=4, \"y\"=2], device_ids=[3,2,1,0]>'.")
      .def_prop_ro("axes",
                   [](const Mesh& mesh) {
                     std::vector<std::pair<std::string, int64_t>> out;
                     for (const Mesh::Axis& a : mesh.axes()) out.emplace_back(a.name, a.size);
                     return out;
                   })
      .def_prop_ro("axis_names",
                   [](const Mesh& mesh) {
                     std::vector<std::string> out;
                     for (const Mesh::Axis& a : mesh.axes()) out.push_back(a.name);
                     return out;
                   })
      .def_prop_ro("device_ids", &Mesh::DeviceIds)
      .def_prop_ro("num_devices", &Mesh::num_devices)
      .def_prop_ro("is_iota", &Mesh::is_iota)
      .def(
          "groups",
          [](const Mesh& mesh, const std::vector<std::string>& names) {
            std::vector<int32_t> axes;
            for (const std::string& n : names) {
              const std::optional<int64_t> a = mesh.AxisIndex(n);
              if (!a) Raise(Status::InvalidArgument("unknown mesh axis '" + n + "' (mesh is " + mesh.ToString() + ")"));
              if (std::find(axes.begin(), axes.end(), *a) != axes.end())
                Raise(Status::InvalidArgument("mesh axis '" + n + "' listed twice"));
              axes.push_back(static_cast<int32_t>(*a));
            }
            // Mesh::GroupMembers is the one rule; each group once, from its first position.
            std::vector<std::vector<int64_t>> out;
            for (int64_t f = 0; f < mesh.num_devices(); ++f) {
              if (mesh.GroupOf(f, axes) != f) continue;
              std::vector<int64_t> members = mesh.GroupMembers(f, axes);
              for (int64_t& m : members) m = mesh.device(m);
              out.push_back(std::move(members));
            }
            return out;
          },
          nb::arg("axes"),
          "every group of devices that differ only on `axes`, each as device ids in member order (row-major over "
          "`axes` as listed): the groups a collective over `axes` runs in")
      .def("__str__", &Mesh::ToString)
      .def("__repr__", [](const Mesh& mesh) { return "Mesh('" + mesh.ToString() + "')"; })
      .def("__eq__", [](const Mesh& a, const Mesh& b) { return a == b; }, nb::is_operator())
      .def("__hash__", [](const Mesh& mesh) { return std::hash<std::string>()(mesh.ToString()); });

  nb::class_<Layout>(m, "Layout",
                     "Which device holds which elements of an N-d array (a grid of cells over tiles; "
                     "see include/reshard/layout.h). Two layouts are == when every device holds the same "
                     "elements, whatever notation they came from. Immutable.")
      .def_prop_ro("shape", &Layout::shape)
      .def_prop_ro("dtype", [](const Layout& l) { return std::string(DTypeName(l.dtype())); })
      .def_prop_ro("rank", &Layout::rank)
      .def_prop_ro("num_elements", &Layout::num_elements)
      .def_prop_ro("element_bytes", &Layout::element_bytes)
      .def_prop_ro("devices", &Layout::devices, "the layout's devices, ascending")
      .def_prop_ro("num_tiles", &Layout::num_tiles)
      .def_prop_ro("dim_tiles",
                   [](const Layout& l) {
                     std::vector<int64_t> out;
                     for (int64_t d = 0; d < l.rank(); ++d) out.push_back(l.dim(d).tiles);
                     return out;
                   },
                   "tiles along each dim (a dim split k ways has k)")
      .def_prop_ro("partial", &Layout::partial,
                   "whether the layout carries a pending reduction (DTensor Partial, JAX/Shardy unreduced axes)")
      .def_prop_ro("reduce_op", [](const Layout& l) -> std::optional<std::string> {
                     if (!l.partial()) return std::nullopt;
                     return std::string(ReduceOpName(l.reduction().op));
                   },
                   "the pending reduction's op ('sum', 'avg', 'max', 'min'), or None")
      .def_prop_ro("parts", [](const Layout& l) { return l.reduction().parts; },
                   "how many partial values each element has (1: no pending reduction)")
      .def("part_of", &Layout::PartOf, nb::arg("device"), "the part of a pending reduction the device holds (0 if none)")
      .def("tile_of", &Layout::TileOf, nb::arg("device"), "the tile the device holds, or -1")
      .def("local_shape", &Layout::LocalShape, nb::arg("device"))
      .def("local_bytes", &Layout::LocalBytes, nb::arg("device"))
      .def(
          "device_boxes", [](const Layout& l, int64_t device) { return BoxList(l.DeviceBoxes(device)); },
          nb::arg("device"), "the boxes the device holds, in local-buffer order: [((lo, hi), ...), ...]")
      .def(
          "boxes",
          [](const Layout& l) {
            nb::dict out;
            for (int64_t dev : l.devices()) out[nb::int_(dev)] = BoxList(l.DeviceBoxes(dev));
            return out;
          },
          "device -> its boxes (`reshard show`): {0: [((0, 8), (0, 16), (0, 4))], ...}")
      .def("with_devices", &WithDevices, nb::arg("ids"),
           "the same layout with each device d renamed ids[d] (HLO texts number devices by position)")
      .def(
          "to_text",
          [](const Layout& l, const std::string& notation, const std::optional<Mesh>& mesh) {
            const Notation to = Unwrap(ParseNotationName(notation));
            Result<std::string> text = PrintLayout(l, to, mesh);
            // (As `reshard convert` takes it: a layout the notation cannot state over this mesh.)
            if (!text.ok() && text.status().code() == Status::Code::kInvalidArgument)
              Raise(Status::NotSupported(std::string("cannot state this layout in ") + std::string(NotationName(to)) +
                                         " notation: " + text.status().message()));
            return Unwrap(std::move(text));
          },
          nb::arg("notation"), nb::arg("mesh") = nb::none(),
          "the layout in a notation ('hlo', 'hlo-v3', 'jax', 'shardy', 'dtensor'); JAX, Shardy and DTensor need "
          "a mesh. Raises NotImplementedError where the notation cannot state it.")
      .def("__eq__", [](const Layout& a, const Layout& b) { return a == b; }, nb::is_operator())
      .def("__hash__", &Layout::Hash)
      .def("__str__", &LayoutText)
      .def("__repr__", [](const Layout& l) {
        std::string shape;
        for (int64_t d = 0; d < l.rank(); ++d) shape += (d ? "," : "") + std::to_string(l.shape()[d]);
        return "<reshard.Layout " + std::string(DTypeName(l.dtype())) + "[" + shape + "] on " +
               std::to_string(l.devices().size()) + " devices>";
      });

  nb::class_<Parsed>(m, "ParsedLayout", "A layout read from text: the layout, its notation, its mesh.")
      .def_prop_ro("layout", [](const Parsed& p) { return p.parsed.layout; })
      .def_prop_ro("notation", [](const Parsed& p) { return std::string(NotationName(p.parsed.notation)); })
      .def_prop_ro("mesh", [](const Parsed& p) { return p.parsed.mesh; }, "the mesh the text was stated over, if any")
      .def_prop_ro("meshes", [](const Parsed& p) { return p.meshes; },
                   "meshes for the planner: the text's mesh, then those an HLO tile assignment suggests")
      .def_prop_ro("text", [](const Parsed& p) { return p.text; }, "the text it was read from")
      .def_prop_ro("given_mesh", [](const Parsed& p) { return p.given_mesh; }, "the mesh given to parse(), if any")
      .def(
          "convert",
          [](const Parsed& p, const std::string& notation) {
            const ConvertedLayout c =
                Unwrap(ConvertLayout(p.text, p.parsed.layout.shape(), p.parsed.layout.dtype(), p.given_mesh,
                                     Unwrap(ParseNotationName(notation))));
            return nb::make_tuple(c.text, c.mesh);
          },
          nb::arg("notation"),
          "(text, mesh): the text in `notation` as `reshard convert` prints it, over the mesh given to parse() "
          "(else the text's own, else one read off an HLO tile assignment), and that mesh for named output. "
          "NotImplementedError where the notation cannot state the layout.");

  m.def(
      "parse",
      [](const std::string& text, const std::vector<int64_t>& shape, const std::string& dtype,
         const std::optional<Mesh>& mesh) {
        Parsed p{Unwrap(ParseLayout(text, shape, ToDType(dtype), mesh)), {}, text, mesh};
        if (mesh) p.meshes.push_back(*mesh);
        if (p.parsed.mesh && !(mesh && *mesh == *p.parsed.mesh)) p.meshes.push_back(*p.parsed.mesh);
        if (p.parsed.notation == Notation::kHlo) {
          Result<HloSharding> h = ParseHloSharding(text);
          if (h.ok())
            for (Mesh& s : SuggestMeshes(*h)) p.meshes.push_back(std::move(s));
        }
        return p;
      },
      nb::arg("text"), nb::arg("shape"), nb::arg("dtype") = "f32", nb::arg("mesh") = nb::none(),
      "Reads a sharding in any notation (detected from the text). Raises ValueError with the column on bad text.");
  m.def(
      "detect_notation", [](const std::string& text) { return std::string(NotationName(Unwrap(DetectNotation(text)))); },
      nb::arg("text"));
  m.def(
      "dtype_bytes", [](const std::string& dtype) { return ByteSize(ToDType(dtype)); }, nb::arg("dtype"));

  nb::class_<NamedSharding>(m, "NamedSharding",
                            "A sharding over a named mesh, as JAX, Shardy and HLO V3 state it: per tensor dim the "
                            "mesh axes that split it, major to minor. Immutable.")
      .def(
          "__init__",
          [](NamedSharding* self, const Mesh& mesh, const std::vector<std::vector<AxisSpec>>& dims,
             const std::vector<AxisSpec>& replicated, const std::vector<AxisSpec>& unreduced) {
            new (self) NamedSharding(MakeNamed(mesh, dims, replicated, unreduced));
          },
          nb::arg("mesh"), nb::arg("dims"), nb::arg("replicated") = std::vector<AxisSpec>{},
          nb::arg("unreduced") = std::vector<AxisSpec>{},
          "NamedSharding(mesh, [['y'], [], ['x']]) is JAX's P('y', None, 'x'); a sub-axis is ('x', pre, size). "
          "unreduced: axes holding partial sums (JAX's unreduced={...}).")
      .def_prop_ro("mesh", &NamedSharding::mesh)
      .def_prop_ro("dims",
                   [](const NamedSharding& s) {
                     std::vector<std::vector<std::string>> out;
                     for (const NamedSharding::Dim& d : s.dims()) {
                       out.emplace_back();
                       for (const AxisRef& a : d.axes) out.back().push_back(a.ToString(s.mesh()));
                     }
                     return out;
                   })
      .def(
          "to_layout",
          [](const NamedSharding& s, const std::vector<int64_t>& shape, const std::string& dtype) {
            return Unwrap(s.ToLayout(shape, ToDType(dtype)));
          },
          nb::arg("shape"), nb::arg("dtype") = "f32")
      .def(
          "to_hlo", [](const NamedSharding& s) { return Unwrap(s.ToHlo()).ToString(); },
          "the HLO sharding text exactly as JAX prints it for this mesh's device ids")
      .def(
          "to_text",
          [](const NamedSharding& s, const std::string& syntax) {
            NamedText::Syntax st = NamedText::Syntax::kJax;
            if (syntax == "shardy") st = NamedText::Syntax::kShardy;
            else if (syntax == "hlo-v3") st = NamedText::Syntax::kHloV3;
            else if (syntax != "jax") Raise(Status::InvalidArgument("syntax '" + syntax + "' is not one of jax, shardy, hlo-v3"));
            return PrintNamedText(NamedTextOf(s, st, /*inline_mesh=*/st != NamedText::Syntax::kJax));
          },
          nb::arg("syntax") = "jax")
      .def("__eq__", [](const NamedSharding& a, const NamedSharding& b) { return a == b; }, nb::is_operator())
      // Equal shardings print alike (their text is a function of what == compares).
      .def("__hash__",
           [](const NamedSharding& s) {
             return std::hash<std::string>()(PrintNamedText(NamedTextOf(s, NamedText::Syntax::kShardy, true)));
           })
      .def("__repr__", [](const NamedSharding& s) {
        return "<reshard.NamedSharding " + PrintNamedText(NamedTextOf(s, NamedText::Syntax::kShardy, true)) + ">";
      });
  m.def(
      "named_sharding_from_layout",
      [](const Layout& l, const Mesh& mesh, bool allow_sub_axes) {
        return Unwrap(NamedShardingFromLayout(l, mesh, allow_sub_axes));
      },
      nb::arg("layout"), nb::arg("mesh"), nb::arg("allow_sub_axes") = false);
}

}  // namespace reshard::python
