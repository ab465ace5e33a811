// The MPI backend of the per-rank interface (comm.h): a Comm over a
// duplicate of an MPI communicator, so its messages never match the
// caller's. Collectives are MPI's (MPI_Ialltoallv, MPI_Iallgather(v),
// MPI_Allreduce, ...), sub-groups MPI_Comm_split, point-to-point
// MPI_Isend/MPI_Irecv on one tag, and box messages derived datatypes moved
// by one MPI_Ialltoallw (no staging). Counts are MPI ints: max_count() is
// 2^31 - 1 (OpenMPI 4.1 has no large-count calls). Every MPI return code
// becomes a Status (the communicator's error handler returns errors).
//
// MPI must be initialized (any thread level) before MakeMpiComm and
// finalized after the Comm is gone; a Comm outliving MPI_Finalize frees
// nothing.
#ifndef RESHARD_MPI_COMM_H_
#define RESHARD_MPI_COMM_H_

#include <mpi.h>

#include <memory>

#include "reshard/comm.h"
#include "reshard/status.h"

namespace reshard {

// InvalidArgument for MPI_COMM_NULL or before MPI_Init. Collective over
// `comm` (MPI_Comm_dup).
Result<std::unique_ptr<Comm>> MakeMpiComm(MPI_Comm comm);

}  // namespace reshard

#endif  // RESHARD_MPI_COMM_H_
