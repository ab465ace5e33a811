#include "exec/copy_kernel.h"

#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "reshard/layout.h"

namespace reshard {
namespace {

// Rows [lo, hi) of an op with nd >= 1 dims, each row `run` bytes moved by `copy`.
template <typename Copy>
void Rows(const CopyDim* dims, int nd, const std::byte* src, std::byte* dst, int64_t lo, int64_t hi, Copy copy) {
  int64_t idx[kMaxRank + 1];
  int64_t so = 0, dof = 0, rem = lo;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % dims[d].count;
    rem /= dims[d].count;
    so += idx[d] * dims[d].src_stride;
    dof += idx[d] * dims[d].dst_stride;
  }
  const CopyDim& in = dims[nd - 1];
  int64_t row = lo;
  while (row < hi) {
    const int64_t n = std::min(in.count - idx[nd - 1], hi - row);
    const std::byte* s = src + so;
    std::byte* t = dst + dof;
    for (int64_t i = 0; i < n; ++i, s += in.src_stride, t += in.dst_stride) copy(t, s);
    row += n;
    if (row >= hi) return;
    // Carry: the innermost dim wraps to 0, the next dims count up.
    so -= idx[nd - 1] * in.src_stride;
    dof -= idx[nd - 1] * in.dst_stride;
    idx[nd - 1] = 0;
    for (int d = nd - 2; d >= 0; --d) {
      so += dims[d].src_stride;
      dof += dims[d].dst_stride;
      if (++idx[d] < dims[d].count) break;
      so -= idx[d] * dims[d].src_stride;
      dof -= idx[d] * dims[d].dst_stride;
      idx[d] = 0;
    }
  }
}

template <int64_t K>
void FixedRows(const CopyDim* dims, int nd, const std::byte* src, std::byte* dst, int64_t lo, int64_t hi) {
  Rows(dims, nd, src, dst, lo, hi, [](std::byte* t, const std::byte* s) { std::memcpy(t, s, K); });
}

#if defined(__SSE2__)
// Copies `run` bytes (a multiple of 16, dst 16-byte aligned) with streaming
// stores: a large strided copy then writes its lines without first reading
// them into the cache (as glibc's memcpy does for large copies), which is
// most of the gap between short runs and memcpy once the buffers outgrow
// the caches.
inline void StreamRun(std::byte* t, const std::byte* s, size_t run) {
  for (size_t b = 0; b < run; b += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(t + b), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + b)));
}
#endif

}  // namespace

int64_t CopyUnits(const CopyProgram& p, const CopyOp& op) {
  if (op.num_dims == 0) return op.run_bytes;
  int64_t n = 1;
  for (int32_t i = 0; i < op.num_dims; ++i) n *= p.dims[op.first_dim + i].count;
  return n;
}

int64_t UnitBytes(const CopyProgram&, const CopyOp& op) { return op.num_dims == 0 ? 1 : op.run_bytes; }

void RunCopy(const CopyProgram& p, const CopyOp& op, const std::byte* src, std::byte* dst, int64_t lo, int64_t hi) {
  src += op.src_offset;
  dst += op.dst_offset;
  if (op.num_dims == 0) {
    std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo));
    return;
  }
  const CopyDim* dims = p.dims.data() + op.first_dim;
  const int nd = op.num_dims;
#if defined(__SSE2__)
  // Streaming stores pay off only where the data will not be read again
  // soon from the cache: copies well beyond the L2 cache.
  constexpr int64_t kStreamBytes = int64_t{512} << 10;
  if (op.run_bytes % 16 == 0 && op.run_bytes <= 4096 && p.OpBytes(op) >= kStreamBytes) {
    bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0;
    for (int d = 0; d < nd; ++d) aligned = aligned && dims[d].dst_stride % 16 == 0;
    if (aligned) {
      const size_t run = static_cast<size_t>(op.run_bytes);
      Rows(dims, nd, src, dst, lo, hi, [run](std::byte* t, const std::byte* s) { StreamRun(t, s, run); });
      _mm_sfence();
      return;
    }
  }
#endif
  switch (op.run_bytes) {  // small runs: fixed-size copies the compiler inlines
    case 1: return FixedRows<1>(dims, nd, src, dst, lo, hi);
    case 2: return FixedRows<2>(dims, nd, src, dst, lo, hi);
    case 4: return FixedRows<4>(dims, nd, src, dst, lo, hi);
    case 8: return FixedRows<8>(dims, nd, src, dst, lo, hi);
    case 12: return FixedRows<12>(dims, nd, src, dst, lo, hi);
    case 16: return FixedRows<16>(dims, nd, src, dst, lo, hi);
    case 32: return FixedRows<32>(dims, nd, src, dst, lo, hi);
    case 64: return FixedRows<64>(dims, nd, src, dst, lo, hi);
    default: break;
  }
  const size_t run = static_cast<size_t>(op.run_bytes);
  if (run % 32 == 0 && run <= 2048) {  // mid-size runs: inline 32-byte blocks, no memcpy call per run
    Rows(dims, nd, src, dst, lo, hi, [run](std::byte* t, const std::byte* s) {
      for (size_t b = 0; b < run; b += 32) std::memcpy(t + b, s + b, 32);
    });
    return;
  }
  Rows(dims, nd, src, dst, lo, hi, [run](std::byte* t, const std::byte* s) { std::memcpy(t, s, run); });
}

}  // namespace reshard
