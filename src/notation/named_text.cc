// Parsers and printers for the named forms: JAX PartitionSpec, Shardy, HLO V3.
#include "reshard/named_text.h"

#include "layout/checked_math.h"
#include "notation/text_cursor.h"

namespace reshard {
namespace {

using Axis = NamedText::Axis;

// Shardy axis: "x" or "x":(1)2. V3 axis: x or x:(1)2.
Result<Axis> ParseAxis(TextCursor& c, bool quoted) {
  Axis a;
  a.column = c.Mark();
  if (quoted) {
    char q = '"';
    RESHARD_ASSIGN_OR_RETURN(a.name, c.ParseQuoted(&q));
    if (q != '"') return c.ErrorAt(a.column, "Shardy axis names are written in double quotes");
  } else {
    RESHARD_ASSIGN_OR_RETURN(a.name, c.ParseIdentifier());
  }
  if (c.TryConsume(":")) {
    RESHARD_RETURN_IF_ERROR(c.Expect("("));
    RESHARD_ASSIGN_OR_RETURN(a.pre_size, c.ParseInt());
    RESHARD_RETURN_IF_ERROR(c.Expect(")"));
    RESHARD_ASSIGN_OR_RETURN(a.size, c.ParseInt());
    if (a.pre_size < 1 || a.size < 2) return c.ErrorAt(a.column, "sub-axis needs pre-size >= 1 and size >= 2");
  }
  return a;
}

// "{a, b, ?}p1" in Shardy (quoted) or V3 (unquoted).
Result<NamedText::Dim> ParseDimSet(TextCursor& c, bool quoted) {
  NamedText::Dim d;
  RESHARD_RETURN_IF_ERROR(c.Expect("{"));
  if (!c.TryConsume("}")) {
    do {
      if (c.TryConsume("?")) { d.open = true; break; }
      RESHARD_ASSIGN_OR_RETURN(Axis a, ParseAxis(c, quoted));
      d.axes.push_back(std::move(a));
    } while (c.TryConsume(","));
    RESHARD_RETURN_IF_ERROR(c.Expect("}"));
  }
  if (c.TryConsume("p")) {
    RESHARD_ASSIGN_OR_RETURN(int64_t p, c.ParseInt());
    d.priority = p;
  }
  return d;
}

Result<std::vector<NamedText::Dim>> ParseDimList(TextCursor& c, bool quoted) {
  RESHARD_RETURN_IF_ERROR(c.Expect("["));
  std::vector<NamedText::Dim> dims;
  if (c.TryConsume("]")) return dims;
  do {
    RESHARD_ASSIGN_OR_RETURN(NamedText::Dim d, ParseDimSet(c, quoted));
    dims.push_back(std::move(d));
  } while (c.TryConsume(","));
  RESHARD_RETURN_IF_ERROR(c.Expect("]"));
  return dims;
}

// A keyword given twice is an error at the second, as Python's "keyword
// argument repeated": a later set must not silently replace an earlier one.
Status OnceOnly(const TextCursor& c, size_t at, std::string_view keyword, bool& seen) {
  if (seen) return c.ErrorAt(at, "'" + std::string(keyword) + "' is given twice (each keyword at most once)");
  seen = true;
  return Status::Ok();
}

// ", replicated={...}" and ", unreduced={...}" after the dim list, each at most once.
Status ParseTrailingSets(TextCursor& c, NamedText& t, bool quoted) {
  bool replicated = false, unreduced = false;
  while (c.TryConsume(",")) {
    const size_t at = c.Mark();
    if (c.TryConsumeWord("replicated")) {
      RESHARD_RETURN_IF_ERROR(OnceOnly(c, at, "replicated", replicated));
      RESHARD_RETURN_IF_ERROR(c.Expect("="));
      RESHARD_ASSIGN_OR_RETURN(NamedText::Dim set, ParseDimSet(c, quoted));
      t.replicated = std::move(set.axes);
    } else if (c.TryConsumeWord("unreduced")) {
      RESHARD_RETURN_IF_ERROR(OnceOnly(c, at, "unreduced", unreduced));
      RESHARD_RETURN_IF_ERROR(c.Expect("="));
      RESHARD_ASSIGN_OR_RETURN(NamedText::Dim set, ParseDimSet(c, quoted));
      if (set.open || set.priority) return c.ErrorAt(at, "an unreduced set takes axes only");
      t.unreduced = std::move(set.axes);
    } else if (c.TryConsumeWord("metadata")) {
      RESHARD_RETURN_IF_ERROR(c.Expect("="));
      RESHARD_RETURN_IF_ERROR(c.SkipBalanced());
    } else {
      return c.Error("expected 'replicated=' or 'unreduced=' (found " + c.Found() + ")");
    }
  }
  return Status::Ok();
}

// "name=size, ..." up to (not including) the closing bracket: quoted names in
// Shardy, identifiers in V3 and the CLI form. Checks each name where it stands.
Result<std::vector<Mesh::Axis>> ParseAxisSizes(TextCursor& c, bool quoted) {
  std::vector<Mesh::Axis> axes;
  int64_t devices = 1;
  do {
    Mesh::Axis a;
    const size_t at = c.Mark();
    if (quoted) {
      char q = '"';
      RESHARD_ASSIGN_OR_RETURN(a.name, c.ParseQuoted(&q));
      if (q != '"') return c.ErrorAt(at, "Shardy axis names are written in double quotes");
    } else {
      RESHARD_ASSIGN_OR_RETURN(a.name, c.ParseIdentifier());
    }
    if (Result<Mesh> one = Mesh::Create({{a.name, 1}}); !one.ok()) return c.ErrorAt(at, one.status().message());
    for (const Mesh::Axis& b : axes)
      if (b.name == a.name) return c.ErrorAt(at, "mesh axis '" + a.name + "' appears twice");
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
    const size_t size_at = c.Mark();
    RESHARD_ASSIGN_OR_RETURN(a.size, c.ParseInt());
    if (a.size < 1) return c.ErrorAt(size_at, "mesh axis sizes must be >= 1");
    if (!CheckedMul(devices, a.size, &devices) || devices > kMaxDevices)
      return c.ErrorAt(size_at, "the mesh has more than " + std::to_string(kMaxDevices) + " devices");
    axes.push_back(std::move(a));
  } while (c.TryConsume(","));
  return axes;
}

// Mesh body after '<': ["x"=4, "y"=2] [, device_ids=[...]] '>'.
Result<Mesh> ParseShardyMeshBody(TextCursor& c) {
  const size_t start = c.Mark();
  RESHARD_RETURN_IF_ERROR(c.Expect("["));
  std::vector<Mesh::Axis> axes;
  if (!c.TryConsume("]")) {
    RESHARD_ASSIGN_OR_RETURN(axes, ParseAxisSizes(c, /*quoted=*/true));
    RESHARD_RETURN_IF_ERROR(c.Expect("]"));
  }
  std::vector<int64_t> ids;
  if (c.TryConsume(",")) {
    RESHARD_RETURN_IF_ERROR(c.Expect("device_ids"));
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
    RESHARD_RETURN_IF_ERROR(c.Expect("["));
    do {
      RESHARD_ASSIGN_OR_RETURN(int64_t id, c.ParseInt());
      ids.push_back(id);
    } while (c.TryConsume(","));
    RESHARD_RETURN_IF_ERROR(c.Expect("]"));
  }
  RESHARD_RETURN_IF_ERROR(c.Expect(">"));
  Result<Mesh> m = Mesh::Create(std::move(axes), std::move(ids));
  if (!m.ok()) return c.ErrorAt(start, m.status().message());
  return m;
}

std::string Quote(const std::string& s, char q) {
  if (s.find(q) != std::string::npos) q = q == '\'' ? '"' : '\'';
  return std::string(1, q) + s + std::string(1, q);
}

std::string PrintAxis(const Axis& a, char quote) {
  std::string s = quote ? Quote(a.name, quote) : a.name;
  if (a.size) s += ":(" + std::to_string(a.pre_size) + ")" + std::to_string(a.size);
  return s;
}

std::string PrintDimSet(const NamedText::Dim& d, char quote) {
  std::string s = "{";
  for (size_t i = 0; i < d.axes.size(); ++i) s += (i ? ", " : "") + PrintAxis(d.axes[i], quote);
  if (d.open) s += d.axes.empty() ? "?" : ", ?";
  s += "}";
  if (d.priority) s += "p" + std::to_string(*d.priority);
  return s;
}

}  // namespace

// PartitionSpec entries, then keyword arguments (unreduced={...},
// reduced={...}). P.UNCONSTRAINED entries are read in full and refused as
// not supported only when the whole text parses.
Result<NamedText> ParseJaxSpec(std::string_view text) {
  TextCursor c(text);
  if (c.AtEnd()) return Status::InvalidArgument("empty PartitionSpec text");
  NamedText t;
  t.syntax = NamedText::Syntax::kJax;
  for (std::string_view head : {"jax.sharding.PartitionSpec", "PartitionSpec", "jax.sharding.P", "P"}) {
    if (c.TryConsumeWord(head)) { t.jax_head = std::string(head); break; }
  }
  if (t.jax_head == "P" && text.find('P') == std::string_view::npos) return c.Error("expected 'P(' or 'PartitionSpec('");
  RESHARD_RETURN_IF_ERROR(c.Expect("("));
  Status unsupported;
  auto note = [&](size_t at, const std::string& what) {
    if (unsupported.ok()) unsupported = Status::NotSupported(c.ErrorAt(at, what).message());
  };
  bool first_quote = true;
  auto parse_name = [&](NamedText::Dim& d) -> Status {
    const size_t col = c.Mark();
    char q = '\'';
    RESHARD_ASSIGN_OR_RETURN(std::string name, c.ParseQuoted(&q));
    if (first_quote) { t.quote = q; first_quote = false; }
    d.axes.push_back(Axis{std::move(name), 1, 0, col});
    return Status::Ok();
  };
  // A Python set of names: {'a', 'b'} (possibly empty, trailing comma allowed).
  auto parse_set = [&](std::vector<Axis>& into) -> Status {
    RESHARD_RETURN_IF_ERROR(c.Expect("{"));
    NamedText::Dim set;
    while (!c.TryConsume("}")) {
      RESHARD_RETURN_IF_ERROR(parse_name(set));
      if (!c.TryConsume(",")) { RESHARD_RETURN_IF_ERROR(c.Expect("}")); break; }
    }
    into = std::move(set.axes);
    return Status::Ok();
  };
  bool keywords = false;  // a keyword argument was read: no more entries
  bool seen_unreduced = false, seen_reduced = false;
  while (!c.TryConsume(")")) {
    NamedText::Dim d;
    const size_t at = c.Mark();
    if (c.TryConsumeWord("unreduced") || c.TryConsumeWord("reduced")) {
      const bool unreduced = text.substr(at, c.pos() - at) == "unreduced";
      RESHARD_RETURN_IF_ERROR(OnceOnly(c, at, unreduced ? "unreduced" : "reduced", unreduced ? seen_unreduced : seen_reduced));
      RESHARD_RETURN_IF_ERROR(c.Expect("="));
      RESHARD_RETURN_IF_ERROR(parse_set(unreduced ? t.unreduced : t.reduced));
      keywords = true;
      if (!c.TryConsume(",")) { RESHARD_RETURN_IF_ERROR(c.Expect(")")); break; }
      continue;
    }
    if (keywords) return c.Error("expected a keyword argument or ')' after a keyword argument (found " + c.Found() + ")");
    if (c.TryConsumeWord("None")) {
    } else if (c.TryConsume("(")) {
      d.tuple = true;
      while (!c.TryConsume(")")) {
        RESHARD_RETURN_IF_ERROR(parse_name(d));
        if (!c.TryConsume(",")) { RESHARD_RETURN_IF_ERROR(c.Expect(")")); break; }
      }
    } else if (c.Peek() == '\'' || c.Peek() == '"') {
      RESHARD_RETURN_IF_ERROR(parse_name(d));
    } else if (c.TryConsumeWord("PartitionSpec") || c.TryConsumeWord("P")) {
      RESHARD_RETURN_IF_ERROR(c.Expect("."));
      if (!c.TryConsumeWord("UNCONSTRAINED")) return c.Error("expected 'UNCONSTRAINED' (found " + c.Found() + ")");
      note(at, "P.UNCONSTRAINED is not supported yet");
    } else {
      return c.Error("expected None, an axis name in quotes, or a tuple of names (found " + c.Found() + ")");
    }
    t.dims.push_back(std::move(d));
    if (!c.TryConsume(",")) { RESHARD_RETURN_IF_ERROR(c.Expect(")")); break; }
  }
  RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
  if (!unsupported.ok()) return unsupported;
  return t;
}

Result<NamedText> ParseShardySharding(std::string_view text) {
  TextCursor c(text);
  if (c.AtEnd()) return Status::InvalidArgument("empty Shardy sharding text");
  NamedText t;
  t.syntax = NamedText::Syntax::kShardy;
  if (c.Peek() == '[') {
    t.shardy_form = NamedText::ShardyForm::kBare;
    RESHARD_ASSIGN_OR_RETURN(t.dims, ParseDimList(c, true));
    RESHARD_RETURN_IF_ERROR(ParseTrailingSets(c, t, true));
    RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
    return t;
  }
  t.shardy_form = c.TryConsume("#sdy.sharding") ? NamedText::ShardyForm::kAttribute : NamedText::ShardyForm::kAngle;
  RESHARD_RETURN_IF_ERROR(c.Expect("<"));
  if (c.TryConsume("@")) {
    RESHARD_ASSIGN_OR_RETURN(t.mesh_name, c.ParseIdentifier());
  } else if (c.TryConsumeWord("mesh") || c.TryConsume("#sdy.mesh")) {
    RESHARD_RETURN_IF_ERROR(c.Expect("<"));
    RESHARD_ASSIGN_OR_RETURN(Mesh m, ParseShardyMeshBody(c));
    t.inline_mesh = std::move(m);
    t.mesh_name.clear();
  } else {
    return c.Error("expected a mesh reference '@name' or 'mesh<[...]>' (found " + c.Found() + ")");
  }
  RESHARD_RETURN_IF_ERROR(c.Expect(","));
  RESHARD_ASSIGN_OR_RETURN(t.dims, ParseDimList(c, true));
  RESHARD_RETURN_IF_ERROR(ParseTrailingSets(c, t, true));
  RESHARD_RETURN_IF_ERROR(c.Expect(">"));
  RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
  return t;
}

Result<NamedText> ParseHloV3(std::string_view text) {
  TextCursor c(text);
  if (c.AtEnd()) return Status::InvalidArgument("empty sharding text");
  NamedText t;
  t.syntax = NamedText::Syntax::kHloV3;
  t.mesh_name.clear();
  RESHARD_RETURN_IF_ERROR(c.Expect("{"));
  RESHARD_RETURN_IF_ERROR(c.Expect("mesh"));
  const size_t mesh_at = c.Mark();
  RESHARD_RETURN_IF_ERROR(c.Expect("["));
  std::vector<Mesh::Axis> axes;
  if (!c.TryConsume("]")) {
    RESHARD_ASSIGN_OR_RETURN(axes, ParseAxisSizes(c, /*quoted=*/false));
    RESHARD_RETURN_IF_ERROR(c.Expect("]"));
  }
  Result<Mesh> m = Mesh::Create(std::move(axes));
  if (!m.ok()) return c.ErrorAt(mesh_at, m.status().message());
  t.inline_mesh = std::move(m).value();
  RESHARD_RETURN_IF_ERROR(c.Expect(","));
  RESHARD_ASSIGN_OR_RETURN(t.dims, ParseDimList(c, false));
  RESHARD_RETURN_IF_ERROR(ParseTrailingSets(c, t, false));
  RESHARD_RETURN_IF_ERROR(c.Expect("}"));
  RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
  return t;
}

std::string PrintShardyMesh(const Mesh& m) {
  std::string s = "<[";
  for (size_t i = 0; i < m.axes().size(); ++i)
    s += (i ? ", " : "") + Quote(m.axes()[i].name, '"') + "=" + std::to_string(m.axes()[i].size);
  s += "]";
  if (!m.is_iota()) {
    s += ", device_ids=[";
    for (int64_t i = 0; i < m.num_devices(); ++i) s += (i ? ", " : "") + std::to_string(m.device(i));
    s += "]";
  }
  return s + ">";
}

std::string PrintNamedText(const NamedText& t) {
  if (t.syntax == NamedText::Syntax::kJax) {
    std::string s = t.jax_head + "(";
    for (size_t i = 0; i < t.dims.size(); ++i) {
      const NamedText::Dim& d = t.dims[i];
      s += i ? ", " : "";
      if (d.axes.empty() && !d.tuple) { s += "None"; continue; }
      if (!d.tuple) { s += Quote(d.axes[0].name, t.quote); continue; }
      s += "(";
      for (size_t j = 0; j < d.axes.size(); ++j) s += (j ? ", " : "") + Quote(d.axes[j].name, t.quote);
      s += d.axes.size() == 1 ? ",)" : ")";
    }
    bool first = t.dims.empty();
    auto keyword = [&](const char* key, const std::vector<Axis>& axes) {
      if (axes.empty()) return;
      s += std::string(first ? "" : ", ") + key + "={";
      for (size_t j = 0; j < axes.size(); ++j) s += (j ? ", " : "") + Quote(axes[j].name, t.quote);
      s += "}";
      first = false;
    };
    keyword("unreduced", t.unreduced);
    keyword("reduced", t.reduced);
    return s + ")";
  }
  const bool v3 = t.syntax == NamedText::Syntax::kHloV3;
  const char q = v3 ? '\0' : '"';
  std::string dims = "[";
  for (size_t i = 0; i < t.dims.size(); ++i) dims += (i ? ", " : "") + PrintDimSet(t.dims[i], q);
  dims += "]";
  if (!t.replicated.empty()) dims += ", replicated=" + PrintDimSet(NamedText::Dim{t.replicated, false, std::nullopt, false}, q);
  if (!t.unreduced.empty()) dims += ", unreduced=" + PrintDimSet(NamedText::Dim{t.unreduced, false, std::nullopt, false}, q);
  if (v3) {
    std::string mesh = "mesh[";
    if (t.inline_mesh)
      for (size_t i = 0; i < t.inline_mesh->axes().size(); ++i)
        mesh += (i ? "," : "") + t.inline_mesh->axes()[i].name + "=" + std::to_string(t.inline_mesh->axes()[i].size);
    return "{" + mesh + "], " + dims + "}";
  }
  if (t.shardy_form == NamedText::ShardyForm::kBare) return dims;
  std::string mesh = t.inline_mesh ? "mesh" + PrintShardyMesh(*t.inline_mesh) : "@" + t.mesh_name;
  return std::string(t.shardy_form == NamedText::ShardyForm::kAttribute ? "#sdy.sharding" : "") + "<" + mesh + ", " + dims + ">";
}

Result<NamedSharding> BindNamedText(const NamedText& t, const std::optional<Mesh>& given, std::string_view source) {
  const std::optional<Mesh>& mesh = t.inline_mesh ? t.inline_mesh : given;
  TextCursor c(source);
  if (!mesh) return Status::InvalidArgument("this sharding is stated over a mesh, but no mesh was given (use --mesh)");
  auto resolve = [&](const Axis& a) -> Result<AxisRef> {
    std::optional<int64_t> idx = mesh->AxisIndex(a.name);
    if (!idx) return c.ErrorAt(a.column, "unknown mesh axis '" + a.name + "' (mesh is " + mesh->ToString() + ")");
    return AxisRef{*idx, a.size ? a.pre_size : 1, a.size};
  };
  // A name used twice (whole, or the same sub-axis) is reported where it repeats.
  std::vector<const Axis*> all;
  for (const NamedText::Dim& d : t.dims)
    for (const Axis& a : d.axes) all.push_back(&a);
  for (const Axis& a : t.replicated) all.push_back(&a);
  for (const Axis& a : t.unreduced) all.push_back(&a);
  for (const Axis& a : t.reduced) all.push_back(&a);
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (all[j]->name == all[i]->name && (all[i]->size == 0 || all[j]->size == 0 || *all[i] == *all[j]))
        return c.ErrorAt(all[i]->column, "mesh axis '" + all[i]->name + "' is used twice");
  std::vector<NamedSharding::Dim> dims;
  for (const NamedText::Dim& d : t.dims) {
    NamedSharding::Dim nd;
    nd.open = d.open;
    nd.priority = d.priority;
    for (const Axis& a : d.axes) {
      RESHARD_ASSIGN_OR_RETURN(AxisRef r, resolve(a));
      nd.axes.push_back(r);
    }
    dims.push_back(std::move(nd));
  }
  std::vector<AxisRef> replicated;
  for (const Axis& a : t.replicated) {
    RESHARD_ASSIGN_OR_RETURN(AxisRef r, resolve(a));
    replicated.push_back(r);
  }
  std::vector<AxisRef> unreduced;
  for (const Axis& a : t.unreduced) {
    RESHARD_ASSIGN_OR_RETURN(AxisRef r, resolve(a));
    unreduced.push_back(r);
  }
  for (const Axis& a : t.reduced) RESHARD_RETURN_IF_ERROR(resolve(a).status());  // replicated: checked, no effect
  Result<NamedSharding> s = NamedSharding::Create(*mesh, std::move(dims), std::move(replicated), std::move(unreduced));
  if (!s.ok()) return Status::InvalidArgument(EscapeInvalidUtf8(s.status().message()) + EchoText(source, 0, /*caret=*/false));
  return s;
}

NamedText NamedTextOf(const NamedSharding& s, NamedText::Syntax syntax, bool inline_mesh) {
  NamedText t;
  t.syntax = syntax;
  const Mesh& m = s.mesh();
  auto axis = [&](const AxisRef& r) { return Axis{m.axes()[r.axis].name, r.is_sub_axis() ? r.pre_size : 1, r.size, 0}; };
  for (const NamedSharding::Dim& d : s.dims()) {
    NamedText::Dim td;
    td.open = d.open;
    td.priority = d.priority;
    for (const AxisRef& r : d.axes) {
      // JAX drops size-1 axes.
      if (syntax == NamedText::Syntax::kJax && r.Size(m) == 1) continue;
      td.axes.push_back(axis(r));
    }
    td.tuple = syntax == NamedText::Syntax::kJax && td.axes.size() > 1;
    t.dims.push_back(std::move(td));
  }
  for (const AxisRef& r : s.replicated()) t.replicated.push_back(axis(r));
  for (const AxisRef& r : s.unreduced()) t.unreduced.push_back(axis(r));
  if (syntax == NamedText::Syntax::kHloV3 || inline_mesh) {
    t.inline_mesh = m;
    t.mesh_name.clear();
  }
  return t;
}

Result<Mesh> ParseMesh(std::string_view text, std::string* name) {
  TextCursor c(text);
  if (c.AtEnd()) return Status::InvalidArgument("empty mesh text");
  if (c.TryConsumeWord("sdy")) {
    RESHARD_RETURN_IF_ERROR(c.Expect("."));
    RESHARD_RETURN_IF_ERROR(c.Expect("mesh"));
    RESHARD_RETURN_IF_ERROR(c.Expect("@"));
    RESHARD_ASSIGN_OR_RETURN(std::string n, c.ParseIdentifier());
    if (name) *name = n;
    RESHARD_RETURN_IF_ERROR(c.Expect("="));
  }
  if (c.TryConsume("#sdy.mesh") || c.TryConsumeWord("mesh") || c.Peek() == '<') {
    RESHARD_RETURN_IF_ERROR(c.Expect("<"));
    RESHARD_ASSIGN_OR_RETURN(Mesh m, ParseShardyMeshBody(c));
    RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
    return m;
  }
  // CLI form: x=4,y=2
  RESHARD_ASSIGN_OR_RETURN(std::vector<Mesh::Axis> axes, ParseAxisSizes(c, /*quoted=*/false));
  RESHARD_RETURN_IF_ERROR(c.ExpectEnd());
  Result<Mesh> m = Mesh::Create(std::move(axes));
  if (!m.ok()) return c.ErrorAt(0, m.status().message());
  return m;
}

}  // namespace reshard
