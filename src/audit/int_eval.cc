#include "audit/int_eval.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <functional>
#include <string>

namespace reshard::audit {
namespace {

std::optional<int64_t> Elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d != 0 && n > kMaxIntElements / d)) return std::nullopt;
    n *= d;
  }
  return n;
}

IntPtr Make(std::vector<int64_t> dims, bool per_device, std::vector<int64_t> v) {
  auto out = std::make_shared<IntData>();
  out->dims = std::move(dims);
  out->per_device = per_device;
  out->v = std::move(v);
  return out;
}

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * dims[k];
  return s;
}

// Builds a result of `dims` where element i on device p is f(p, multi-index of i).
IntPtr Build(const std::vector<int64_t>& dims, bool per_device, int64_t devices,
             const std::function<std::optional<int64_t>(int64_t, const std::vector<int64_t>&)>& f) {
  std::optional<int64_t> n = Elements(dims);
  if (!n) return nullptr;
  const int64_t copies = per_device ? devices : 1;
  if (copies > 0 && *n > kMaxIntElements / copies) return nullptr;
  std::vector<int64_t> v;
  v.reserve(static_cast<size_t>(copies * *n));
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t p = 0; p < copies; ++p) {
    std::fill(idx.begin(), idx.end(), 0);
    for (int64_t i = 0; i < *n; ++i) {
      std::optional<int64_t> x = f(p, idx);
      if (!x) return nullptr;
      v.push_back(*x);
      for (size_t k = dims.size(); k-- > 0;) {
        if (++idx[k] < dims[k]) break;
        idx[k] = 0;
      }
    }
  }
  return Make(dims, per_device, std::move(v));
}

int64_t Flat(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t f = 0;
  for (size_t k = 0; k < idx.size(); ++k) f += idx[k] * strides[k];
  return f;
}

std::optional<int64_t> Binary(std::string_view op, int64_t a, int64_t b, std::string_view direction) {
  int64_t r = 0;
  if (op == "add") { if (__builtin_add_overflow(a, b, &r)) return std::nullopt; return r; }
  if (op == "subtract") { if (__builtin_sub_overflow(a, b, &r)) return std::nullopt; return r; }
  if (op == "multiply") { if (__builtin_mul_overflow(a, b, &r)) return std::nullopt; return r; }
  if (op == "divide") { if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt; return a / b; }
  if (op == "remainder") { if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt; return a % b; }
  if (op == "maximum") return std::max(a, b);
  if (op == "minimum") return std::min(a, b);
  if (op == "and") return a & b;
  if (op == "or") return a | b;
  if (op == "xor") return a ^ b;
  if (op == "shift-left") { if (b < 0 || b > 62 || a < 0 || a > (INT64_MAX >> b)) return std::nullopt; return a << b; }
  if (op == "shift-right-logical" || op == "shift-right-arithmetic") { if (b < 0 || b > 62 || a < 0) return std::nullopt; return a >> b; }
  if (op == "compare") {
    if (direction == "EQ") return a == b;
    if (direction == "NE") return a != b;
    if (direction == "LT") return a < b;
    if (direction == "LE") return a <= b;
    if (direction == "GT") return a > b;
    if (direction == "GE") return a >= b;
  }
  return std::nullopt;
}

// "{[0:2], [7:8:1]}" -> per dim (start, limit, stride).
std::optional<std::vector<std::array<int64_t, 3>>> SliceSpec(const std::string* text) {
  if (text == nullptr) return std::nullopt;
  std::string_view t = Trim(*text);
  if (t.size() < 2 || t.front() != '{' || t.back() != '}') return std::nullopt;
  std::vector<std::array<int64_t, 3>> out;
  std::string_view inner = Trim(t.substr(1, t.size() - 2));
  if (inner.empty()) return out;
  for (std::string_view p : SplitTop(inner)) {
    if (p.size() < 2 || p.front() != '[' || p.back() != ']') return std::nullopt;
    std::vector<std::string_view> parts = SplitTop(p.substr(1, p.size() - 2), ':');
    if (parts.size() < 2 || parts.size() > 3) return std::nullopt;
    std::array<int64_t, 3> s{0, 0, 1};
    for (size_t k = 0; k < parts.size(); ++k) {
      std::optional<std::vector<int64_t>> v = ParseIntList(parts[k]);
      if (!v || v->size() != 1) return std::nullopt;
      s[k] = (*v)[0];
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

int64_t IntData::elements() const {
  std::optional<int64_t> n = Elements(dims);
  return n ? *n : 0;
}

bool IsIntegerType(std::string_view t) {
  if (t.empty()) return false;
  return t == "pred" || ((t[0] == 's' || t[0] == 'u') && t.size() >= 2 && std::isdigit(static_cast<unsigned char>(t[1])));
}

IntPtr IntConstant(const HloInstruction& ins) {
  if (ins.shape.is_tuple || !IsIntegerType(ins.shape.element_type)) return nullptr;
  std::optional<int64_t> n = Elements(ins.shape.dims);
  if (!n || *n > (int64_t{1} << 16)) return nullptr;
  std::vector<int64_t> v;
  const std::string& s = ins.literal;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (std::isdigit(static_cast<unsigned char>(c)) || (c == '-' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      size_t j = i + 1;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      if (j - i > 18) return nullptr;
      v.push_back(std::stoll(s.substr(i, j - i)));
      i = j;
    } else if (s.compare(i, 4, "true") == 0) {
      v.push_back(1);
      i += 4;
    } else if (s.compare(i, 5, "false") == 0) {
      v.push_back(0);
      i += 5;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      return nullptr;
    } else {
      ++i;
    }
    if (static_cast<int64_t>(v.size()) > *n) return nullptr;
  }
  if (static_cast<int64_t>(v.size()) != *n) return nullptr;
  return Make(ins.shape.dims, false, std::move(v));
}

IntPtr PartitionIds(int64_t devices) {
  if (devices < 1 || devices > kMaxIntElements) return nullptr;
  std::vector<int64_t> v(static_cast<size_t>(devices));
  for (int64_t p = 0; p < devices; ++p) v[p] = p;
  return Make({}, true, std::move(v));
}

IntPtr EvalInt(const HloInstruction& ins, const std::vector<IntPtr>& ops, int64_t devices) {
  if (ins.shape.is_tuple) return nullptr;
  const std::string& op = ins.opcode;
  const std::vector<int64_t>& dims = ins.shape.dims;
  bool per_device = false;
  for (const IntPtr& o : ops) per_device = per_device || (o && o->per_device);
  auto all_known = [&](size_t n) {
    if (ops.size() < n) return false;
    for (size_t k = 0; k < n; ++k)
      if (!ops[k]) return false;
    return true;
  };
  if (op == "iota") {
    const std::string* d = ins.Attr("iota_dimension");
    std::optional<std::vector<int64_t>> dim = d ? ParseIntList(*d) : std::nullopt;
    if (!dim || dim->size() != 1 || (*dim)[0] < 0 || (*dim)[0] >= ins.shape.rank()) return nullptr;
    const int64_t k = (*dim)[0];
    return Build(dims, false, devices, [&](int64_t, const std::vector<int64_t>& idx) -> std::optional<int64_t> { return idx[k]; });
  }
  if (!IsIntegerType(ins.shape.element_type) && op != "convert") return nullptr;
  if (op == "copy" || op == "convert" || op == "bitcast" || op == "reshape") {
    if (!all_known(1) || Elements(dims) != Elements(ops[0]->dims)) return nullptr;
    return Make(dims, ops[0]->per_device, ops[0]->v);
  }
  if (op == "negate" || op == "abs" || op == "not") {
    if (!all_known(1) || ops[0]->dims != dims) return nullptr;
    const IntData& a = *ops[0];
    const bool pred = ins.shape.element_type == "pred";
    const std::vector<int64_t> strides = Strides(dims);
    return Build(dims, per_device, devices, [&](int64_t p, const std::vector<int64_t>& idx) -> std::optional<int64_t> {
      const int64_t x = a.At(p, Flat(idx, strides));
      if (x == INT64_MIN) return std::nullopt;
      if (op == "negate") return -x;
      if (op == "abs") return x < 0 ? -x : x;
      return pred ? int64_t{x == 0} : ~x;
    });
  }
  if (op == "add" || op == "subtract" || op == "multiply" || op == "divide" || op == "remainder" || op == "maximum" ||
      op == "minimum" || op == "and" || op == "or" || op == "xor" || op == "shift-left" || op == "shift-right-logical" ||
      op == "shift-right-arithmetic" || op == "compare") {
    if (!all_known(2) || ops[0]->dims != ops[1]->dims || ops[0]->dims != dims) return nullptr;
    const std::string* dir = ins.Attr("direction");
    const std::string direction = dir ? *dir : "";
    const std::vector<int64_t> strides = Strides(ops[0]->dims);
    return Build(dims, per_device, devices, [&](int64_t p, const std::vector<int64_t>& idx) -> std::optional<int64_t> {
      const int64_t f = Flat(idx, strides);
      return Binary(op, ops[0]->At(p, f), ops[1]->At(p, f), direction);
    });
  }
  if (op == "select" || op == "clamp") {
    if (!all_known(3)) return nullptr;
    for (const IntPtr& o : ops)
      if (o->dims != dims && !o->dims.empty()) return nullptr;
    const std::vector<int64_t> strides = Strides(dims);
    return Build(dims, per_device, devices, [&](int64_t p, const std::vector<int64_t>& idx) -> std::optional<int64_t> {
      const int64_t f = Flat(idx, strides);
      auto at = [&](size_t k) { return ops[k]->dims.empty() ? ops[k]->At(p, 0) : ops[k]->At(p, f); };
      if (op == "select") return at(0) ? at(1) : at(2);
      return std::clamp(at(1), at(0), std::max(at(0), at(2)));
    });
  }
  if (op == "broadcast") {
    if (!all_known(1)) return nullptr;
    const std::string* d = ins.Attr("dimensions");
    std::optional<std::vector<int64_t>> map = d ? ParseIntList(*d) : std::optional<std::vector<int64_t>>(std::vector<int64_t>{});
    if (!map || map->size() != ops[0]->dims.size()) return nullptr;
    for (size_t k = 0; k < map->size(); ++k)
      if ((*map)[k] < 0 || (*map)[k] >= ins.shape.rank() || dims[(*map)[k]] != ops[0]->dims[k]) return nullptr;
    const std::vector<int64_t> strides = Strides(ops[0]->dims);
    return Build(dims, per_device, devices, [&](int64_t p, const std::vector<int64_t>& idx) -> std::optional<int64_t> {
      int64_t f = 0;
      for (size_t k = 0; k < map->size(); ++k) f += idx[(*map)[k]] * strides[k];
      return ops[0]->At(p, f);
    });
  }
  if (op == "slice") {
    if (!all_known(1)) return nullptr;
    std::optional<std::vector<std::array<int64_t, 3>>> spec = SliceSpec(ins.Attr("slice"));
    if (!spec || spec->size() != ops[0]->dims.size() || ops[0]->dims.size() != dims.size()) return nullptr;
    const std::vector<int64_t> strides = Strides(ops[0]->dims);
    return Build(dims, per_device, devices, [&](int64_t p, const std::vector<int64_t>& idx) -> std::optional<int64_t> {
      int64_t f = 0;
      for (size_t k = 0; k < idx.size(); ++k) {
        const int64_t i = (*spec)[k][0] + idx[k] * (*spec)[k][2];
        if (i < 0 || i >= ops[0]->dims[k]) return std::nullopt;
        f += i * strides[k];
      }
      return ops[0]->At(p, f);
    });
  }
  if (op == "dynamic-slice") {
    if (ops.empty() || !ops[0]) return nullptr;
    const IntData& a = *ops[0];
    const size_t rank = a.dims.size();
    if (dims.size() != rank || ops.size() != rank + 1) return nullptr;
    for (size_t k = 0; k < rank; ++k)
      if (dims[k] > a.dims[k]) return nullptr;
    for (size_t k = 1; k < ops.size(); ++k)
      if (!ops[k] || ops[k]->elements() != 1) return nullptr;
    const std::vector<int64_t> strides = Strides(a.dims);
    return Build(dims, per_device, devices, [&](int64_t p, const std::vector<int64_t>& idx) -> std::optional<int64_t> {
      int64_t f = 0;
      for (size_t k = 0; k < rank; ++k) {
        const int64_t start = std::clamp(ops[k + 1]->At(p, 0), int64_t{0}, a.dims[k] - dims[k]);
        f += (start + idx[k]) * strides[k];
      }
      return a.At(p, f);
    });
  }
  if (op == "concatenate") {
    const std::string* d = ins.Attr("dimensions");
    std::optional<std::vector<int64_t>> cd = d ? ParseIntList(*d) : std::nullopt;
    if (!cd || cd->size() != 1 || ops.empty() || !all_known(ops.size())) return nullptr;
    const int64_t c = (*cd)[0];
    if (c < 0 || c >= ins.shape.rank()) return nullptr;
    int64_t along = 0;
    for (const IntPtr& o : ops) {
      if (o->dims.size() != dims.size()) return nullptr;
      for (size_t k = 0; k < dims.size(); ++k)
        if (static_cast<int64_t>(k) != c && o->dims[k] != dims[k]) return nullptr;
      along += o->dims[c];
    }
    if (along != dims[c]) return nullptr;
    return Build(dims, per_device, devices, [&](int64_t p, const std::vector<int64_t>& idx) -> std::optional<int64_t> {
      int64_t i = idx[c];
      for (const IntPtr& o : ops) {
        if (i < o->dims[c]) {
          std::vector<int64_t> j = idx;
          j[c] = i;
          return o->At(p, Flat(j, Strides(o->dims)));
        }
        i -= o->dims[c];
      }
      return std::nullopt;
    });
  }
  return nullptr;
}

}  // namespace reshard::audit
