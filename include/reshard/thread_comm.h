// Threads as ranks: a Comm (comm.h) whose N ranks are threads of one
// process, the in-process fake of a cluster that the step runner
// (rank_reshard.h) is tested on, so every in-process test of the runner
// exercises the code MPI runs.
//
//   std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(4);
//   // thread k: use *comms[k] (rank k of 4), and only from that thread.
//
// Collectives meet at a barrier: every rank posts its buffers, waits for the
// others, copies what it receives straight from the senders' buffers, and
// waits again before returning, so the Start* collectives complete at once
// (their request is kNoRequest). Point-to-point sends are buffered (the
// message is copied into the receiver's mailbox; the send completes at
// once); receives complete in Wait*, matched in the order each pair sent.
// Split makes a new group of threads with its own barrier and mailboxes.
//
// Never a hang: a rank that waits longer than `timeout_seconds` at a barrier
// or for a message breaks its group, and every wait of that group, now or
// later, returns Internal ("rank K waited ... s for ..."). A message whose
// size differs from the receive's is Internal on the receiver, as MPI's
// truncation error is.
//
// Thread safety: each Comm belongs to one thread; the comms of one group
// share state under a lock.
#ifndef RESHARD_THREAD_COMM_H_
#define RESHARD_THREAD_COMM_H_

#include <memory>
#include <vector>

#include "reshard/comm.h"

namespace reshard {

// Rank k of the result is element k. REQUIRES: ranks >= 1.
std::vector<std::unique_ptr<Comm>> MakeThreadComms(int ranks, double timeout_seconds = 60);

}  // namespace reshard

#endif  // RESHARD_THREAD_COMM_H_
