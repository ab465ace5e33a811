#include "reshard/collective_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace reshard {
namespace {

// DeviceValues holds one number, two (a bit a device says which) or a list,
// and reads as the plain per-device vector it stands for, whatever the
// order of Sets: random Sets from a pool of 1 to 4 values, each read back
// whole, with its Max and Sum, and uniform() only where all are equal.
TEST(DeviceValues, ReadsAsAPlainVectorInEveryForm) {
  std::mt19937_64 rng(1204);
  int two_values = 0, listed = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const size_t n = rng() % 40;
    const int64_t start = static_cast<int64_t>(rng() % 5) - 2;
    std::vector<int64_t> want(n, start);
    DeviceValues got = iter % 2 == 0 ? DeviceValues::Uniform(n, start) : DeviceValues::Each(want);
    std::vector<int64_t> pool(1 + rng() % 4);
    for (int64_t& v : pool) v = static_cast<int64_t>(rng() % 7) - 3;
    const size_t sets = n == 0 ? 0 : rng() % (2 * n + 1);
    for (size_t k = 0; k < sets; ++k) {
      const size_t i = rng() % n;
      const int64_t v = pool[rng() % pool.size()];
      want[i] = v;
      got.Set(i, v);
    }
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << "iter " << iter << " device " << i;
    EXPECT_EQ(got.Max(), n == 0 ? 0 : *std::max_element(want.begin(), want.end())) << "iter " << iter;
    EXPECT_EQ(got.Sum(), std::accumulate(want.begin(), want.end(), int64_t{0})) << "iter " << iter;
    if (got.uniform()) {
      EXPECT_TRUE(std::all_of(want.begin(), want.end(), [&](int64_t v) { return v == want[0]; }));
    }
    std::vector<int64_t> distinct = want;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    two_values += distinct.size() == 2;
    listed += distinct.size() > 2;
  }
  EXPECT_GT(two_values, 200);
  EXPECT_GT(listed, 200);
}

}  // namespace
}  // namespace reshard
