// The MPI backend against its baselines (docs/benchmarks.md, "MPI backend
// (8 ranks)"). Under mpirun, with an even number of ranks; rank 0 prints a
// markdown table. For each case and array size it times, best of N runs, each
// after a barrier, the slowest rank:
//   ours       MpiReshard::Execute with each transport (auto, alltoallv, p2p, alltoallw);
//   floor      one raw MPI_Alltoallv of exactly the plan's per-pair byte counts
//              on buffers packed beforehand (no packing or unpacking);
//   remat      full rematerialization: MPI_Allgatherv of every rank's source
//              shard into a whole-array buffer on every rank, then the slice of
//              the rank's target part out of it.
// Ours and remat are checked element by element (CheckTags) on every rank;
// the exit status is 1 when any check fails anywhere.
//
//   mpirun -np 8 build/bench/mpi_bench [--sizes 1024,65536,1048576] [--smoke]
// --sizes: array sizes in KiB, powers of two from 64; --smoke: 64 KiB, two runs.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/device_program.h"
#include "reshard/exchange.h"
#include "exec/exec_checker.h"
#include "mpi_harness.h"
#include "reshard/mpi.h"
#include "reshard/notation.h"

namespace reshard {
namespace {

using namespace bench;  // rank, ranks, Die, Must, AllTrue, SumOverRanks, Slowest, BestOf

struct Case {
  std::string name, from, to;
  std::vector<int64_t> shape;
};

// The cases at `bytes` of f32 (a power of two, at least 64 KiB) over the run's
// ranks: the canonical reshard on mesh x=ranks/2, y=2 (device 2x+y), rows to
// columns, and ScaLAPACK-style block-cyclic to block-cyclic on the transposed
// process grid.
std::vector<Case> Cases(int64_t bytes) {
  const int64_t elements = bytes / 4, x = ranks / 2, n = ranks;
  const int bits = std::countr_zero(static_cast<uint64_t>(elements));
  const int64_t rows = int64_t{1} << ((bits + 1) / 2), cols = elements / rows;
  int64_t p = 1;  // process grid p x q, as square as the ranks allow
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) p = d;
  const int64_t q = n / p;
  return {
      {"canonical",
       fmt::format("{{devices=[2,1,{}]<=[{},2]T(1,0)}}", x, x),
       fmt::format("{{devices=[1,{},1]<=[{}]}}", n, n),
       {elements / (64 * 64), 64, 64}},
      {"rows to columns",
       fmt::format("{{devices=[{},1]<=[{}]}}", n, n),
       fmt::format("{{devices=[1,{}]<=[{}]}}", n, n),
       {rows, cols}},
      {"block-cyclic",
       fmt::format("blockcyclic(block=[64,64], grid=[{},{}])", p, q),
       fmt::format("blockcyclic(block=[128,128], grid=[{},{}])", q, p),
       {rows, cols}},
  };
}

// Where every source element lies in the gathered buffer (every rank's
// source shard, rank after rank), by dim, so that slicing a target box out of
// it takes one memcpy per run of a row within one source cell.
class GatheredIndex {
 public:
  GatheredIndex(const Layout& source, const std::vector<int64_t>& shard_offset) : rank_(source.rank()) {
    coord_.resize(static_cast<size_t>(rank_));
    offset_.resize(static_cast<size_t>(rank_));
    for (int64_t d = 0; d < rank_; ++d) {
      const DimGrid& g = source.dim(d);
      for (size_t k = 0; k + 1 < g.cuts.size(); ++k)
        for (int64_t i = g.cuts[k]; i < g.cuts[k + 1]; ++i) {
          coord_[d].push_back(g.cell_tile[k]);
          offset_[d].push_back(source.CellOffset(d, static_cast<int64_t>(k)) + i - g.cuts[k]);
          if (d + 1 == rank_) cell_end_.push_back(g.cuts[k + 1]);
        }
    }
    tile_stride_.assign(static_cast<size_t>(rank_), 1);
    for (int64_t d = rank_ - 2; d >= 0; --d) tile_stride_[d] = tile_stride_[d + 1] * source.dim(d + 1).tiles;
    for (int64_t t = 0; t < source.num_tiles(); ++t) {
      const std::span<const int64_t> holders = source.Holders(t);
      base_.push_back(holders.empty() ? -1 : shard_offset[static_cast<size_t>(holders.front())]);
      const std::vector<int64_t> strides =
          RowMajorStrides(holders.empty() ? std::vector<int64_t>(rank_, 0) : source.LocalShape(holders.front()));
      strides_.insert(strides_.end(), strides.begin(), strides.end());
    }
  }

  // Copies `device`'s part of `target` out of the gathered array into its
  // tight row-major local buffer.
  void Slice(const std::byte* gathered, const Layout& target, int64_t device, std::byte* out) const {
    const int64_t eb = target.element_bytes(), last = rank_ - 1;
    const std::vector<Box> boxes = target.DeviceBoxes(device);
    const std::vector<std::vector<int64_t>> origins = target.DeviceBoxOrigins(device);
    const std::vector<int64_t> out_strides = RowMajorStrides(target.LocalShape(device));
    std::vector<int64_t> idx(static_cast<size_t>(rank_));
    for (size_t b = 0; b < boxes.size(); ++b) {
      const Box& box = boxes[b];
      if (box.volume() == 0) continue;
      for (int64_t d = 0; d < rank_; ++d) idx[d] = box.dims[d].lo;
      const Interval row = box.dims[last];
      while (true) {
        int64_t tile_part = 0, dst = (origins[b][last] - row.lo) * out_strides[last];
        for (int64_t d = 0; d < last; ++d) {
          tile_part += coord_[d][idx[d]] * tile_stride_[d];
          dst += (origins[b][d] + idx[d] - box.dims[d].lo) * out_strides[d];
        }
        for (int64_t i = row.lo; i < row.hi;) {
          const int64_t end = std::min(row.hi, cell_end_[i]), tile = tile_part + coord_[last][i];
          const int64_t* s = &strides_[static_cast<size_t>(tile * rank_)];
          int64_t src = base_[tile] + offset_[last][i] * s[last];
          for (int64_t d = 0; d < last; ++d) src += offset_[d][idx[d]] * s[d];
          std::memcpy(out + (dst + i) * eb, gathered + src * eb, static_cast<size_t>((end - i) * eb));
          i = end;
        }
        int64_t d = last - 1;  // the next row: an odometer over the outer dims
        for (; d >= 0 && ++idx[d] == box.dims[d].hi; --d) idx[d] = box.dims[d].lo;
        if (d < 0) break;
      }
    }
  }

 private:
  static std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
    std::vector<int64_t> s(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
    return s;
  }

  int64_t rank_;
  std::vector<std::vector<int32_t>> coord_;   // [dim][global index]: the source tile coordinate
  std::vector<std::vector<int64_t>> offset_;  // [dim][global index]: the offset in that tile
  std::vector<int64_t> cell_end_;             // [global index of the last dim]: where its cell ends
  std::vector<int64_t> tile_stride_;          // row-major over the tile grid
  std::vector<int64_t> base_;                 // per tile: its holder's shard in the gathered buffer (elements)
  std::vector<int64_t> strides_;              // per tile, rank_ element strides of its holder's buffer
};

int64_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("MemAvailable:")) return std::stoll(line.substr(13)) * 1024;  // "MemAvailable: <n> kB"
  return 0;
}

struct Row {
  std::string name, shape;
  int64_t bytes = 0;
  std::string auto_transport;
  double ours[4] = {};  // auto, alltoallv, p2p, alltoallw (derived datatypes)
  std::string alltoallw_ran;  // what the alltoallw request ran (steps whose runs average under 64 B fall back)
  double floor = 0;
  std::optional<double> remat;                // unset: skipped, it does not fit
  int64_t ours_volume = 0, remat_volume = 0;  // bytes received, all ranks
  bool verified = true;
};

Row RunCase(const Case& c, int64_t bytes, int repeats) {
  const Layout source = Must(ParseLayout(c.from, c.shape, DType::kF32, std::nullopt), c.from).layout;
  const Layout target = Must(ParseLayout(c.to, c.shape, DType::kF32, std::nullopt), c.to).layout;
  Row row;
  row.name = c.name;
  row.bytes = bytes;
  std::vector<std::byte> src(static_cast<size_t>(source.LocalBytes(rank))),
      dst(static_cast<size_t>(target.LocalBytes(rank)));
  FillTags(source, rank, src);
  bool ok = true;

  const MpiTransport transports[4] = {MpiTransport::kAuto, MpiTransport::kAlltoallv, MpiTransport::kPointToPoint,
                                      MpiTransport::kDatatypes};
  for (int t = 0; t < 4; ++t) {
    MpiOptions o;
    o.transport = transports[t];
    MpiReshard r = Must(MpiReshard::Create(MPI_COMM_WORLD, source, target, o), "MpiReshard::Create");
    if (t == 0) row.auto_transport = r.step_transports().front();
    if (t == 3) row.alltoallw_ran = r.step_transports().front();
    std::fill(dst.begin(), dst.end(), std::byte{0});
    MpiRunStats stats;
    row.ours[t] = BestOf(repeats, [&] { stats = Must(r.Execute(src, dst), "Execute"); });
    row.ours_volume = SumOverRanks(stats.bytes_received);
    const TagCheck check = CheckTags(target, rank, dst);
    if (check.mismatches != 0) {
      fmt::print(stderr, "rank {}: {} at {} B, {}: {}\n", rank, c.name, bytes, MpiTransportName(transports[t]),
                 check.first_problem);
      ok = false;
    }
  }

  {
    AlltoallvFloor floor = MakeAlltoallvFloor(source, target);
    if (SumOverRanks(floor.recv_bytes) != row.ours_volume) Die("the floor's byte counts are not the plan's");
    row.floor = BestOf(repeats, [&] { floor.Run(); });
  }

  std::vector<int> counts(ranks), displs(ranks);
  std::vector<int64_t> shard_offset(ranks);  // elements
  int64_t total = 0;
  for (int k = 0; k < ranks; ++k) {
    shard_offset[k] = total / source.element_bytes();
    counts[k] = static_cast<int>(source.LocalBytes(k));
    total += source.LocalBytes(k);
  }
  for (int k = 1; k < ranks; ++k) displs[k] = displs[k - 1] + counts[k - 1];
  row.remat_volume = (ranks - 1) * total;
  // Every rank holds the whole array at once, on one machine here: room for
  // all of them, with a tenth to spare, or the baseline is skipped.
  int64_t available = MemAvailableBytes();
  MPI_Bcast(&available, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (total <= std::numeric_limits<int>::max() && available > ranks * total / 10 * 11) {
    const GatheredIndex index(source, shard_offset);
    std::vector<std::byte> whole(static_cast<size_t>(total));
    std::fill(dst.begin(), dst.end(), std::byte{0});
    row.remat = BestOf(repeats, [&] {
      MPI_Allgatherv(src.data(), counts[rank], MPI_BYTE, whole.data(), counts.data(), displs.data(), MPI_BYTE,
                     MPI_COMM_WORLD);
      index.Slice(whole.data(), target, rank, dst.data());
    });
    const TagCheck check = CheckTags(target, rank, dst);
    if (check.mismatches != 0) {
      fmt::print(stderr, "rank {}: {} at {} B, remat: {}\n", rank, c.name, bytes, check.first_problem);
      ok = false;
    }
  } else if (rank == 0) {
    fmt::print(stderr, "{} at {} B: remat skipped: it needs {} ranks x {} B ({} B available), each below 2^31\n",
               c.name, bytes, ranks, total, available);
  }
  row.verified = AllTrue(ok);
  return row;
}

std::string Size(int64_t bytes) {
  return bytes >= (int64_t{1} << 30)   ? fmt::format("{} GiB", bytes >> 30)
         : bytes >= (int64_t{1} << 20) ? fmt::format("{} MiB", bytes >> 20)
                                       : fmt::format("{} KiB", bytes >> 10);
}

int Main(int argc, char** argv) {
  std::vector<int64_t> sizes = {int64_t{1} << 20, int64_t{64} << 20, int64_t{1} << 30};
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--smoke") {
      smoke = true;
      sizes = {int64_t{64} << 10};
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (std::string_view s = argv[++i]; !s.empty();) {
        const size_t comma = std::min(s.find(','), s.size());
        sizes.push_back(std::stoll(std::string(s.substr(0, comma))) << 10);
        s.remove_prefix(std::min(comma + 1, s.size()));
      }
    } else {
      Die(fmt::format("unknown argument {} (usage: mpi_bench [--sizes KiB,KiB,...] [--smoke])", a));
    }
  }
  if (ranks % 2 != 0) Die(fmt::format("needs an even number of ranks, not {}", ranks));
  for (int64_t s : sizes)
    if (s < (int64_t{64} << 10) || std::popcount(static_cast<uint64_t>(s)) != 1)
      Die(fmt::format("size {} B: sizes are powers of two from 64 KiB", s));

  std::vector<Row> rows;
  for (int64_t bytes : sizes) {
    // Fewer runs where one run takes seconds.
    const int repeats = smoke ? 2 : bytes <= (int64_t{4} << 20) ? 20 : bytes <= (int64_t{128} << 20) ? 10 : 3;
    for (const Case& c : Cases(bytes)) {
      if (rank == 0 && bytes == sizes.front()) fmt::print("{}: {} -> {}\n", c.name, c.from, c.to);
      rows.push_back(RunCase(c, bytes, repeats));
      rows.back().shape = fmt::format("f32[{}]", fmt::join(c.shape, ","));
    }
  }
  bool verified = true;
  if (rank == 0) {
    fmt::print("\n{} ranks; seconds: best of N runs, slowest rank\n\n", ranks);
    fmt::print(
        "| case | size | shape | ours (auto) s | alltoallv s | p2p s | alltoallw s | floor s | remat s | ours / floor "
        "| best of ours / floor | remat / ours | volume remat / ours | verified |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const Row& r : rows) {
    verified = verified && r.verified;
    if (rank != 0) continue;
    const double volume = static_cast<double>(r.remat_volume) / static_cast<double>(r.ours_volume);
    const double best = std::min({r.ours[0], r.ours[1], r.ours[2], r.ours[3]});
    fmt::print("| {} | {} | {} | {:.4g} ({}) | {:.4g} | {:.4g} | {:.4g}{} | {:.4g} | {} | {:.2f} | {:.2f} | {} | {:.1f} | {} |\n",
               r.name, Size(r.bytes), r.shape, r.ours[0], r.auto_transport, r.ours[1], r.ours[2], r.ours[3],
               r.alltoallw_ran == "alltoallw" ? "" : fmt::format(" (ran {})", r.alltoallw_ran), r.floor,
               r.remat ? fmt::format("{:.4g}", *r.remat) : "skipped", r.ours[0] / r.floor, best / r.floor,
               r.remat ? fmt::format("{:.2f}", *r.remat / r.ours[0]) : "", volume, r.verified ? "yes" : "NO");
  }
  return verified ? 0 : 1;
}

}  // namespace
}  // namespace reshard

int main(int argc, char** argv) { return reshard::bench::RunUnderMpi(argc, argv, reshard::Main); }
