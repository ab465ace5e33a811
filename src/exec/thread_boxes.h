// Box messages for threads as ranks (thread_comm.h): a step's messages
// described as walks over the rank's own buffers, which a receiver pairs
// with its senders' into copies straight from their inputs into its output,
// as MPI's derived datatypes move them, in one copy as shared memory
// allows (Comm::PrepareBoxes, StartBoxes).
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
// outlive it. Immutable once prepared; several ranks read a sender's at once.
#ifndef RESHARD_SRC_EXEC_THREAD_BOXES_H_
#define RESHARD_SRC_EXEC_THREAD_BOXES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
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

class ThreadBoxes;

// A receiver's messages of one box exchange as copies straight from its
// senders' inputs into its own output: each sender's walk paired with the
// receiver's, the pieces folded back into boxes (a run repeated at fixed
// strides, up to two dims), and how they run (CopySchedule: groups by
// destination, slices) decided once. Op k reads the input of rank
// `sender[k]`; the schedule's source index is that rank, its destination
// index 0. Built once per pairing of prepared messages (`senders`: the ids
// of the ThreadBoxes it pairs, by rank; 0 where none) and reused by every
// later run, as the in-process executor keeps a program's schedule.
struct DirectBoxCopies {
  std::vector<uint64_t> senders;
  CopyProgram program;
  CopySchedule schedule;
};

class ThreadBoxes final : public BoxExchange {
 public:
  struct Message {
    int peer = -1;
    const CopyProgram* ops = nullptr;  // in order: ops [begin, end) of the program's copies
    int32_t begin = 0, end = 0;
    int64_t runs_begin = 0, runs_end = 0;  // else: [runs_begin, runs_end) of `runs`
    int64_t bytes = 0;
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
  // The ranks of the Comm that prepared them, the only one that may run them.
  int size() const { return size_; }

  // The message to or from `peer`, or null.
  const Message* To(int peer) const { return Find(to_, peer); }
  const Message* From(int peer) const { return Find(from_, peer); }
  // The run lists of the messages not walked op after op.
  const std::vector<BoxRun>& runs() const { return runs_; }

  // Unique among every ThreadBoxes this process prepared (never 0).
  uint64_t id() const { return id_; }

  // This rank's messages, from `senders[k]` (rank k's prepared messages,
  // null where it sends this rank nothing), as direct copies (above).
  // REQUIRES: each sender's message to this rank as long as this rank's
  // from it (StartBoxes checks); every one of this rank's messages has its
  // sender. The result does not move (the schedule points into it).
  std::unique_ptr<DirectBoxCopies> Direct(int rank, std::span<const ThreadBoxes* const> senders) const;

 private:
  static const Message* Find(const std::vector<Message>& list, int peer);

  int size_ = 0;
  uint64_t id_ = 0;
  std::vector<Message> to_, from_;
  std::vector<BoxRun> runs_;
  int64_t sent_ = 0, received_ = 0;
};

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_THREAD_BOXES_H_
