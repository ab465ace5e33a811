// The Comm over MPI: each call is the MPI call of the same name, with its
// requests and count arrays kept alive until they complete.
#include "reshard/mpi_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <limits>
#include <string>
#include <vector>

#include "exec/reduce_kernel.h"
#include "exec/row_walk.h"

namespace reshard {
namespace {

Status MpiCall(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Internal(fmt::format("{} failed: {}", what, std::string_view(text, static_cast<size_t>(len))));
}

bool Finalized() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// MPI's int arrays of a byte-count array; Internal where a value exceeds an int.
Status ToInts(std::span<const int64_t> values, std::vector<int>& out) {
  out.resize(values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    if (values[k] < 0 || values[k] > INT_MAX)
      return Status::Internal(fmt::format("a count or displacement of {} bytes exceeds an MPI int", values[k]));
    out[k] = static_cast<int>(values[k]);
  }
  return Status::Ok();
}

// Ops [begin, end) of `p` as one MPI datatype whose type map lists every
// run (a copy's contiguous bytes) in the order of the staged side (a pack's
// destination, an unpack's source), whatever the order of the ops: the
// message's bytes in order where its boxes interleave in the staged buffer
// (a block-cyclic message). Adjacent runs on both sides merge.
Result<MPI_Datatype> RunsType(const CopyProgram& p, int32_t begin, int32_t end, bool sending) {
  const std::vector<StagedRun> runs = StagedRuns(p, begin, end, sending);
  std::vector<int> lengths;
  std::vector<MPI_Aint> displs;
  for (size_t k = 0; k < runs.size(); ++k) {
    const StagedRun& r = runs[k];
    if (k > 0) {
      const StagedRun& q = runs[k - 1];
      if (q.staged + q.bytes == r.staged && displs.back() + lengths.back() == r.buffer &&
          static_cast<int64_t>(lengths.back()) + r.bytes <= INT_MAX) {
        lengths.back() += static_cast<int>(r.bytes);
        continue;
      }
    }
    if (r.bytes > INT_MAX) return Status::Internal("a copy run exceeds 2^31 bytes");
    lengths.push_back(static_cast<int>(r.bytes));
    displs.push_back(static_cast<MPI_Aint>(r.buffer));
  }
  if (lengths.size() > static_cast<size_t>(INT_MAX)) return Status::Internal("a message has more than 2^31 runs");
  MPI_Datatype message;
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(),
                                                           displs.data(), MPI_BYTE, &message),
                                  "MPI_Type_create_hindexed"));
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Type_commit(&message), "MPI_Type_commit"));
  return message;
}

// Ops [begin, end) of `p` (one message) as one MPI datatype over the buffer
// the ops address on the `sending` side (pack: their source; unpack: their
// destination). Its type map must list the bytes in the order the message
// carries them. Where the staged side is in order (StagedInOrder), op after
// op, each op's dims in the staged side's memory order (a pack op's are; an
// unpack op's are re-sorted by their source strides), is that order: one
// nested vector type per box. Elsewhere the runs, sorted (RunsType).
Result<MPI_Datatype> MessageType(const CopyProgram& p, int32_t begin, int32_t end, bool sending) {
  if (!StagedInOrder(p, begin, end, /*staged_is_dst=*/sending)) return RunsType(p, begin, end, sending);
  std::vector<MPI_Datatype> parts;
  std::vector<MPI_Aint> displs;
  auto free_parts = [&]() {
    for (MPI_Datatype& t : parts) MPI_Type_free(&t);
  };
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    std::vector<CopyDim> dims(p.dims.begin() + op.first_dim, p.dims.begin() + op.first_dim + op.num_dims);
    if (!sending)
      std::stable_sort(dims.begin(), dims.end(), [](const CopyDim& a, const CopyDim& b) { return a.src_stride > b.src_stride; });
    MPI_Datatype t;
    if (op.run_bytes > INT_MAX) {
      free_parts();
      return Status::Internal("a copy run exceeds 2^31 bytes");
    }
    MPI_Type_contiguous(static_cast<int>(op.run_bytes), MPI_BYTE, &t);
    for (size_t d = dims.size(); d-- > 0;) {
      MPI_Datatype outer;
      const int64_t stride = sending ? dims[d].src_stride : dims[d].dst_stride;
      MPI_Type_create_hvector(static_cast<int>(dims[d].count), 1, static_cast<MPI_Aint>(stride), t, &outer);
      MPI_Type_free(&t);
      t = outer;
    }
    parts.push_back(t);
    displs.push_back(static_cast<MPI_Aint>(sending ? op.src_offset : op.dst_offset));
  }
  std::vector<int> ones(parts.size(), 1);
  MPI_Datatype message;
  const int rc = MPI_Type_create_struct(static_cast<int>(parts.size()), ones.data(), displs.data(), parts.data(), &message);
  free_parts();  // the struct keeps what it needs
  RESHARD_RETURN_IF_ERROR(MpiCall(rc, "MPI_Type_create_struct"));
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Type_commit(&message), "MPI_Type_commit"));
  return message;
}

// MPI_Alltoallw's arrays: one datatype per message, count 1, displacement 0
// (the offsets are in the types); MPI_BYTE with count 0 for other ranks.
class MpiBoxes : public BoxExchange {
 public:
  explicit MpiBoxes(int size)
      : send_types(static_cast<size_t>(size), MPI_BYTE),
        recv_types(static_cast<size_t>(size), MPI_BYTE),
        send_counts(static_cast<size_t>(size), 0),
        recv_counts(static_cast<size_t>(size), 0),
        displs(static_cast<size_t>(size), 0) {}
  ~MpiBoxes() override {
    if (Finalized()) return;
    for (std::vector<MPI_Datatype>* types : {&send_types, &recv_types})
      for (MPI_Datatype& t : *types)
        if (t != MPI_BYTE) MPI_Type_free(&t);
  }
  int64_t bytes_sent() const override { return sent; }
  int64_t bytes_received() const override { return received; }

  std::vector<MPI_Datatype> send_types, recv_types;
  std::vector<int> send_counts, recv_counts, displs;
  int64_t sent = 0, received = 0;
};

// What MPI reduces with (StartReduceScatter, StartAllReduce): per DType a committed
// contiguous datatype of its element's bytes, and per ReduceOp a user op
// that combines through the reduce kernel, so MPI's element arithmetic is
// the other backends' (integers wrap, f16 and bf16 through f32; MPI has no
// predefined type for the latter). The ops are not commutative to MPI, so it
// keeps ranks in order, the lower ranks' operand first, as threads do; how
// it groups the combinations is its algorithm's. Made once per process, on
// first use (after MPI_Init), and left to MPI_Finalize.
class MpiReductions {
 public:
  static const MpiReductions& Get() {
    static const MpiReductions made;
    return made;
  }
  MPI_Datatype type(DType t) const { return types_[static_cast<size_t>(t)]; }
  MPI_Op op(ReduceOp o) const { return ops_[static_cast<size_t>(o)]; }
  Status status() const { return status_; }

 private:
  static constexpr size_t kTypes = static_cast<size_t>(DType::kC128) + 1;
  static constexpr size_t kOps = static_cast<size_t>(ReduceOp::kMin) + 1;

  MpiReductions() {
    types_.fill(MPI_DATATYPE_NULL);
    ops_.fill(MPI_OP_NULL);
    for (size_t t = 0; t < kTypes && status_.ok(); ++t) {
      status_ = MpiCall(MPI_Type_contiguous(static_cast<int>(ByteSize(static_cast<DType>(t))), MPI_BYTE, &types_[t]),
                        "MPI_Type_contiguous");
      if (status_.ok()) status_ = MpiCall(MPI_Type_commit(&types_[t]), "MPI_Type_commit");
    }
    MPI_User_function* fns[kOps] = {&Combine<ReduceOp::kSum>, &Combine<ReduceOp::kAvg>, &Combine<ReduceOp::kMax>,
                                    &Combine<ReduceOp::kMin>};
    for (size_t o = 0; o < kOps && status_.ok(); ++o)
      status_ = MpiCall(MPI_Op_create(fns[o], /*commute=*/0, &ops_[o]), "MPI_Op_create");
  }
  // inout = op(in, inout) (MPI's order: `in` holds the lower ranks'
  // values), `len` elements of the DType whose datatype `type` is.
  template <ReduceOp kOp>
  static void Combine(void* in, void* inout, int* len, MPI_Datatype* type) {
    const MpiReductions& r = Get();
    for (size_t t = 0; t < kTypes; ++t)
      if (r.types_[t] == *type) {
        const DType dtype = static_cast<DType>(t);
        CombineContiguous(static_cast<const std::byte*>(in), static_cast<std::byte*>(inout), *len * ByteSize(dtype),
                          dtype, kOp, /*src_first=*/true);
        return;
      }
  }

  std::array<MPI_Datatype, kTypes> types_;
  std::array<MPI_Op, kOps> ops_;
  Status status_ = Status::Ok();
};

class MpiComm : public Comm {
 public:
  // Takes ownership of `comm`.
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override {
    if (Finalized()) return;
    // Requests still pending (a run that failed midway): MPI may still read
    // their count arrays and write their buffers, and freeing a collective's
    // request is erroneous, so the table is left to them, on purpose.
    for (Pending& p : table_)
      if (p.request != MPI_REQUEST_NULL) {
        (void)new std::vector<Pending>(std::move(table_));
        break;
      }
    MPI_Comm_free(&comm_);  // deallocated once pending operations complete
  }

  std::string_view name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int64_t max_count() const override { return INT_MAX; }

  Status AllReduce(std::span<int64_t> values, ReduceOp op) override {
    const MPI_Op mop = op == ReduceOp::kMin ? MPI_MIN : op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
    return MpiCall(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_INT64_T, mop, comm_),
                   "MPI_Allreduce");
  }
  Status AllGather(std::span<const uint64_t> mine, std::span<uint64_t> all) override {
    return MpiCall(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, all.data(),
                                 static_cast<int>(mine.size()), MPI_UINT64_T, comm_),
                   "MPI_Allgather");
  }
  Status Broadcast(std::span<std::byte> bytes, int root) override {
    if (bytes.size() > INT_MAX) return Status::Internal("a broadcast exceeds an MPI int count");
    return MpiCall(MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  Status Barrier() override { return MpiCall(MPI_Barrier(comm_), "MPI_Barrier"); }

  Result<std::unique_ptr<Comm>> Split(int color, int key) override {
    MPI_Comm group = MPI_COMM_NULL;
    RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &group), "MPI_Comm_split"));
    if (group == MPI_COMM_NULL) return std::unique_ptr<Comm>();
    return std::unique_ptr<Comm>(std::make_unique<MpiComm>(group));
  }

  Status StartAlltoallv(const std::byte* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_displs,
                        std::byte* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_displs,
                        int64_t& request) override {
    Pending& p = Take(request);
    RESHARD_RETURN_IF_ERROR(Fill(p, {send_counts, send_displs, recv_counts, recv_displs}, request));
    return Started(MPI_Ialltoallv(send, p.ints[0].data(), p.ints[1].data(), MPI_BYTE, recv, p.ints[2].data(),
                                  p.ints[3].data(), MPI_BYTE, comm_, &p.request),
                   "MPI_Ialltoallv", request);
  }
  Status StartAllgatherv(const std::byte* send, int64_t bytes, std::byte* recv, std::span<const int64_t> recv_counts,
                         std::span<const int64_t> recv_displs, int64_t& request) override {
    if (bytes > INT_MAX) return Status::Internal("an all-gather's message exceeds an MPI int count");
    Pending& p = Take(request);
    RESHARD_RETURN_IF_ERROR(Fill(p, {recv_counts, recv_displs}, request));
    return Started(MPI_Iallgatherv(send, static_cast<int>(bytes), MPI_BYTE, recv, p.ints[0].data(), p.ints[1].data(),
                                   MPI_BYTE, comm_, &p.request),
                   "MPI_Iallgatherv", request);
  }
  Status StartAllgather(const std::byte* send, int64_t bytes, std::byte* recv, int64_t& request) override {
    if (bytes > INT_MAX) return Status::Internal("an all-gather's message exceeds an MPI int count");
    Pending& p = Take(request);
    return Started(MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE,
                                  comm_, &p.request),
                   "MPI_Iallgather", request);
  }
  Status StartAlltoall(const std::byte* send, int64_t chunk, std::byte* recv, int64_t& request) override {
    if (chunk > INT_MAX) return Status::Internal("an all-to-all's chunk exceeds an MPI int count");
    Pending& p = Take(request);
    return Started(MPI_Ialltoall(send, static_cast<int>(chunk), MPI_BYTE, recv, static_cast<int>(chunk), MPI_BYTE, comm_,
                                 &p.request),
                   "MPI_Ialltoall", request);
  }
  Status StartReduceScatter(const std::byte* send, int64_t chunk, std::byte* recv, DType dtype, reshard::ReduceOp op,
                            int64_t& request) override {
    RESHARD_ASSIGN_OR_RETURN(const int elements, ReducedElements(chunk, dtype, "a reduce-scatter's chunk"));
    const MpiReductions& r = MpiReductions::Get();
    Pending& p = Take(request);
    return Started(MPI_Ireduce_scatter_block(send, recv, elements, r.type(dtype), r.op(op), comm_, &p.request),
                   "MPI_Ireduce_scatter_block", request);
  }
  Status StartAllReduce(const std::byte* send, int64_t bytes, std::byte* recv, DType dtype, reshard::ReduceOp op,
                        int64_t& request) override {
    RESHARD_ASSIGN_OR_RETURN(const int elements, ReducedElements(bytes, dtype, "an all-reduce's buffer"));
    const MpiReductions& r = MpiReductions::Get();
    Pending& p = Take(request);
    return Started(MPI_Iallreduce(send, recv, elements, r.type(dtype), r.op(op), comm_, &p.request), "MPI_Iallreduce",
                   request);
  }
  Status StartSend(const std::byte* data, int64_t bytes, int peer, int64_t& request) override {
    if (bytes > INT_MAX) return Status::Internal("a message exceeds an MPI int count");
    Pending& p = Take(request);
    return Started(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm_, &p.request), "MPI_Isend", request);
  }
  Status StartRecv(std::byte* data, int64_t bytes, int peer, int64_t& request) override {
    if (bytes > INT_MAX) return Status::Internal("a message exceeds an MPI int count");
    Pending& p = Take(request);
    return Started(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm_, &p.request), "MPI_Irecv", request);
  }

  Status WaitSome(std::span<int64_t> requests, bool block, std::vector<int>& done) override {
    std::vector<MPI_Request> reqs(requests.size(), MPI_REQUEST_NULL);
    for (size_t k = 0; k < requests.size(); ++k)
      if (requests[k] != kNoRequest) reqs[k] = table_[static_cast<size_t>(requests[k])].request;
    std::vector<int> indices(requests.size());
    int count = 0;
    const int n = static_cast<int>(reqs.size());
    const Status waited =
        block ? MpiCall(MPI_Waitsome(n, reqs.data(), &count, indices.data(), MPI_STATUSES_IGNORE), "MPI_Waitsome")
              : MpiCall(MPI_Testsome(n, reqs.data(), &count, indices.data(), MPI_STATUSES_IGNORE), "MPI_Testsome");
    if (!waited.ok()) {
      Sync(requests, reqs);
      return waited;
    }
    if (count == MPI_UNDEFINED) return Status::Ok();
    for (int k = 0; k < count; ++k) {
      const size_t i = static_cast<size_t>(indices[static_cast<size_t>(k)]);
      Release(requests[i]);
      done.push_back(static_cast<int>(i));
    }
    return Status::Ok();
  }
  Status WaitAll(std::span<int64_t> requests) override {
    std::vector<MPI_Request> reqs(requests.size(), MPI_REQUEST_NULL);
    for (size_t k = 0; k < requests.size(); ++k)
      if (requests[k] != kNoRequest) reqs[k] = table_[static_cast<size_t>(requests[k])].request;
    const Status waited =
        MpiCall(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    if (!waited.ok()) {
      Sync(requests, reqs);
      return waited;
    }
    for (int64_t& r : requests)
      if (r != kNoRequest) Release(r);
    return Status::Ok();
  }

  bool has_boxes() const override { return true; }
  Result<std::unique_ptr<BoxExchange>> PrepareBoxes(const DeviceProgram& p, std::span<const int> send_rank,
                                                    std::span<const int> recv_rank) override {
    auto boxes = std::make_unique<MpiBoxes>(size_);
    for (size_t m = 0; m < send_rank.size(); ++m) {
      const size_t r = static_cast<size_t>(send_rank[m]);
      RESHARD_ASSIGN_OR_RETURN(boxes->send_types[r], MessageType(p.pack, p.pack_begin[m], p.pack_begin[m + 1], true));
      boxes->send_counts[r] = 1;
      int bytes = 0;
      MPI_Type_size(boxes->send_types[r], &bytes);
      boxes->sent += bytes;
    }
    for (size_t m = 0; m < recv_rank.size(); ++m) {
      const size_t r = static_cast<size_t>(recv_rank[m]);
      RESHARD_ASSIGN_OR_RETURN(boxes->recv_types[r], MessageType(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], false));
      boxes->recv_counts[r] = 1;
      int bytes = 0;
      MPI_Type_size(boxes->recv_types[r], &bytes);
      boxes->received += bytes;
    }
    return std::unique_ptr<BoxExchange>(std::move(boxes));
  }
  Status StartBoxes(const BoxExchange& x, const std::byte* in, std::byte* out, BoxesEnd, int64_t& request) override {
    const auto& b = static_cast<const MpiBoxes&>(x);
    Pending& p = Take(request);
    return Started(MPI_Ialltoallw(in, b.send_counts.data(), b.displs.data(), b.send_types.data(), out,
                                  b.recv_counts.data(), b.displs.data(), b.recv_types.data(), comm_, &p.request),
                   "MPI_Ialltoallw", request);
  }

 private:
  // A request in flight, and the int arrays MPI reads until it completes.
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> ints[4];
  };

  // After a failed wait, MPI has nulled the handles it completed in `reqs`:
  // the table follows, so that only pending requests stay held.
  void Sync(std::span<int64_t> requests, const std::vector<MPI_Request>& reqs) {
    for (size_t k = 0; k < requests.size(); ++k)
      if (requests[k] != kNoRequest) {
        table_[static_cast<size_t>(requests[k])].request = reqs[k];
        if (reqs[k] == MPI_REQUEST_NULL) Release(requests[k]);
      }
  }

  // The count of `bytes` of `dtype` a reduction call takes, once the
  // reduce ops are made (MpiReductions); Internal past an int count.
  static Result<int> ReducedElements(int64_t bytes, DType dtype, const char* what) {
    RESHARD_RETURN_IF_ERROR(MpiReductions::Get().status());
    const int64_t elements = bytes / ByteSize(dtype);
    if (elements > INT_MAX) return Status::Internal(std::string(what) + " exceeds an MPI int count");
    return static_cast<int>(elements);
  }
  // A free slot of the table; `request` names it.
  Pending& Take(int64_t& request) {
    if (free_.empty()) {
      free_.push_back(static_cast<int64_t>(table_.size()));
      table_.emplace_back();
    }
    request = free_.back();
    free_.pop_back();
    return table_[static_cast<size_t>(request)];
  }
  void Release(int64_t& request) {
    Pending& p = table_[static_cast<size_t>(request)];
    p.request = MPI_REQUEST_NULL;  // MPI completed it
    free_.push_back(request);
    request = kNoRequest;
  }
  Status Fill(Pending& p, std::initializer_list<std::span<const int64_t>> arrays, int64_t& request) {
    size_t k = 0;
    for (std::span<const int64_t> a : arrays) {
      Status s = ToInts(a, p.ints[k++]);
      if (!s.ok()) {
        free_.push_back(request);
        request = kNoRequest;
        return s;
      }
    }
    return Status::Ok();
  }
  // The MPI call that started `request`: on failure the slot goes back.
  Status Started(int rc, const char* what, int64_t& request) {
    if (rc != MPI_SUCCESS) {
      table_[static_cast<size_t>(request)].request = MPI_REQUEST_NULL;
      free_.push_back(request);
      request = kNoRequest;
    }
    return MpiCall(rc, what);
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<Pending> table_;
  std::vector<int64_t> free_;
};

}  // namespace

Result<std::unique_ptr<Comm>> MakeMpiComm(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return Status::InvalidArgument("the communicator is MPI_COMM_NULL");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return Status::InvalidArgument("MPI is not initialized (call MPI_Init first)");
  MPI_Comm dup = MPI_COMM_NULL;
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup"));
  return std::unique_ptr<Comm>(std::make_unique<MpiComm>(dup));
}

}  // namespace reshard
