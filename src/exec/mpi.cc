// MpiReshard: the step runner over the MPI Comm.
#include "reshard/mpi.h"

namespace reshard {

Result<MpiReshard> MpiReshard::Create(MPI_Comm comm, const Layout& source, const Layout& target,
                                      const MpiOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(std::unique_ptr<Comm> c, MakeMpiComm(comm));
  RESHARD_ASSIGN_OR_RETURN(RankReshard runner, RankReshard::Create(std::move(c), source, target, options));
  return MpiReshard(std::move(runner));
}

Result<MpiReshard> MpiReshard::Create(MPI_Comm comm, const CollectivePlan& plan, const MpiOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(std::unique_ptr<Comm> c, MakeMpiComm(comm));
  RESHARD_ASSIGN_OR_RETURN(RankReshard runner, RankReshard::Create(std::move(c), plan, options));
  return MpiReshard(std::move(runner));
}

Status MpiTransform(MPI_Comm comm, const Layout& source, const Layout& target, std::span<const std::byte> source_buffer,
                    std::span<std::byte> target_buffer, const MpiOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(MpiReshard r, MpiReshard::Create(comm, source, target, options));
  return r.Execute(source_buffer, target_buffer).status();
}

}  // namespace reshard
