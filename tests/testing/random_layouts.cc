#include "testing/random_layouts.h"

#include <algorithm>
#include <numeric>

#include "reshard/dtensor.h"
#include "reshard/dtensor_text.h"
#include "reshard/named_sharding.h"
#include "reshard/named_text.h"

namespace reshard::testing {
namespace {

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A random named sharding: each mesh axis (or, for axes of size 4 and 8, each
// of its two sub-axes) goes to a random dim or stays replicated.
NamedSharding RandomNamed(std::mt19937_64& rng, int64_t rank, const Mesh& mesh, bool sub_axes, int64_t* replication) {
  struct Piece {
    AxisRef ref;
    int64_t size;
  };
  std::vector<Piece> pieces;
  for (int64_t a = 0; a < mesh.num_axes(); ++a) {
    const int64_t size = mesh.axes()[a].size;
    if (sub_axes && (size == 4 || size == 8) && Uniform(rng, 0, 1)) {
      pieces.push_back({AxisRef{a, 1, 2}, 2});
      pieces.push_back({AxisRef{a, 2, size / 2}, size / 2});
    } else {
      pieces.push_back({AxisRef{a, 1, 0}, size});
    }
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  std::vector<NamedSharding::Dim> dims(rank);
  *replication = 1;
  for (const Piece& p : pieces) {
    const int64_t d = rank == 0 ? -1 : Uniform(rng, -1, rank - 1);
    if (d < 0) { *replication *= p.size; continue; }
    dims[d].axes.push_back(p.ref);
  }
  return NamedSharding::Create(mesh, std::move(dims)).value();
}

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

std::vector<int64_t> RandomShape(std::mt19937_64& rng, int max_rank, int64_t max_elements) {
  while (true) {
    std::vector<int64_t> shape(Uniform(rng, 0, max_rank));
    int64_t n = 1;
    for (int64_t& e : shape) {
      e = Uniform(rng, 0, 100) < 3 ? 0 : Uniform(rng, 1, 12);
      n *= std::max<int64_t>(e, 1);
    }
    if (n <= max_elements) return shape;
  }
}

Mesh RandomMesh(std::mt19937_64& rng, int64_t first_id, int64_t max_devices) {
  static const char* kNames[] = {"x", "y", "z", "w"};
  static const int64_t kSizes[] = {1, 2, 2, 3, 4, 4, 8};
  while (true) {
    std::vector<Mesh::Axis> axes;
    int64_t n = 1;
    const int64_t count = Uniform(rng, 1, 4);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t s = kSizes[Uniform(rng, 0, 6)];
      axes.push_back({kNames[i], s});
      n *= s;
    }
    if (n > std::min<int64_t>(64, max_devices)) continue;
    std::vector<int64_t> ids(n);
    std::iota(ids.begin(), ids.end(), first_id);
    if (Uniform(rng, 0, 2) == 0) std::shuffle(ids.begin(), ids.end(), rng);
    return Mesh::Create(std::move(axes), std::move(ids)).value();
  }
}

RandomLayout RandomLayoutText(std::mt19937_64& rng, const std::vector<int64_t>& shape, const Mesh& mesh) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  RandomLayout out;
  out.mesh = mesh;
  switch (Uniform(rng, 0, 7)) {
    case 0: {  // JAX
      NamedSharding s = RandomNamed(rng, rank, mesh, false, &out.replication);
      out.text = PrintNamedText(NamedTextOf(s, NamedText::Syntax::kJax));
      out.notation = Notation::kJax;
      return out;
    }
    case 1: {  // Shardy, sub-axes, inline mesh or @mesh
      NamedSharding s = RandomNamed(rng, rank, mesh, true, &out.replication);
      NamedText t = NamedTextOf(s, NamedText::Syntax::kShardy, Uniform(rng, 0, 1) == 1);
      if (Uniform(rng, 0, 3) == 0 && !t.dims.empty()) t.dims[0].open = true;
      out.text = PrintNamedText(t);
      out.notation = Notation::kShardy;
      return out;
    }
    case 2: {  // HLO, as JAX would print it
      NamedSharding s = RandomNamed(rng, rank, mesh, true, &out.replication);
      out.text = s.ToHlo()->ToString();
      out.notation = Notation::kHlo;
      return out;
    }
    case 3: {  // DTensor
      std::vector<Placement> p(mesh.num_axes());
      for (int64_t a = 0; a < mesh.num_axes(); ++a) {
        if (rank == 0 || Uniform(rng, 0, 2) == 0) { out.replication *= mesh.axes()[a].size; continue; }
        p[a] = {Placement::Kind::kShard, Uniform(rng, 0, rank - 1)};
      }
      // Some tensor dims split right to left, as FSDP2 over tensor parallel does: each mesh
      // dim gets the product of the later mesh dims splitting the same dim as its
      // _StridedShard factor (the form DTensor itself writes; other factors are checked
      // against torch in tests/torch).
      for (int64_t d = 0; d < rank; ++d) {
        if (Uniform(rng, 0, 2) != 0) continue;
        int64_t later = 1;
        for (int64_t a = mesh.num_axes() - 1; a >= 0; --a) {
          if (p[a].kind != Placement::Kind::kShard || p[a].dim != d) continue;
          if (later > 1) p[a] = {Placement::Kind::kStridedShard, d, later};
          later *= mesh.axes()[a].size;
        }
      }
      out.text = PrintPlacements(p);
      out.notation = Notation::kDTensor;
      return out;
    }
    case 4: {  // block-cyclic over the mesh's devices
      std::vector<int64_t> block(rank), grid(rank, 1);
      int64_t n = mesh.num_devices();
      // Factor the device count over the dims.
      for (int64_t d = 0; d < rank; ++d) block[d] = Uniform(rng, 1, 4);
      for (int64_t f = 2; n > 1 && rank > 0;) {
        if (n % f) { ++f; continue; }
        grid[Uniform(rng, 0, rank - 1)] *= f;
        n /= f;
      }
      if (rank == 0 || n != 1) return RandomLayoutText(rng, shape, mesh);  // cannot spread: pick again
      out.text = "blockcyclic(block=[" + Join(block) + "], grid=[" + Join(grid) + "])";
      out.notation = Notation::kBlockCyclic;
      return out;
    }
    case 5: {  // maximal
      out.text = "{maximal device=" + std::to_string(mesh.device(Uniform(rng, 0, mesh.num_devices() - 1))) + "}";
      out.notation = Notation::kHlo;
      return out;
    }
    case 6: {  // HLO V1 with a random explicit device list
      std::vector<int64_t> ids = mesh.DeviceIds();
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<int64_t> dims(rank, 1);
      int64_t n = mesh.num_devices(), repl = 1;
      for (int64_t f = 2; n > 1;) {
        if (n % f) { ++f; continue; }
        const int64_t d = Uniform(rng, -1, rank - 1);
        if (d < 0) repl *= f; else dims[d] *= f;
        n /= f;
      }
      if (repl > 1) dims.push_back(repl);
      out.replication = repl;
      if (rank == 0 && repl == 1) return RandomLayoutText(rng, shape, mesh);
      out.text = "{devices=[" + Join(dims) + "]" + Join(ids) + (repl > 1 ? " last_tile_dim_replicate" : "") + "}";
      out.notation = Notation::kHlo;
      return out;
    }
    default: {  // HLO V3 (iota meshes only: V3 text carries no device ids) or replicated
      if (mesh.is_iota()) {
        NamedSharding s = RandomNamed(rng, rank, mesh, true, &out.replication);
        out.text = PrintNamedText(NamedTextOf(s, NamedText::Syntax::kHloV3));
        out.notation = Notation::kHloV3;
        return out;
      }
      out.text = "{replicated}";
      out.notation = Notation::kHlo;
      out.replication = mesh.num_devices();
      return out;
    }
  }
}

RandomLayout RandomPartialLayoutText(std::mt19937_64& rng, const std::vector<int64_t>& shape, const Mesh& mesh,
                                     int64_t* parts) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  RandomLayout out;
  out.mesh = mesh;
  *parts = 1;
  if (Uniform(rng, 0, 1) == 0) {  // DTensor
    static const char* kOps[] = {"sum", "avg", "max", "min"};
    const ReduceOp op = ParseReduceOp(kOps[Uniform(rng, 0, 3)]).value();
    std::vector<Placement> p(mesh.num_axes());
    for (int64_t a = 0; a < mesh.num_axes(); ++a) {
      const int64_t pick = Uniform(rng, 0, 2);
      if (pick == 0 && rank > 0) {
        p[a] = {Placement::Kind::kShard, Uniform(rng, 0, rank - 1)};
        continue;
      }
      out.replication *= mesh.axes()[a].size;
      if (pick == 1) {
        p[a] = {Placement::Kind::kPartial, 0, 1, op};
        *parts *= mesh.axes()[a].size;
      }
    }
    out.text = PrintPlacements(p);
    out.notation = Notation::kDTensor;
    return out;
  }
  // Named: the unused axes, some of them unreduced.
  int64_t unused = 1;
  NamedSharding s = RandomNamed(rng, rank, mesh, false, &unused);
  std::vector<bool> used(mesh.num_axes(), false);
  for (const NamedSharding::Dim& d : s.dims())
    for (const AxisRef& r : d.axes) used[r.axis] = true;
  std::vector<AxisRef> unreduced;
  for (int64_t a = 0; a < mesh.num_axes(); ++a)
    if (!used[a] && Uniform(rng, 0, 1) == 0) {
      unreduced.push_back(AxisRef{a, 1, 0});
      *parts *= mesh.axes()[a].size;
    }
  std::shuffle(unreduced.begin(), unreduced.end(), rng);
  s = NamedSharding::Create(mesh, s.dims(), {}, std::move(unreduced)).value();
  out.replication = unused;
  const int64_t form = Uniform(rng, 0, 2);
  if (form == 2 && !mesh.is_iota()) return RandomPartialLayoutText(rng, shape, mesh, parts);
  const NamedText::Syntax syntax = form == 0 ? NamedText::Syntax::kJax : form == 1 ? NamedText::Syntax::kShardy
                                                                                   : NamedText::Syntax::kHloV3;
  out.text = PrintNamedText(NamedTextOf(s, syntax));
  out.notation = form == 0 ? Notation::kJax : form == 1 ? Notation::kShardy : Notation::kHloV3;
  return out;
}

}  // namespace reshard::testing
