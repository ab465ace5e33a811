// Comm: one rank's view of a group of ranks that move bytes together, the
// per-rank backend interface (the role leveldb's Env plays for files). The
// step runner (rank_reshard.h) is written once over it: transport choice,
// grouping onto sub-groups, chunking and error agreement. A backend is one
// implementation of this class:
//   MPI        (mpi.h, MpiReshard): a duplicate of an MPI communicator;
//   threads    (thread_comm.h): N ranks as threads (or fibers) of one process, the
//              in-process fake every executor test runs through
//              (Transport::kRanks of the in-process executor);
//   NCCL       (not built): one more implementation, plus copy kernels
//              for device memory.
//
// Semantics are MPI's, in bytes: every collective call is made by every
// rank of the Comm, in the same order; point-to-point messages from one
// rank to another are matched in the order they were sent and received
// (one tag). Counts are int64; a backend whose calls take a narrower count
// says so in max_count() and the runner never asks for more in one call.
//
// Requests: Start* calls give back a request id (>= 0), or kNoRequest when
// the call completed at once; Wait* completes them and sets each completed
// one to kNoRequest. The bytes a Start* call reads or writes stay untouched
// by the caller until its request completes (other bytes of the same buffers
// are the caller's). After a failed Wait*, the requests it was given are
// undefined, and the Comm may only be destroyed.
//
// Errors are Status values of this rank only (Internal for a failed call);
// agreeing on them across ranks is the caller's job (AgreeStatus below).
// A Comm is used by one thread (or fiber) at a time.
#ifndef RESHARD_COMM_H_
#define RESHARD_COMM_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "reshard/device_program.h"
#include "reshard/dtype.h"
#include "reshard/layout.h"
#include "reshard/status.h"

namespace reshard {

inline constexpr int64_t kNoRequest = -1;

// A backend's prepared form of one step's messages as strided boxes read
// from the input buffer and written into the output buffer in place (MPI
// derived datatypes): no staging. See Comm::PrepareBoxes.
class BoxExchange {
 public:
  virtual ~BoxExchange() = default;
  // What the backend will carry out of and into this rank per run.
  virtual int64_t bytes_sent() const = 0;
  virtual int64_t bytes_received() const = 0;
  // Whether StartBoxes also makes the program's local copies (input to
  // output on this rank), interleaved with what arrives (threads: a target
  // row filled from every sender at once); else the caller makes them.
  virtual bool copies_local() const { return false; }
};

class Comm {
 public:
  enum class ReduceOp { kMin, kMax, kSum };

  virtual ~Comm() = default;
  virtual std::string_view name() const = 0;  // "mpi", "threads"
  // Whether every rank runs in this process, so that a caller can join
  // them all before it reads an output or reuses an input, and a rank's
  // error can end the others' waits (RankOptions::joined_by_caller):
  // threads, yes; separate processes (MPI), no.
  virtual bool ranks_in_process() const { return false; }
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The most bytes one message, or one count of a collective, may carry.
  virtual int64_t max_count() const { return std::numeric_limits<int64_t>::max(); }

  // Small blocking collectives for agreement. AllReduce reduces `values`
  // element-wise over the ranks, in place. AllGather: `all` holds size()
  // times mine.size() values, rank k's at k * mine.size(). Broadcast:
  // `bytes` (the same size on every rank) from `root` to every rank.
  virtual Status AllReduce(std::span<int64_t> values, ReduceOp op) = 0;
  virtual Status AllGather(std::span<const uint64_t> mine, std::span<uint64_t> all) = 0;
  virtual Status Broadcast(std::span<std::byte> bytes, int root) = 0;
  virtual Status Barrier() = 0;

  // Collective: the ranks of one `color` (>= 0) form a new Comm, ranked by
  // `key` (ties by rank here). color < 0: this rank joins none and gets null.
  // Example: 8 ranks, color = rank % 2, key = rank / 2: ranks 0,2,4,6 are
  // ranks 0..3 of one Comm, ranks 1,3,5,7 of another.
  virtual Result<std::unique_ptr<Comm>> Split(int color, int key) = 0;

  // All-to-all-v of bytes: to rank k send_counts[k] bytes from
  // send + send_displs[k]; from rank k recv_counts[k] bytes into
  // recv + recv_displs[k]. Arrays have size() entries; they may be read
  // until the request completes.
  virtual Status StartAlltoallv(const std::byte* send, std::span<const int64_t> send_counts,
                                std::span<const int64_t> send_displs, std::byte* recv,
                                std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                                int64_t& request) = 0;
  // All-gather-v: this rank's `bytes` bytes from `send` go to every rank;
  // rank k's land at recv + recv_displs[k] (recv_counts[k] bytes, this
  // rank's own slot included).
  virtual Status StartAllgatherv(const std::byte* send, int64_t bytes, std::byte* recv,
                                 std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                                 int64_t& request) = 0;
  // All-gather of equal chunks: every rank passes the same `bytes`; rank
  // k's land at recv + k * bytes (this rank's own slot included). What a
  // structured all-gather is (MPI_Allgather, ncclAllGather): of even shards,
  // or of uneven ones padded to the priced chunk.
  virtual Status StartAllgather(const std::byte* send, int64_t bytes, std::byte* recv, int64_t& request) = 0;
  // All-to-all of equal chunks: every rank passes the same `chunk`; to rank
  // k go the `chunk` bytes at send + k * chunk, from rank k come `chunk`
  // bytes into recv + k * chunk (this rank's own slot included). What a
  // structured all-to-all is (MPI_Alltoall; on NCCL, a group of sends and
  // receives of one size).
  virtual Status StartAlltoall(const std::byte* send, int64_t chunk, std::byte* recv, int64_t& request) = 0;
  // Reduce-scatter of equal chunks: every rank passes the same `chunk`
  // (bytes, whole elements of `dtype`), `dtype` and `op`; rank k's `recv`
  // gets the chunks at send + k * chunk of every rank combined element by
  // element by `op` (avg combines as sum: dividing is the caller's). The
  // arithmetic is the reduce kernel's (src/exec/reduce_kernel.h: integers
  // wrap, f16 and bf16 in f32 rounded after each combination); the order of
  // the combinations is the backend's (threads: ascending rank; MPI: its
  // algorithm's, ranks kept in order), so floats may round differently from
  // a part-order sum. What a structured reduce-scatter is
  // (MPI_Reduce_scatter_block, ncclReduceScatter).
  virtual Status StartReduceScatter(const std::byte* send, int64_t chunk, std::byte* recv, DType dtype,
                                    reshard::ReduceOp op, int64_t& request) = 0;
  // All-reduce: every rank passes the same `bytes` (whole elements of
  // `dtype`), `dtype` and `op`; every rank's `recv` (not `send`) gets every
  // rank's `send` combined element by element by `op` (avg as sum), with
  // StartReduceScatter's arithmetic and its rule on order (threads:
  // ascending rank; MPI: its algorithm's, ranks kept in order). What a
  // structured all-reduce is (MPI_Allreduce, ncclAllReduce).
  virtual Status StartAllReduce(const std::byte* send, int64_t bytes, std::byte* recv, DType dtype,
                                reshard::ReduceOp op, int64_t& request) = 0;
  virtual Status StartSend(const std::byte* data, int64_t bytes, int peer, int64_t& request) = 0;
  virtual Status StartRecv(std::byte* data, int64_t bytes, int peer, int64_t& request) = 0;
  // Completes at least one of `requests` when `block` (none needed when all
  // are kNoRequest), or those already done when not; appends the indices
  // completed to `done` and sets them to kNoRequest.
  virtual Status WaitSome(std::span<int64_t> requests, bool block, std::vector<int>& done) = 0;
  virtual Status WaitAll(std::span<int64_t> requests) = 0;
  Status Wait(int64_t& request) { return WaitAll(std::span<int64_t>(&request, 1)); }

  // Optional: one step's messages as in-place box messages (has_boxes();
  // NotSupported where the backend has none). MPI: derived datatypes and
  // MPI_Ialltoallw; threads: every message copied once, straight from its
  // sender's input into its receiver's output (thread_comm.h). REQUIRES:
  // `program` outlives the result. `program` is this rank's part of the step;
  // send_rank / recv_rank the peer rank of each of its messages.
  // Each message's bytes are in staged order (a pack's destination, an
  // unpack's source): op after op where the copies are in order
  // (StagedInOrder, copy_program.h), else run by run sorted by their
  // staged offsets.
  virtual bool has_boxes() const { return false; }
  // Whether box messages move each byte once, from the sender's input
  // straight into the receiver's output (shared memory: threads), where a
  // staged collective copies it three times (pack, transport, unpack); MPI's
  // datatypes are packed and unpacked by its transport, so no. The runner
  // then takes box messages for every step they can carry.
  virtual bool boxes_copy_once() const { return false; }
  virtual Result<std::unique_ptr<BoxExchange>> PrepareBoxes(const DeviceProgram& program, std::span<const int> send_rank,
                                                            std::span<const int> recv_rank);
  // When a box exchange is over for this rank (its request complete).
  // kEveryCopy: once every rank's copies are done, so that this rank's
  // output is whole and its input free. kOwnCopies: once this rank has done
  // its share, where the caller joins every rank before it reads an output
  // or reuses an input (RankOptions::joined_by_caller): threads then skip a
  // barrier. Every rank passes the same. Backends whose exchange completes
  // as a whole (MPI) treat both alike.
  enum class BoxesEnd { kEveryCopy, kOwnCopies };
  virtual Status StartBoxes(const BoxExchange& boxes, const std::byte* in, std::byte* out, BoxesEnd end,
                            int64_t& request);
};

// Every rank learns whether any rank failed, and all return the status of the
// lowest failing rank: "rank K: " before its message unless every rank failed
// with that same code and message (an error every rank shares names none).
// The one way errors leave a collective call, so no rank goes on to a
// collective the others skip. Collective.
Status AgreeStatus(Comm& comm, const Status& local);

// InvalidArgument on every rank unless every rank passes the same `hash` of
// what the ranks must share (`what`: "layouts or options"). It names the
// ranks that differ from the version most ranks hold ("rank 2's layouts or
// options differ from the others'"); where no version is held by more ranks
// than any other (two ranks that differ), rank 0 and the first rank that
// differs from it. Collective.
Status CheckSame(Comm& comm, uint64_t hash, std::string_view what);

}  // namespace reshard

#endif  // RESHARD_COMM_H_
