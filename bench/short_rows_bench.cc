// The canonical case's copy pattern alone, without reshard: eight sources
// [a/2][64][16] f32 (a P('y', None, 'x') shard, 8 MiB each at a = 4096) to
// eight targets [a][8][64] f32 (P(None, ('x','y'), None)), 64-byte runs
// written with streaming stores, on two threads, each order of the copies
// timed against memcpy of the same bytes (docs/benchmarks.md, "Short rows:
// two-dim copies", and "Small blocks and short lines by source"). Prints
// the median of 15 runs per order. A: dim 0 of the array (default 4096,
// 64 MiB; 16384: 256 MiB).
//   build/bench/short_rows_bench [A]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace {

int a_rows = 4096;       // dim 0 of the array
size_t shard_bytes = 0;  // bytes a device holds: a_rows / 2 * 64 * 16 floats

// One 64-byte run, streamed where SSE2 is there.
void CopyRun(char* t, const char* s) {
#if defined(__SSE2__)
  for (int b = 0; b < 64; b += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(t + b), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + b)));
#else
  std::memcpy(t, s, 64);
#endif
}

// Where run (sender s, its row a and dim-1 index 8t + j) lies in the sender,
// and where it goes in target t (device d = 2x + y holds x's dim-2 quarter
// and y's dim-0 half as a sender, dim-1 block d as a target).
const char* From(const std::vector<char*>& src, int s, int t, int a, int j) {
  return src[static_cast<size_t>(s)] + ((size_t(a) * 64 + 8 * size_t(t) + size_t(j)) * 16) * sizeof(float);
}
char* To(const std::vector<char*>& dst, int s, int t, int a, int j) {
  const int sx = s / 2, sy = s % 2;
  return dst[static_cast<size_t>(t)] +
         ((size_t(sy * a_rows / 2 + a) * 8 + size_t(j)) * 64 + size_t(sx) * 16) * sizeof(float);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) a_rows = std::atoi(argv[1]);
  if (a_rows < 2 || a_rows % 2 != 0 || a_rows > (1 << 20)) {
    std::fprintf(stderr, "A must be even, 2 to 2^20: %s\n", argv[1]);
    return 1;
  }
  shard_bytes = static_cast<size_t>(a_rows) / 2 * 64 * 16 * sizeof(float);
  std::vector<char*> src(8), dst(8);
  for (int i = 0; i < 8; ++i) {
    src[static_cast<size_t>(i)] = static_cast<char*>(std::aligned_alloc(4096, shard_bytes));
    dst[static_cast<size_t>(i)] = static_cast<char*>(std::aligned_alloc(4096, shard_bytes));
    std::memset(src[static_cast<size_t>(i)], i, shard_bytes);
    std::memset(dst[static_cast<size_t>(i)], 0, shard_bytes);
  }
  constexpr int kSlices = 128;  // the executor's: 512 KiB of copies each
  // Each order as a task per index, over `tasks` indices split between two threads.
  struct Order {
    const char* name;
    int tasks;
    std::function<void(int)> task;
  };
  const std::vector<Order> orders = {
      {"memcpy of the same bytes", 8, [&](int t) { std::memcpy(dst[size_t(t)], src[size_t(t)], shard_bytes); }},
      {"slices of each copy", kSlices,
       [&](int k) {
         const int rows = a_rows / 2 * 8, lo = rows * k / kSlices, hi = rows * (k + 1) / kSlices;
         for (int t = 0; t < 8; ++t)
           for (int s = 0; s < 8; ++s)
             for (int r = lo; r < hi; ++r) CopyRun(To(dst, s, t, r / 8, r % 8), From(src, s, t, r / 8, r % 8));
       }},
      {"one copy after another", 8,
       [&](int t) {
         for (int s = 0; s < 8; ++s)
           for (int a = 0; a < a_rows / 2; ++a)
             for (int j = 0; j < 8; ++j) CopyRun(To(dst, s, t, a, j), From(src, s, t, a, j));
       }},
      {"each target row whole, its four senders in turn", 8,
       [&](int t) {
         for (int row = 0; row < a_rows; ++row) {
           const int sy = row / (a_rows / 2), a = row % (a_rows / 2);
           for (int j = 0; j < 8; ++j)
             for (int sx = 0; sx < 4; ++sx) CopyRun(To(dst, 2 * sx + sy, t, a, j), From(src, 2 * sx + sy, t, a, j));
         }
       }},
      {"each source row whole, to its eight receivers in turn", 8,
       [&](int s) {
         for (int a = 0; a < a_rows / 2; ++a)
           for (int t = 0; t < 8; ++t)
             for (int j = 0; j < 8; ++j) CopyRun(To(dst, s, t, a, j), From(src, s, t, a, j));
       }},
  };
  for (const Order& o : orders) {
    std::vector<double> ms;
    for (int rep = 0; rep < 15; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      std::thread other([&] {
        for (int k = 0; k < o.tasks; k += 2) o.task(k);
      });
      for (int k = 1; k < o.tasks; k += 2) o.task(k);
      other.join();
#if defined(__SSE2__)
      _mm_sfence();
#endif
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%-50s %6.2f ms  %5.1f GB/s\n", o.name, ms[ms.size() / 2],
                8.0 * double(shard_bytes) / ms[ms.size() / 2] / 1e6);
  }
  for (int i = 0; i < 8; ++i) {
    std::free(src[static_cast<size_t>(i)]);
    std::free(dst[static_cast<size_t>(i)]);
  }
  return 0;
}
