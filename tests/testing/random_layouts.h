// Random layouts for property tests: every notation and feature of the
// layout model (uneven extents, replication, sub-axes, permuted and offset
// device ids, DTensor nesting, block-cyclic, maximal, rank 0), as text that
// ParseLayout reads, with the mesh it needs and the replication count every
// element must have.
#ifndef RESHARD_TESTS_TESTING_RANDOM_LAYOUTS_H_
#define RESHARD_TESTS_TESTING_RANDOM_LAYOUTS_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "reshard/mesh.h"
#include "reshard/notation.h"

namespace reshard::testing {

struct RandomLayout {
  std::string text;
  Notation notation;
  std::optional<Mesh> mesh;
  int64_t replication = 1;  // devices holding each element
};

// A shape of rank 0..max_rank with at most max_elements elements; extents may be 0.
std::vector<int64_t> RandomShape(std::mt19937_64& rng, int max_rank, int64_t max_elements);

// A random mesh of 1..max_devices devices (at most 64). first_id offsets the
// ids (other device sets).
Mesh RandomMesh(std::mt19937_64& rng, int64_t first_id = 0, int64_t max_devices = 64);

// A random layout of `shape`, in a random notation, over `mesh`.
RandomLayout RandomLayoutText(std::mt19937_64& rng, const std::vector<int64_t>& shape, const Mesh& mesh);

// A random layout with a pending reduction over some of `mesh`'s unused
// axes (none where every axis splits the array): DTensor Partial with a
// random op, or JAX, Shardy or HLO V3 unreduced axes (sums). `parts` gets
// the product of the partial axes' sizes; replication counts every holder.
RandomLayout RandomPartialLayoutText(std::mt19937_64& rng, const std::vector<int64_t>& shape, const Mesh& mesh,
                                     int64_t* parts);

}  // namespace reshard::testing

#endif  // RESHARD_TESTS_TESTING_RANDOM_LAYOUTS_H_
