// Box messages for threads as ranks (thread_comm.h): a step's messages
// described as walks over the rank's own buffers, which are paired, every
// sender's with its receiver's, into copies straight from the senders'
// inputs into the receivers' outputs: what MPI's derived datatypes move,
// in one copy as shared memory allows (Comm::PrepareBoxes, StartBoxes).
//
// Per message: its peer rank and how to walk its bytes in staged order in
// the rank's own buffer. Where its copies are in order (StagedInOrder,
// copy_program.h), op after op over the program's own copies, with no list
// (as MPI's nested vector types); elsewhere (block-cyclic boxes interleaved
// in the staged order) a list of its runs sorted by staged offset, adjacent
// runs merged (as MPI's hindexed types). One list of messages per side,
// sorted by peer: no array over every rank of the group.
//
// The result keeps pointers into the program's copies: the program must
// outlive it. Immutable once prepared (but its run(), which the Comm keeps
// under its lock); several ranks read a sender's at once.
#ifndef RESHARD_SRC_EXEC_THREAD_BOXES_H_
#define RESHARD_SRC_EXEC_THREAD_BOXES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "exec/copy_schedule.h"
#include "reshard/comm.h"
#include "reshard/copy_program.h"
#include "reshard/device_program.h"
#include "reshard/status.h"

namespace reshard {

// One contiguous run of a box message: `bytes` bytes at `staged` from the
// start of the message (its place in the bytes the message carries) and at
// `at` in the rank's input (sending) or output (receiving) buffer.
struct BoxRun {
  int64_t staged, at, bytes;
};

// One box exchange of every rank of a Comm as copies straight from each
// sender's input into its receiver's output: each message's two walks
// paired, the pieces folded back into boxes (a run repeated at fixed
// strides, up to two dims; a box of 16 planes or more of rows of pieces of
// a cache line or more, or of two planes or more of rows of a page or more
// of pieces of 512 bytes or more spanning at most 1 MiB, as columns of one
// dim), or, where every received message's direct
// copies were compiled and they are fewer ops than the folded boxes, those
// (the boxes the layouts' blocks intersect in: pairing walks a message in
// its staged order, which can cut a column of rows into many short
// pieces), the ranks' local copies among them, and how
// they all run (CopySchedule, as the in-process executor runs a phase:
// each target row written whole, in address order, or slices of every
// copy) decided once, then taken by the ranks' threads task by task.
// A scheduled copy's source index is the rank whose input it reads, its
// destination index the rank whose output it writes.
// `mismatch`: the first message (by receiver, then sender) whose two ranks
// disagree on its length, an error of every rank (that message copies their
// common prefix; the others arrive whole).
struct BoxCopies {
  CopyProgram program;
  CopySchedule schedule;
  Status mismatch = Status::Ok();
};

// One box exchange as its ranks run it together (thread_comm.cc): paired
// once, then each run's tasks taken in turn by the ranks. `ids`: the ids
// of the ThreadBoxes it pairs, by rank (a new one may take a freed one's
// address, never its id). Set up by one rank while the others wait; then
// read by all but `next` and `copying`, and `copies` once `paired` has run.
class ThreadBoxes;
struct BoxCollective {
  std::vector<uint64_t> ids;
  std::vector<const ThreadBoxes*> ranks;  // every rank's messages, as paired
  std::once_flag paired;
  std::unique_ptr<BoxCopies> copies;
  // This run's: every rank's input and output, and the next task.
  std::vector<const std::byte*> inputs;
  std::vector<std::byte*> outputs;
  std::atomic<int64_t> next{0};
  std::atomic<int> copying{0};  // ranks taking its tasks now
};

// The one wording of a message whose receiver expected another length (as
// MPI's truncation error), every thread transport's.
Status MessageSizeMismatch(int receiver, int64_t expected, int sender, int64_t sent);

class ThreadBoxes final : public BoxExchange {
 public:
  struct Message {
    int peer = -1;
    const CopyProgram* ops = nullptr;  // in order: ops [begin, end) of the program's copies
    int32_t begin = 0, end = 0;
    int64_t runs_begin = 0, runs_end = 0;  // else: [runs_begin, runs_end) of `runs`
    int64_t bytes = 0;
    // A received message whose program holds its direct copies
    // (CompileOptions::copies): ops [direct_begin, direct_end) of `direct`
    // copy it from its sender's input into this output. Else null.
    const CopyProgram* direct = nullptr;
    int32_t direct_begin = 0, direct_end = 0;
  };

  // Program `p`'s messages for a Comm of `size` ranks: message m sent to
  // send_rank[m] from its pack copies, message m received from recv_rank[m]
  // into its unpack copies. Internal where a peer is not a rank, a count is
  // negative, a message's runs do not tile its bytes (a gap or an overlap),
  // or a peer has two messages one way (one would never be delivered).
  static Result<std::unique_ptr<ThreadBoxes>> Prepare(const DeviceProgram& p, std::span<const int> send_rank,
                                                      std::span<const int> recv_rank, int size);

  int64_t bytes_sent() const override { return sent_; }
  int64_t bytes_received() const override { return received_; }
  // The program's local copies run among the paired copies (Pair).
  bool copies_local() const override { return true; }
  // The ranks of the Comm that prepared them, the only one that may run them.
  int size() const { return size_; }

  // The message to or from `peer`, or null.
  const Message* To(int peer) const { return Find(to_, peer); }
  const Message* From(int peer) const { return Find(from_, peer); }
  // The run lists of the messages not walked op after op.
  const std::vector<BoxRun>& runs() const { return runs_; }

  // Unique among every ThreadBoxes this process prepared (never 0).
  uint64_t id() const { return id_; }

  // Every rank's messages and local copies, `ranks[k]` being rank k's
  // prepared messages, as copies of one schedule for `threads` threads
  // (above). REQUIRES: every rank's given. The result does not move (the
  // schedule points into it).
  static std::unique_ptr<BoxCopies> Pair(std::span<const ThreadBoxes* const> ranks, int threads);

  // The run of the exchange this object is rank 0's part of (the Comm
  // keeps it here, under its lock: rank 0's prepared messages live as long
  // as the exchange is run). Empty until its first run.
  std::shared_ptr<BoxCollective>& run() const { return run_; }

 private:
  static const Message* Find(const std::vector<Message>& list, int peer);

  int size_ = 0;
  uint64_t id_ = 0;
  const CopyProgram* local_ = nullptr;  // the program's local copies
  mutable std::shared_ptr<BoxCollective> run_;
  std::vector<Message> to_, from_;
  std::vector<BoxRun> runs_;
  int64_t sent_ = 0, received_ = 0;
};

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_THREAD_BOXES_H_
