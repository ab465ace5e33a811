// The reduce kernel: how an executor combines partial values (layouts with a
// pending reduction, layout.h) in the array's element type, and the one
// place element values are read and written as numbers.
//
// A reducing step (StepProgram::reduction) gives every output element one
// contribution per part routed to it (PartRoutes, part_routes.h).
// RunReducingCopies applies a device's contributions in part order: the
// first part's copies at an element write, each later part's combine with
// what is there (sum, max, min; avg sums and then divides by the number of
// parts; into an avg target not routed one to one, the result is then
// multiplied by its part count, StepProgram::scale), so the result does not
// depend on the order messages arrive in: every
// executor and transport gives the same bits. Integers wrap (two's
// complement, as XLA and torch do); avg of integers truncates toward zero;
// f16 and bf16 are combined in f32 and rounded to nearest even after each
// part; complex values combine component-wise (CheckReducible, layout.h,
// says which pairs reduce at all).
// Stateless; thread-safe as long as concurrent calls write disjoint bytes.
#ifndef RESHARD_SRC_EXEC_REDUCE_KERNEL_H_
#define RESHARD_SRC_EXEC_REDUCE_KERNEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "reshard/device_program.h"
#include "reshard/dtype.h"
#include "reshard/layout.h"
#include "reshard/status.h"

namespace reshard {

// dst = op(dst, src) for every element the copy `op` covers (its bytes as
// RunCopy would copy them). avg combines as sum.
void RunCombine(const CopyProgram& p, const CopyOp& op, const std::byte* src, std::byte* dst, DType dtype,
                ReduceOp reduce);

// dst = op(dst, src) over `bytes` contiguous bytes (whole elements of
// `dtype`), or with `src_first` dst = op(src, dst) (MPI's order: the lower
// ranks' operand first; max and min keep their first operand of equals, so
// the order shows on signed zeros). avg combines as sum. What a backend's
// reduce-scatter combines with.
void CombineContiguous(const std::byte* src, std::byte* dst, int64_t bytes, DType dtype, ReduceOp reduce,
                       bool src_first = false);
// Writes the identity of `op` (StoreIdentity) into each of the `bytes` / element
// bytes elements at `out`.
void FillIdentity(ReduceOp op, DType dtype, std::byte* out, int64_t bytes);

// Divides each of `elements` elements at `data` by `parts` (avg's last step).
void DivideElements(std::byte* data, int64_t elements, DType dtype, int64_t parts);
// Multiplies each of `elements` elements at `data` by `factor` (an avg
// target's scale, PartRoutes::scale): integers wrap, floats round once
// (f16 and bf16 from f32), complex values scale both components.
void ScaleElements(std::byte* data, int64_t elements, DType dtype, int64_t factor);

// One device's contribution of one part to a reducing step: ops [lo, hi) of
// `copies`, read from `src`; `writes`: its part is the first routed to the
// elements it covers (they are written, not combined).
struct Contribution {
  const CopyProgram* copies = nullptr;
  int64_t lo = 0, hi = 0;
  const std::byte* src = nullptr;
  bool writes = false;
};
// Applies `in_part_order` (a device's contributions, ascending part) to
// `out`: writers copy, the others combine; avg then divides what the writers
// wrote by reduction.parts, and `scale` other than 1 multiplies it
// (StepProgram::scale). The one place contributions are applied: every
// executor and transport, per message or per group pattern, calls it.
void ApplyContributions(std::span<const Contribution> in_part_order, const Reduction& reduction, int64_t scale,
                        DType dtype, std::byte* out);

// A reducing step's local and received copies on one device, in part order
// (copies marked as writing, DeviceProgram::recv_writes and local_writes,
// write; the others combine; avg then divides what the writers wrote, and
// `scale` other than 1 multiplies it: StepProgram::scale),
// after the device's identity fill
// (DeviceProgram::fill, a partial target's device no part is routed to):
// `received` and `begin` are the copies of each received message (the
// unpack or direct copies), message m's read from received_base(m).
// REQUIRES: the step reduces (p.recv_part filled); every message received.
void RunReducingCopies(const DeviceProgram& p, const Reduction& reduction, int64_t scale, DType dtype, const std::byte* in,
                       const CopyProgram& received, const std::vector<int32_t>& begin,
                       const std::function<const std::byte*(size_t m)>& received_base, std::byte* out);

// op(a, b) on the integers the oracles model element values with (the
// simulator's tags, the checker's numbers): avg combines as sum, the
// division comes once at the end, as RunReducingCopies does it.
template <typename T>
T CombineNumbers(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return static_cast<T>(a + b);
    case ReduceOp::kMax: return a < b ? b : a;
    case ReduceOp::kMin: return b < a ? b : a;
  }
  return a;
}

// Writes the identity of `op` as one element of `dtype`: 0 for sum and avg,
// for max the lowest value (-inf for floats), for min the highest.
void StoreIdentity(ReduceOp op, DType dtype, std::byte* out);

// Writes the integer `value` as one element of `dtype` (integers keep the
// low bits; floats round; complex values take it as both components).
void StoreNumber(int64_t value, DType dtype, std::byte* out);
// The largest integer n with every integer in [-n, n] exact in `dtype` (its
// positive range for unsigned types).
int64_t ExactIntegers(DType dtype);

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_REDUCE_KERNEL_H_
