#include "exec/reduce_kernel.h"

#include "exec/copy_kernel.h"
#include "exec/row_walk.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace reshard {
namespace {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past the largest half
  if (abs < 0x38800000u) {  // below the smallest normal half: a multiple of 2^-24, rounded to even
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // exact: a power of two
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  // Normal: drop 13 mantissa bits, rounding to nearest even (a carry into the exponent is right).
  const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

float BF16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBF16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// Element arithmetic per dtype: load as the type computed in, combine, store.
template <typename T>
struct Plain {
  using Value = T;
  static T Load(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  static void Store(T v, std::byte* p) { std::memcpy(p, &v, sizeof(T)); }
};
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
struct Narrow {
  using Value = float;
  static float Load(const std::byte* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return ToFloat(v);
  }
  static void Store(float v, std::byte* p) {
    const uint16_t b = FromFloat(v);
    std::memcpy(p, &b, 2);
  }
};
using Half = Narrow<HalfToFloat, FloatToHalf>;
using BFloat = Narrow<BF16ToFloat, FloatToBF16>;

template <typename V>
V Apply(V a, V b, ReduceOp op) {
  if constexpr (std::is_integral_v<V>) {
    using U = std::make_unsigned_t<V>;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: return static_cast<V>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case ReduceOp::kMax: return std::max(a, b);
      case ReduceOp::kMin: return std::min(a, b);
    }
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: return a + b;
      // NaN wins, as in XLA's and torch's max and min.
      case ReduceOp::kMax: return std::isnan(a) || std::isnan(b) ? a + b : std::max(a, b);
      case ReduceOp::kMin: return std::isnan(a) || std::isnan(b) ? a + b : std::min(a, b);
    }
  }
  return a;
}

template <typename E>
void CombineRuns(const CopyProgram& p, const CopyOp& op, const std::byte* src, std::byte* dst, ReduceOp reduce,
                 int64_t width) {
  const int64_t n = op.run_bytes / width;
  ForEachRun(p, op, [&](int64_t so, int64_t dof) {
    std::byte* t = dst + dof;
    const std::byte* s = src + so;
    for (int64_t i = 0; i < n; ++i, t += width, s += width) E::Store(Apply(E::Load(t), E::Load(s), reduce), t);
  });
}

template <typename E>
void Divide(std::byte* data, int64_t elements, int64_t parts, int64_t width) {
  using V = typename E::Value;
  for (int64_t i = 0; i < elements; ++i, data += width) {
    const V v = E::Load(data);
    if constexpr (std::is_signed_v<V> && std::is_integral_v<V>)
      E::Store(static_cast<V>(static_cast<int64_t>(v) / parts), data);  // C++ truncates toward zero
    else if constexpr (std::is_integral_v<V>)
      E::Store(static_cast<V>(static_cast<uint64_t>(v) / static_cast<uint64_t>(parts)), data);
    else
      E::Store(static_cast<V>(v / static_cast<V>(parts)), data);
  }
}

template <typename E>
void Scale(std::byte* data, int64_t elements, int64_t factor, int64_t width) {
  using V = typename E::Value;
  for (int64_t i = 0; i < elements; ++i, data += width) {
    const V v = E::Load(data);
    if constexpr (std::is_integral_v<V>) {
      // Wraps, as the sum of `factor` copies would; in 64 bits, since a
      // narrower unsigned type would be promoted to int and could overflow.
      const uint64_t product = static_cast<uint64_t>(static_cast<std::make_unsigned_t<V>>(v)) * static_cast<uint64_t>(factor);
      E::Store(static_cast<V>(static_cast<std::make_unsigned_t<V>>(product)), data);
    } else {
      E::Store(static_cast<V>(v * static_cast<V>(factor)), data);
    }
  }
}

// Calls f.template operator()<E>(width) with the element type of `dtype`
// (complex types as their components: every op they allow is component-wise).
template <typename F>
void Dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kPred:
    case DType::kU8: f.template operator()<Plain<uint8_t>>(1); return;
    case DType::kS8: f.template operator()<Plain<int8_t>>(1); return;
    case DType::kS16: f.template operator()<Plain<int16_t>>(2); return;
    case DType::kU16: f.template operator()<Plain<uint16_t>>(2); return;
    case DType::kF16: f.template operator()<Half>(2); return;
    case DType::kBF16: f.template operator()<BFloat>(2); return;
    case DType::kS32: f.template operator()<Plain<int32_t>>(4); return;
    case DType::kU32: f.template operator()<Plain<uint32_t>>(4); return;
    case DType::kF32:
    case DType::kC64: f.template operator()<Plain<float>>(4); return;
    case DType::kS64: f.template operator()<Plain<int64_t>>(8); return;
    case DType::kU64: f.template operator()<Plain<uint64_t>>(8); return;
    case DType::kF64:
    case DType::kC128: f.template operator()<Plain<double>>(8); return;
  }
}

}  // namespace

void RunCombine(const CopyProgram& p, const CopyOp& op, const std::byte* src, std::byte* dst, DType dtype,
                ReduceOp reduce) {
  Dispatch(dtype, [&]<typename E>(int64_t width) { CombineRuns<E>(p, op, src, dst, reduce, width); });
}

void CombineContiguous(const std::byte* src, std::byte* dst, int64_t bytes, DType dtype, ReduceOp reduce,
                       bool src_first) {
  Dispatch(dtype, [&]<typename E>(int64_t width) {
    for (int64_t at = 0; at + width <= bytes; at += width) {
      const auto d = E::Load(dst + at), s = E::Load(src + at);
      E::Store(src_first ? Apply(s, d, reduce) : Apply(d, s, reduce), dst + at);
    }
  });
}

void FillIdentity(ReduceOp op, DType dtype, std::byte* out, int64_t bytes) {
  const int64_t eb = ByteSize(dtype);
  if (bytes < eb) return;
  if (op == ReduceOp::kSum || op == ReduceOp::kAvg) {  // 0 is all zero bytes in every type
    std::memset(out, 0, static_cast<size_t>(bytes));
    return;
  }
  StoreIdentity(op, dtype, out);
  for (int64_t at = eb; at + eb <= bytes; at += eb) std::memcpy(out + at, out, static_cast<size_t>(eb));
}

void DivideElements(std::byte* data, int64_t elements, DType dtype, int64_t parts) {
  const int64_t components = dtype == DType::kC64 || dtype == DType::kC128 ? 2 : 1;
  Dispatch(dtype, [&]<typename E>(int64_t width) { Divide<E>(data, elements * components, parts, width); });
}

void ScaleElements(std::byte* data, int64_t elements, DType dtype, int64_t factor) {
  const int64_t components = dtype == DType::kC64 || dtype == DType::kC128 ? 2 : 1;
  Dispatch(dtype, [&]<typename E>(int64_t width) { Scale<E>(data, elements * components, factor, width); });
}

void RunReducingCopies(const DeviceProgram& p, const Reduction& reduction, int64_t scale, DType dtype, const std::byte* in,
                       const CopyProgram& received, const std::vector<int32_t>& begin,
                       const std::function<const std::byte*(size_t m)>& received_base, std::byte* out) {
  const int64_t eb = ByteSize(dtype);
  // A device of a partial target no part is routed to holds the identity.
  for (const CopyOp& op : p.fill.ops)
    ForEachRun(p.fill, op, [&](int64_t, int64_t dof) {
      for (int64_t b = 0; b < op.run_bytes; b += eb) std::memcpy(out + dof + b, p.fill_element.data(), static_cast<size_t>(eb));
    });
  // In part order: the copies of the first part routed to an element write
  // it, later parts' combine with it (DeviceProgram::recv_writes).
  // (Kept per thread: no allocation per device and run once it has grown.)
  thread_local std::vector<Contribution> in_order;
  in_order.clear();
  for (int64_t part = 0; part < reduction.parts; ++part) {
    if (p.local_part == part) in_order.push_back({&p.local, 0, static_cast<int64_t>(p.local.ops.size()), in, p.local_writes});
    for (size_t m = 0; m < p.recv_part.size(); ++m)
      if (p.recv_part[m] == part) in_order.push_back({&received, begin[m], begin[m + 1], received_base(m), p.recv_writes[m] != 0});
  }
  ApplyContributions(in_order, reduction, scale, dtype, out);
}

void ApplyContributions(std::span<const Contribution> in_part_order, const Reduction& reduction, int64_t scale,
                        DType dtype, std::byte* out) {
  const int64_t eb = ByteSize(dtype);
  for (const Contribution& c : in_part_order)
    for (int64_t k = c.lo; k < c.hi; ++k) {
      const CopyOp& op = c.copies->ops[static_cast<size_t>(k)];
      if (c.writes)
        RunCopy(*c.copies, op, c.src, out, 0, CopyUnits(*c.copies, op));  // the pack/unpack kernel's copy
      else
        RunCombine(*c.copies, op, c.src, out, dtype, reduction.op);
    }
  if (reduction.op != ReduceOp::kAvg && scale == 1) return;
  // Divide (avg) and scale (an avg target) what the writers wrote (they
  // cover every reached element once), run by run: a target with a leading
  // dimension has bytes between its columns that are the caller's.
  for (const Contribution& c : in_part_order) {
    if (!c.writes) continue;
    for (int64_t k = c.lo; k < c.hi; ++k) {
      const CopyOp& op = c.copies->ops[static_cast<size_t>(k)];
      ForEachRun(*c.copies, op, [&](int64_t, int64_t dof) {
        if (reduction.op == ReduceOp::kAvg) DivideElements(out + dof, op.run_bytes / eb, dtype, reduction.parts);
        if (scale != 1) ScaleElements(out + dof, op.run_bytes / eb, dtype, scale);
      });
    }
  }
}

void StoreIdentity(ReduceOp op, DType dtype, std::byte* out) {
  const int components = dtype == DType::kC64 || dtype == DType::kC128 ? 2 : 1;
  Dispatch(dtype, [&]<typename E>(int64_t width) {
    using V = typename E::Value;
    V v = V{};
    if (op == ReduceOp::kMax || op == ReduceOp::kMin) {
      const bool max = op == ReduceOp::kMax;
      if constexpr (std::numeric_limits<V>::has_infinity)
        v = max ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
      else
        v = max ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
    }
    for (int c = 0; c < components; ++c) E::Store(v, out + c * width);
  });
}

void StoreNumber(int64_t value, DType dtype, std::byte* out) {
  // Integers keep the low bits (C++20's conversion is modular); floats round.
  const int components = dtype == DType::kC64 || dtype == DType::kC128 ? 2 : 1;
  Dispatch(dtype, [&]<typename E>(int64_t width) {
    for (int c = 0; c < components; ++c) E::Store(static_cast<typename E::Value>(value), out + c * width);
  });
}

int64_t ExactIntegers(DType dtype) {
  switch (dtype) {
    case DType::kPred: return 1;
    case DType::kS8: return 127;
    case DType::kU8: return 255;
    case DType::kS16: return 32767;
    case DType::kU16: return 65535;
    case DType::kF16: return 2048;
    case DType::kBF16: return 256;
    case DType::kS32: return std::numeric_limits<int32_t>::max();
    case DType::kU32: return std::numeric_limits<uint32_t>::max();
    case DType::kF32:
    case DType::kC64: return int64_t{1} << 24;
    case DType::kS64:
    case DType::kU64: return std::numeric_limits<int64_t>::max();
    case DType::kF64:
    case DType::kC128: return int64_t{1} << 53;
  }
  return 1;
}

}  // namespace reshard
