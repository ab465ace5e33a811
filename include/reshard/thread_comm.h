// Threads as ranks: a Comm (comm.h) whose N ranks are threads of one
// process, the in-process fake of a cluster that the step runner
// (rank_reshard.h) is tested on, so every in-process test of the runner
// exercises the code MPI runs.
//
//   std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(4);
//   // thread (or fiber) k: use *comms[k] (rank k of 4), one call at a time.
//
// Collectives meet at a barrier: every rank posts its buffers, waits for the
// others, copies what it receives straight from the senders' buffers (box
// messages: what any rank's copies need, below), and waits again before
// returning, so the Start* collectives complete at once (their request is
// kNoRequest). Box messages (Comm::has_boxes) are one such
// collective, and the one that copies each byte once (boxes_copy_once:
// the runner takes them wherever they apply), with no staging, as MPI's
// derived datatypes move them: every message's runs are paired with its
// receiver's, both in the message's order (copies in order walked as they
// are, interleaved block-cyclic boxes from a sorted run list), and folded
// back into box copies straight from the sender's input into the
// receiver's output (or, where the program holds every message's direct
// copies and they are fewer ops, those: thread_boxes.h); with every rank's
// local copies they form one schedule
// (CopySchedule, as the in-process executor runs a phase: slices of every
// copy, each target row written whole), which the ranks run together, each
// taking the next task until none is left (a box exchange that ends at a
// rank's own copies, Comm::BoxesEnd::kOwnCopies, returns then, without the
// second barrier: the caller joins every rank before reading an output).
// The pairing and its schedule are
// made once, by the first rank through the first run of a set of prepared
// messages (the last rank to arrive having set up that run for all), and
// kept for the later runs. At most `copiers` ranks copy at once
// (a rank with no permit leaves the tasks to those copying): eight ranks
// copying on two cores would evict each other's rows from the caches.
// Ranks may run on threads or as fibers (as the in-process executor runs
// them): a fiber waiting at a barrier lets its
// thread's other ranks run. On threads, where at most 4 ranks share a
// hardware thread, a rank waiting at a barrier yields a few times before it
// sleeps (not after a box exchange of 1 MiB or more, where it would take
// turns with the ranks at work). PrepareBoxes keeps
// pointers into the program's copies: the program must outlive the result
// (the runner's does). Point-to-point sends are unbuffered, as
// strict as MPI allows: StartSend records the sender's pointer (no copy) and
// gives a request; the bytes are copied straight from the sender's buffer
// into the receiver's when the send meets its receive, and only then do
// both requests complete. So a send buffer rewritten or freed before its
// request completes shows here as it would under MPI. Matching makes
// progress from either side: StartRecv takes the oldest queued send from
// its peer, StartSend the oldest pending receive of its receiver from this
// rank, and Wait* match what is left; between one pair, sends and receives
// match in the order each side started them. A send never received keeps
// its sender waiting until the timeout below. Start* on a broken group
// returns its Internal; a destroyed comm's unmatched sends and receives are
// dropped, never touched again.
// Split makes a new group of ranks with its own barrier and channels.
//
// Never a hang: a rank that waits longer than `timeout_seconds` at a barrier
// or for a message breaks its group, and every wait of that group, now or
// later, returns Internal ("rank K waited ... s for ..."). A message whose
// size differs from the receive's is Internal on the receiver, as MPI's
// truncation error is; the sender's request completes with Ok. In box
// messages, where every rank sees every message, it is that same error on
// every rank (the other messages still arrive).
//
// Thread safety: each Comm belongs to one rank (a thread, or a fiber, which
// may move between threads), one call at a time; the comms of one group
// share state under a lock.
#ifndef RESHARD_THREAD_COMM_H_
#define RESHARD_THREAD_COMM_H_

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "reshard/comm.h"

namespace reshard {

// Rank k of the result is element k. `copiers`: how many ranks copy box
// messages at once (<= 0: the hardware's thread count; at most kMaxThreads).
// `boxes_copy_once` false: the comms say their box messages copy twice
// (Comm::boxes_copy_once), as MPI's do, so the runner chooses each step's
// transport as it does over MPI (structured steps over their groups first):
// the choices the MPI suites see, run in process.
// REQUIRES: ranks >= 1.
std::vector<std::unique_ptr<Comm>> MakeThreadComms(int ranks, double timeout_seconds = 60, int copiers = 0,
                                                   bool boxes_copy_once = true);

// A function that breaks every group of `comm`'s MakeThreadComms (its
// first group and every group split from it, or from one split from it):
// every rank waiting in any of them, and every later collective, send or
// receive started in one, then fails with Internal(message), at once
// rather than at its timeout. For whoever runs the ranks, when one fails
// alone (an error not agreed, an exception) while the others may wait for
// it. Only its first call breaks; thread-safe; it may outlive the comms. A
// no-op for a comm of another backend.
std::function<void(std::string_view)> ThreadCommsBreaker(Comm& comm);

}  // namespace reshard

#endif  // RESHARD_THREAD_COMM_H_
