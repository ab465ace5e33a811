// Random named shardings for property tests of collective plans: meshes of
// 1 to 16 devices over up to 3 axes (sizes 1 to 4, ids sometimes permuted),
// and specs that put each axis on a random dim, in a random order, or leave it
// unused (replication).
#ifndef RESHARD_TESTS_TESTING_RANDOM_NAMED_H_
#define RESHARD_TESTS_TESTING_RANDOM_NAMED_H_

#include <random>

#include "reshard/mesh.h"
#include "reshard/named_sharding.h"

namespace reshard::testing {

Mesh RandomNamedMesh(std::mt19937_64& rng);
NamedSharding RandomSpec(std::mt19937_64& rng, const Mesh& mesh, size_t rank);

}  // namespace reshard::testing

#endif  // RESHARD_TESTS_TESTING_RANDOM_NAMED_H_
