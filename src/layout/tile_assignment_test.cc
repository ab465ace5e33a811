#include "reshard/tile_assignment.h"

#include <gtest/gtest.h>

namespace reshard {
namespace {

TEST(TileAssignment, IotaExpandsLikeNumpy) {
  // arange(8).reshape(4,2).transpose(1,0).reshape(2,1,4)
  TileAssignment t = TileAssignment::Iota({2, 1, 4}, {4, 2}, {1, 0}).value();
  EXPECT_EQ(t.Devices(), (std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(t.ToString(), "[2,1,4]<=[4,2]T(1,0)");
}

TEST(TileAssignment, CanonicalizesAsXlaDoes) {
  struct Case {
    std::vector<int64_t> dims, reshape, perm;
    std::string text;
  } cases[] = {
      {{8}, {2, 2, 2}, {0, 1, 2}, "[8]<=[8]"},
      {{4, 2}, {2, 4}, {0, 1}, "[4,2]<=[8]"},
      {{1, 8, 1}, {8}, {}, "[1,8,1]<=[8]"},
      {{8, 8}, {2, 4, 8}, {2, 0, 1}, "[8,8]<=[8,8]T(1,0)"},   // merged run (0,1)
      {{2, 4}, {1, 4, 1, 2}, {3, 2, 1, 0}, "[2,4]<=[4,2]T(1,0)"},  // size-1 dims dropped
      {{4, 4}, {2, 2, 2, 2}, {3, 2, 1, 0}, "[4,4]<=[2,2,2,2]T(3,2,1,0)"},
  };
  for (const Case& c : cases) {
    TileAssignment t = TileAssignment::Iota(c.dims, c.reshape, c.perm).value();
    EXPECT_EQ(t.ToString(), c.text);
  }
  // Canonicalization never changes the devices.
  EXPECT_EQ(TileAssignment::Iota({8, 8}, {2, 4, 8}, {2, 0, 1})->Devices(),
            TileAssignment::Iota({8, 8}, {8, 8}, {1, 0})->Devices());
}

TEST(TileAssignment, RejectsBadInput) {
  EXPECT_FALSE(TileAssignment::Iota({2, 2}, {8}, {}).ok());          // 4 vs 8 devices
  EXPECT_FALSE(TileAssignment::Iota({4}, {2, 2}, {0, 0}).ok());      // not a permutation
  EXPECT_FALSE(TileAssignment::Iota({4}, {2, 2}, {0}).ok());         // rank mismatch
  EXPECT_FALSE(TileAssignment::Explicit({2, 2}, {0, 1, 2}).ok());    // too few ids
  EXPECT_FALSE(TileAssignment::Explicit({2}, {1, 1}).ok());          // repeated
  EXPECT_FALSE(TileAssignment::Explicit({0}, {}).ok());              // zero tiles
  EXPECT_FALSE(TileAssignment::Iota({int64_t{1} << 40, int64_t{1} << 40}, {1}, {}).ok());  // overflow
}

}  // namespace
}  // namespace reshard
