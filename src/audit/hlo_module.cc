#include "audit/hlo_module.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace reshard::audit {
namespace {

constexpr int kMaxShapeDepth = 64;
constexpr size_t kMaxJoinedLines = 100000;
constexpr int64_t kMaxDim = int64_t{1} << 50;

bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'; }

std::string LineError(int64_t line, size_t col, const std::string& msg) {
  return "line " + std::to_string(line) + ", col " + std::to_string(col + 1) + ": " + msg;
}

// Removes /* ... */ comments outside quoted strings.
std::string StripComments(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool quoted = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quoted) {
      out += c;
      if (c == '\\' && i + 1 < s.size()) out += s[++i];
      else if (c == '"') quoted = false;
      continue;
    }
    if (c == '"') { quoted = true; out += c; continue; }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const size_t end = s.find("*/", i + 2);
      if (end == std::string_view::npos) break;
      i = end + 1;
      continue;
    }
    out += c;
  }
  return out;
}

// Feeds `s` to a stack of open brackets (outside quotes); sets *bad when a
// closer does not match the innermost opener.
void Brackets(std::string_view s, std::string* open, bool* bad) {
  bool quoted = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quoted) {
      if (c == '\\') ++i;
      else if (c == '"') quoted = false;
      continue;
    }
    if (c == '"') quoted = true;
    else if (c == '(') *open += ')';
    else if (c == '[') *open += ']';
    else if (c == '{') *open += '}';
    else if (c == ')' || c == ']' || c == '}') {
      if (open->empty() || open->back() != c) *bad = true;
      else open->pop_back();
    }
  }
}

// Reads a name token (without '%') at text[*i]; advances *i.
std::string_view ReadName(std::string_view text, size_t* i) {
  size_t j = *i;
  if (j < text.size() && text[j] == '%') ++j;
  const size_t start = j;
  while (j < text.size() && IsNameChar(text[j])) ++j;
  *i = j;
  return text.substr(start, j - start);
}

void SkipSpaces(std::string_view text, size_t* i) {
  while (*i < text.size() && std::isspace(static_cast<unsigned char>(text[*i]))) ++*i;
}

Result<HloShape> ParseShapeAt(std::string_view text, size_t* i, int depth) {
  if (depth > kMaxShapeDepth) return Status::InvalidArgument("shape nested too deeply");
  SkipSpaces(text, i);
  HloShape shape;
  if (*i < text.size() && text[*i] == '(') {
    shape.is_tuple = true;
    ++*i;
    SkipSpaces(text, i);
    if (*i < text.size() && text[*i] == ')') { ++*i; return shape; }
    while (true) {
      RESHARD_ASSIGN_OR_RETURN(HloShape e, ParseShapeAt(text, i, depth + 1));
      shape.elements.push_back(std::move(e));
      SkipSpaces(text, i);
      if (*i < text.size() && text[*i] == ',') { ++*i; continue; }
      if (*i < text.size() && text[*i] == ')') { ++*i; return shape; }
      return Status::InvalidArgument("expected ',' or ')' in a tuple shape at col " + std::to_string(*i + 1));
    }
  }
  const size_t start = *i;
  while (*i < text.size() && (std::islower(static_cast<unsigned char>(text[*i])) || std::isdigit(static_cast<unsigned char>(text[*i])))) ++*i;
  if (*i == start || !std::islower(static_cast<unsigned char>(text[start])))
    return Status::InvalidArgument("expected a shape at col " + std::to_string(start + 1));
  shape.element_type = std::string(text.substr(start, *i - start));
  if (*i >= text.size() || text[*i] != '[') return Status::InvalidArgument("expected '[' after the element type at col " + std::to_string(*i + 1));
  const size_t close = text.find(']', *i);
  if (close == std::string_view::npos) return Status::InvalidArgument("unclosed '[' in a shape");
  for (std::string_view d : SplitTop(text.substr(*i + 1, close - *i - 1))) {
    if (d.empty()) return Status::InvalidArgument("empty dimension in a shape");
    if (d.substr(0, 2) == "<=") d = d.substr(2);
    if (d == "?") { shape.dims.push_back(0); continue; }
    int64_t v = 0;
    for (char c : d) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return Status::InvalidArgument("bad dimension '" + std::string(d) + "'");
      v = v * 10 + (c - '0');
      if (v > kMaxDim) return Status::InvalidArgument("dimension too large");
    }
    shape.dims.push_back(v);
  }
  *i = close + 1;
  if (*i < text.size() && text[*i] == '{') {
    const size_t end = MatchClose(text, *i);
    if (end == std::string_view::npos) return Status::InvalidArgument("unclosed layout in a shape");
    std::string_view layout = text.substr(*i + 1, end - *i - 2);
    const size_t colon = layout.find(':');
    if (colon != std::string_view::npos) layout = layout.substr(0, colon);
    std::optional<std::vector<int64_t>> m2m = ParseIntList(layout);
    if (m2m && m2m->size() == shape.dims.size()) {
      std::vector<int64_t> sorted = *m2m;
      std::sort(sorted.begin(), sorted.end());
      bool perm = true;
      for (size_t k = 0; k < sorted.size(); ++k) perm = perm && sorted[k] == static_cast<int64_t>(k);
      if (perm) shape.minor_to_major = *m2m;
    }
    *i = end;
  }
  return shape;
}

std::string FormatShape(const HloShape& s) {
  if (s.is_tuple) {
    std::string out = "(";
    for (size_t k = 0; k < s.elements.size(); ++k) out += (k ? ", " : "") + FormatShape(s.elements[k]);
    return out + ")";
  }
  std::string out = s.element_type + "[";
  for (size_t k = 0; k < s.dims.size(); ++k) out += (k ? "," : "") + std::to_string(s.dims[k]);
  return out + "]";
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool IsSectionName(std::string_view t) {
  return t == "FileNames" || t == "FunctionNames" || t == "FileLocations" || t == "StackFrames";
}

// "[ENTRY ]%name (sig) -> shape {" or "%name {": the name and whether ENTRY; nullopt if not a header.
std::optional<std::pair<std::string, bool>> ComputationHeader(std::string_view t) {
  if (t.empty() || t.back() != '{') return std::nullopt;
  bool entry = false;
  if (StartsWith(t, "ENTRY ")) { entry = true; t = Trim(t.substr(6)); }
  size_t i = 0;
  std::string_view name = ReadName(t, &i);
  if (name.empty()) return std::nullopt;
  SkipSpaces(t, &i);
  if (i >= t.size() || (t[i] != '(' && t[i] != '{' && t[i] != ',')) return std::nullopt;
  return std::make_pair(std::string(name), entry);
}

// Whether the line is "[ROOT ]%name = ...".
bool LooksLikeInstruction(std::string_view t) {
  if (StartsWith(t, "ROOT ")) t = Trim(t.substr(5));
  size_t i = 0;
  if (ReadName(t, &i).empty()) return false;
  SkipSpaces(t, &i);
  return i < t.size() && t[i] == '=';
}

// Parses one instruction; operand names go to *operand_names (resolved later).
Result<HloInstruction> ParseInstruction(std::string_view t, std::vector<std::string>* operand_names) {
  HloInstruction ins;
  if (StartsWith(t, "ROOT ")) { ins.is_root = true; t = Trim(t.substr(5)); }
  size_t i = 0;
  ins.name = std::string(ReadName(t, &i));
  SkipSpaces(t, &i);
  ++i;  // '='
  RESHARD_ASSIGN_OR_RETURN(ins.shape, ParseShapeAt(t, &i, 0));
  SkipSpaces(t, &i);
  const size_t op_start = i;
  while (i < t.size() && (std::islower(static_cast<unsigned char>(t[i])) || std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '-' || t[i] == '_')) ++i;
  if (i == op_start) return Status::InvalidArgument("expected an opcode at col " + std::to_string(i + 1));
  ins.opcode = std::string(t.substr(op_start, i - op_start));
  if (i >= t.size() || t[i] != '(') return Status::InvalidArgument("expected '(' after opcode '" + ins.opcode + "'");
  const size_t close = MatchClose(t, i);
  if (close == std::string_view::npos) return Status::InvalidArgument("unbalanced brackets in the operands");
  std::string_view inner = t.substr(i + 1, close - i - 2);
  if (ins.opcode == "constant" || ins.opcode == "parameter" || ins.opcode == "iota") {
    ins.literal = std::string(Trim(inner));
  } else {
    for (std::string_view o : SplitTop(inner)) {
      if (o.empty()) continue;
      const size_t sp = o.find_last_of(" \t");
      if (sp != std::string_view::npos) o = o.substr(sp + 1);  // "f32[8]{0} %x" -> "%x"
      if (!o.empty() && o[0] == '%') o = o.substr(1);
      if (o.empty()) return Status::InvalidArgument("empty operand");
      for (char c : o)
        if (!IsNameChar(c)) return Status::InvalidArgument("operand '" + std::string(o) + "' is not a name");
      operand_names->emplace_back(o);
    }
  }
  std::string_view rest = Trim(t.substr(close));
  if (!rest.empty()) {
    if (rest[0] != ',') return Status::InvalidArgument("expected ',' before the attributes");
    for (std::string_view part : SplitTop(rest.substr(1))) {
      if (part.empty()) continue;
      const size_t eq = part.find('=');
      if (eq == std::string_view::npos) {
        ins.attrs.emplace_back(std::string(part), "");
      } else {
        ins.attrs.emplace_back(std::string(Trim(part.substr(0, eq))), std::string(Trim(part.substr(eq + 1))));
      }
    }
  }
  return ins;
}

}  // namespace

int64_t HloShape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n = (d != 0 && n > kMaxDim / d) ? kMaxDim : n * d;
  return n;
}

std::vector<int64_t> HloShape::MajorToMinor() const {
  std::vector<int64_t> order;
  if (minor_to_major.size() == dims.size()) {
    order.assign(minor_to_major.rbegin(), minor_to_major.rend());
  } else {
    for (int64_t d = 0; d < rank(); ++d) order.push_back(d);
  }
  return order;
}

std::string HloShape::ToString() const { return FormatShape(*this); }

int64_t ElementBits(std::string_view t) {
  if (t == "pred" || t == "s8" || t == "u8") return 8;
  if (t == "s16" || t == "u16" || t == "f16" || t == "bf16") return 16;
  if (t == "s32" || t == "u32" || t == "f32") return 32;
  if (t == "s64" || t == "u64" || t == "f64" || t == "c64") return 64;
  if (t == "c128") return 128;
  if (t == "token" || t == "opaque") return 0;
  if (t == "s4" || t == "u4") return 4;
  if (t == "s2" || t == "u2") return 2;
  if (t == "s1" || t == "u1") return 1;
  if (StartsWith(t, "f8")) return 8;
  if (StartsWith(t, "f4")) return 4;
  if (StartsWith(t, "f6")) return 6;
  return -1;
}

int64_t ShapeBytes(const HloShape& s) {
  if (s.is_tuple) {
    int64_t sum = 0;
    for (const HloShape& e : s.elements) {
      const int64_t b = ShapeBytes(e);
      if (b < 0) return -1;
      sum += b;
    }
    return sum;
  }
  const int64_t bits = ElementBits(s.element_type);
  if (bits < 0) return -1;
  const int64_t n = s.num_elements();
  if (bits > 0 && n > (int64_t{1} << 58) / bits) return -1;
  return (n * bits + 7) / 8;
}

Result<HloShape> ParseHloShape(std::string_view text, size_t* used) {
  size_t i = 0;
  Result<HloShape> s = ParseShapeAt(text, &i, 0);
  if (used) *used = i;
  return s;
}

const std::string* HloInstruction::Attr(std::string_view key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

const HloComputation* HloModule::Find(std::string_view name) const {
  if (!name.empty() && name[0] == '%') name = name.substr(1);
  auto it = by_name.find(std::string(name));
  return it == by_name.end() ? nullptr : &computations[it->second];
}

size_t MatchClose(std::string_view text, size_t i) {
  std::string stack;
  for (size_t j = i; j < text.size(); ++j) {
    const char c = text[j];
    if (c == '"') {
      ++j;
      while (j < text.size() && text[j] != '"') {
        if (text[j] == '\\') ++j;
        ++j;
      }
      if (j >= text.size()) return std::string_view::npos;
      continue;
    }
    if (c == '(') stack += ')';
    else if (c == '[') stack += ']';
    else if (c == '{') stack += '}';
    else if (c == ')' || c == ']' || c == '}') {
      if (stack.empty() || stack.back() != c) return std::string_view::npos;
      stack.pop_back();
      if (stack.empty()) return j + 1;
    }
  }
  return std::string_view::npos;
}

std::vector<std::string_view> SplitTop(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  int depth = 0;
  bool quoted = false;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '\\') ++i;
      else if (c == '"') quoted = false;
      continue;
    }
    if (c == '"') quoted = true;
    else if (c == '(' || c == '[' || c == '{') ++depth;
    else if (c == ')' || c == ']' || c == '}') --depth;
    else if (c == sep && depth == 0) {
      out.push_back(Trim(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (start < text.size() || !out.empty()) out.push_back(Trim(text.substr(std::min(start, text.size()))));
  return out;
}

std::string_view Trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::optional<std::vector<int64_t>> ParseIntList(std::string_view text) {
  text = Trim(text);
  if (!text.empty() && text.front() == '{') {
    if (text.back() != '}') return std::nullopt;
    text = text.substr(1, text.size() - 2);
  }
  std::vector<int64_t> out;
  if (Trim(text).empty()) return out;
  for (std::string_view p : SplitTop(text)) {
    bool neg = false;
    if (!p.empty() && p[0] == '-') { neg = true; p = p.substr(1); }
    if (p.empty() || p.size() > 18) return std::nullopt;
    int64_t v = 0;
    for (char c : p) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
      v = v * 10 + (c - '0');
    }
    out.push_back(neg ? -v : v);
  }
  return out;
}

bool IsModuleHeader(std::string_view line) {
  line = Trim(line);
  return StartsWith(line, "HloModule ") || line == "HloModule";
}

Result<HloModule> ParseHloModule(const std::vector<std::string_view>& lines, size_t first, size_t* next) {
  HloModule m;
  m.line = static_cast<int64_t>(first) + 1;
  {
    std::string_view h = Trim(lines[first]);
    h = Trim(h.substr(std::min<size_t>(9, h.size())));
    std::vector<std::string_view> parts = SplitTop(h);
    if (!parts.empty()) m.name = std::string(parts[0]);
    for (size_t k = 1; k < parts.size(); ++k) {
      const size_t eq = parts[k].find('=');
      if (eq == std::string_view::npos) continue;
      const std::string_view key = Trim(parts[k].substr(0, eq));
      std::optional<std::vector<int64_t>> v = ParseIntList(parts[k].substr(eq + 1));
      if (!v || v->size() != 1 || (*v)[0] < 1) continue;
      if (key == "num_partitions") m.num_partitions = (*v)[0];
      if (key == "replica_count") m.replica_count = (*v)[0];
    }
  }
  size_t i = first + 1;
  HloComputation* comp = nullptr;
  std::vector<std::vector<std::string>> pending_operands;  // per instruction of `comp`
  auto close_computation = [&]() -> Status {
    for (size_t k = 0; k < comp->instructions.size(); ++k) {
      HloInstruction& ins = comp->instructions[k];
      for (const std::string& o : pending_operands[k]) {
        auto it = comp->by_name.find(o);
        if (it == comp->by_name.end())
          return Status::InvalidArgument(LineError(ins.line, 0, "operand '" + o + "' of %" + ins.name + " is not defined in %" + comp->name));
        ins.operands.push_back(it->second);
      }
    }
    if (comp->root < 0 && !comp->instructions.empty()) comp->root = static_cast<int>(comp->instructions.size()) - 1;
    comp = nullptr;
    pending_operands.clear();
    return Status::Ok();
  };
  while (i < lines.size()) {
    const std::string_view raw = lines[i];
    const std::string_view t = Trim(raw);
    if (comp == nullptr) {
      if (t.empty()) { ++i; continue; }
      if (IsSectionName(t)) {
        ++i;
        while (i < lines.size() && !Trim(lines[i]).empty() && std::isdigit(static_cast<unsigned char>(Trim(lines[i])[0]))) ++i;
        continue;
      }
      std::optional<std::pair<std::string, bool>> header = ComputationHeader(t);
      if (!header) break;  // the module ends here
      if (m.by_name.count(header->first))
        return Status::InvalidArgument(LineError(static_cast<int64_t>(i) + 1, 0, "computation %" + header->first + " defined twice"));
      m.by_name[header->first] = static_cast<int>(m.computations.size());
      m.computations.emplace_back();
      comp = &m.computations.back();
      comp->name = header->first;
      comp->is_entry = header->second;
      comp->line = static_cast<int64_t>(i) + 1;
      if (header->second) {
        if (m.entry >= 0) return Status::InvalidArgument(LineError(comp->line, 0, "a second ENTRY computation"));
        m.entry = static_cast<int>(m.computations.size()) - 1;
      }
      ++i;
      continue;
    }
    // Inside a computation.
    if (t.empty()) { ++i; continue; }
    if (t == "}") {
      RESHARD_RETURN_IF_ERROR(close_computation());
      ++i;
      continue;
    }
    if (IsModuleHeader(t))
      return Status::InvalidArgument(LineError(static_cast<int64_t>(i) + 1, 0, "computation %" + comp->name + " (line " +
                                                                             std::to_string(comp->line) + ") is not closed"));
    const int64_t line_no = static_cast<int64_t>(i) + 1;
    std::string joined = StripComments(raw);
    if (!LooksLikeInstruction(Trim(joined))) {
      m.issues.push_back({line_no, std::string(t.substr(0, 300)), "not an HLO instruction"});
      ++i;
      continue;
    }
    std::string open;
    bool bad = false;
    Brackets(joined, &open, &bad);
    size_t extra = 0;
    while (!open.empty() && !bad && i + 1 < lines.size() && extra < kMaxJoinedLines && !IsModuleHeader(lines[i + 1])) {
      ++i;
      ++extra;
      const std::string more = StripComments(lines[i]);
      joined += ' ';
      joined += more;
      Brackets(more, &open, &bad);
    }
    ++i;
    const std::string_view jt = Trim(joined);
    if (bad || !open.empty())
      return Status::InvalidArgument(LineError(line_no, 0, "unbalanced brackets in an instruction"));
    std::vector<std::string> operand_names;
    Result<HloInstruction> ins = ParseInstruction(jt, &operand_names);
    std::string name;
    {
      std::string_view u = jt;
      if (StartsWith(u, "ROOT ")) u = Trim(u.substr(5));
      size_t k = 0;
      name = std::string(ReadName(u, &k));
    }
    if (comp->by_name.count(name))
      return Status::InvalidArgument(LineError(line_no, 0, "instruction %" + name + " defined twice in %" + comp->name));
    HloInstruction placeholder;
    if (!ins.ok()) {
      // Keep the name so that users of it resolve; the instruction itself is unknown.
      m.issues.push_back({line_no, std::string(jt.substr(0, 300)), ins.status().message()});
      placeholder.name = name;
      placeholder.is_root = StartsWith(jt, "ROOT ");
      operand_names.clear();
    }
    HloInstruction& kept = comp->instructions.emplace_back(ins.ok() ? std::move(ins).value() : std::move(placeholder));
    kept.line = line_no;
    kept.text = std::string(jt);
    comp->by_name[name] = static_cast<int>(comp->instructions.size()) - 1;
    if (kept.is_root) comp->root = static_cast<int>(comp->instructions.size()) - 1;
    pending_operands.push_back(std::move(operand_names));
  }
  if (comp != nullptr)
    return Status::InvalidArgument(LineError(comp->line, 0, "computation %" + comp->name + " is not closed"));
  // XLA prints every module with its ENTRY: a module without one was cut
  // short (or is not XLA's text), and auditing the rest would report nothing.
  if (m.entry < 0)
    return Status::InvalidArgument(LineError(i < lines.size() ? static_cast<int64_t>(i) + 1 : m.line, 0,
                                             "HloModule " + m.name + " (line " + std::to_string(m.line) +
                                                 ") ends here without an ENTRY computation"));
  *next = i;
  return m;
}

}  // namespace reshard::audit
