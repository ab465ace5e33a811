// Mesh groups: the one definition of which positions run a collective
// together and in what member order (planner, emitters, simulator, MPI).
#include "reshard/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace reshard {
namespace {

TEST(MeshGroups, CanonicalMeshGroupsAsXlaReplicaGroups) {
  const Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}}).value();  // device 2x + y
  // Over y: {0,1},{2,3},...; over x: {0,2,4,6},{1,3,5,7}; over (y, x): y major.
  EXPECT_EQ(mesh.GroupMembers(3, {1}), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(mesh.GroupMembers(3, {0}), (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(mesh.GroupMembers(3, {0, 1}), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(mesh.GroupMembers(3, {1, 0}), (std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(mesh.MemberIndex(3, {1, 0}), 5);  // y=1, x=1: 1 * 4 + 1
  EXPECT_EQ(mesh.GroupOf(7, {1}), 6);
  EXPECT_EQ(mesh.GroupSize({}), 1);
  EXPECT_EQ(mesh.GroupMembers(5, {}), (std::vector<int64_t>{5}));
}

// Over random meshes and axis lists: groups partition the positions; a
// position sits at its MemberIndex in its group's members; members share
// GroupOf, which is the first of them; and they differ only on the group axes.
TEST(MeshGroups, RandomMeshesPartitionAndAgree) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<Mesh::Axis> axes;
    const int rank = 1 + static_cast<int>(rng() % 4);
    for (int a = 0; a < rank; ++a) axes.push_back({std::string(1, static_cast<char>('a' + a)), 1 + static_cast<int64_t>(rng() % 4)});
    const Mesh mesh = Mesh::Create(axes).value();
    std::vector<int32_t> all(rank);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    const std::vector<int32_t> group(all.begin(), all.begin() + static_cast<int>(rng() % (rank + 1)));
    std::set<int64_t> seen;
    for (int64_t pos = 0; pos < mesh.num_devices(); ++pos) {
      const std::vector<int64_t> members = mesh.GroupMembers(pos, group);
      ASSERT_EQ(static_cast<int64_t>(members.size()), mesh.GroupSize(group));
      ASSERT_EQ(members[static_cast<size_t>(mesh.MemberIndex(pos, group))], pos);
      ASSERT_EQ(members.front(), mesh.GroupOf(pos, group));
      for (int64_t m : members) {
        ASSERT_EQ(mesh.GroupOf(m, group), mesh.GroupOf(pos, group));
        for (int32_t a = 0; a < rank; ++a) {
          if (std::find(group.begin(), group.end(), a) == group.end()) {
            ASSERT_EQ(mesh.Coordinate(m, a), mesh.Coordinate(pos, a));
          }
        }
      }
      if (mesh.GroupOf(pos, group) == pos) seen.insert(members.begin(), members.end());
    }
    ASSERT_EQ(static_cast<int64_t>(seen.size()), mesh.num_devices());
  }
}

TEST(MeshPositions, InvertsDeviceForIotaDenseAndSparseIds) {
  const Mesh iota = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  const Mesh dense = Mesh::Create({{"x", 2}, {"y", 2}}, {3, 1, 0, 2}).value();
  const Mesh sparse = Mesh::Create({{"x", 3}}, {1000000007, 5, 123456789}).value();
  for (const Mesh* m : {&iota, &dense, &sparse}) {
    const MeshPositions positions(*m);
    for (int64_t p = 0; p < m->num_devices(); ++p) EXPECT_EQ(positions.Of(m->device(p)), p) << m->ToString();
    EXPECT_EQ(positions.Of(-1), -1);
    EXPECT_EQ(positions.Of(4), m == &iota ? 4 : -1);
    EXPECT_EQ(positions.Of(8), -1);
    EXPECT_EQ(positions.Of(int64_t{1} << 40), -1);
  }
}

// Bad id lists name their first bad entry, in list order, whichever kind
// it is; HasDevices compares a mesh's ids with a sorted list.
TEST(Mesh, IdErrorsNameTheFirstBadEntryAndHasDevicesCompares) {
  struct Case {
    std::vector<int64_t> ids;
    std::string message;  // "" where valid
  } cases[] = {
      {{3, 3, -1, 0}, "device id 3 is repeated (entry 2)"},
      {{1, -1, 1, 0}, "device id -1 (entry 2) is negative"},
      {{2, 0, 1, 2}, "device id 2 is repeated (entry 4)"},
      {{-5, 0, 1, 2}, "device id -5 (entry 1) is negative"},
      {{3, 1, 2, 0}, ""},
      {{0, 1, 2, 3}, ""},
  };
  for (const Case& c : cases) {
    Result<Mesh> m = Mesh::Create({{"x", 4}}, c.ids);
    if (c.message.empty()) {
      ASSERT_TRUE(m.ok()) << m.status();
      std::vector<int64_t> sorted = c.ids;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_TRUE(m->HasDevices(sorted));
      EXPECT_FALSE(m->HasDevices(std::vector<int64_t>{0, 1, 2}));
      EXPECT_FALSE(m->HasDevices(std::vector<int64_t>{0, 1, 2, 4}));
    } else {
      ASSERT_FALSE(m.ok());
      EXPECT_EQ(m.status().message(), c.message);
    }
  }
  const Mesh sparse = Mesh::Create({{"x", 2}}, {7, 3}).value();
  EXPECT_TRUE(sparse.HasDevices(std::vector<int64_t>{3, 7}));
  EXPECT_FALSE(sparse.HasDevices(std::vector<int64_t>{0, 1}));
}

}  // namespace
}  // namespace reshard
