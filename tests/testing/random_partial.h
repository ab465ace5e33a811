// Random pairs of layouts from partial sums for property tests: a random
// named mesh (random_named.h), a source spec whose unused axes hold its
// parts (each with probability 2/3) under a random op, and a random target
// spec; half the shapes even (extents multiples of the device count), half
// uneven; f32 or s32.
#ifndef RESHARD_TESTS_TESTING_RANDOM_PARTIAL_H_
#define RESHARD_TESTS_TESTING_RANDOM_PARTIAL_H_

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/named_sharding.h"

namespace reshard::testing {

struct PartialPair {
  Mesh mesh;
  std::vector<int64_t> shape;
  Layout source, target;  // the source partial, the target not (or, drawn so, partial)
  std::string text;       // the pair as `reshard` flags
};

// One draw; nullopt where the source came out with no parts (draw again).
// With `partial_target`, the target also has unreduced axes (a random subset
// of those its spec leaves unused, under the source's op or, half the time,
// a random one), and a third of the sources are their spec with no
// reduction; nullopt where the target came out with no parts or equal to the
// source.
std::optional<PartialPair> DrawPartialPair(std::mt19937_64& rng, bool partial_target = false);

// A pair from partial sums into partial sums over the same mesh axes and op
// (the parts numbered alike): a random source spec with a random subset of
// its unused axes unreduced, under a random op, and a random target spec
// with those axes taken out of its dims and unreduced, under the same op.
// nullopt where the source came out with no parts or the two are equal.
std::optional<PartialPair> DrawSamePartsPair(std::mt19937_64& rng);

// A pair from partial sums into partial sums over some of the source's
// partial axes, under one op (sum, max or min): a random source spec with
// two or more of its unused axes unreduced, a random nonempty strict subset
// of them kept unreduced in the target, taken out of its random spec's
// dims; in three pairs of four the others (dropped) go on the end of one
// of its dims, in a random order, and nowhere else. nullopt where the draw
// does not make such a pair.
std::optional<PartialPair> DrawFewerPartsPair(std::mt19937_64& rng);

// `spec` with a random subset of its unused mesh axes (each with
// probability 2/3) unreduced.
NamedSharding WithUnreducedAxes(std::mt19937_64& rng, const Mesh& mesh, const NamedSharding& spec);

// `l` with another element type (and op, where given): the same grid, devices and parts.
Layout Retyped(const Layout& l, DType dtype, std::optional<ReduceOp> op = std::nullopt);

}  // namespace reshard::testing

#endif  // RESHARD_TESTS_TESTING_RANDOM_PARTIAL_H_
