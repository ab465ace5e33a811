// Step lowering: the layouts and exchanges a plan step is compiled
// through (PlanProgram::Compile, device_program.h), and the chunk its
// collective is priced at. One rule for the compiler, the MPI backend, the
// memory estimate and the tests.
#ifndef RESHARD_STEP_LOWERING_H_
#define RESHARD_STEP_LOWERING_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "reshard/collective_plan.h"
#include "reshard/exchange.h"
#include "reshard/layout.h"
#include "reshard/status.h"

namespace reshard {

// The layout an all-reduce of `partial` passes through: each tile cut into
// `parts` pieces, each prime factor of `parts` cutting one dim (one interval
// per tile there) by XLA's ceil rule, where it divides evenly if any dim
// does, else the dim of the longest pieces; piece p (its digits over the cut
// dims) held by the devices holding part p; pieces past the last element
// are empty, as a ring's padded chunks are. nullopt where no dim allows it
// (rank 0, every dim cut into several intervals per tile): the all-reduce
// then runs as one reducing step.
std::optional<Layout> ReducedPieces(const Layout& partial);
// The pieces plan step `step` passes through as a ring: ReducedPieces of an
// all-reduce's input where its output has no pending reduction; nullopt for
// any other step (it runs as one program step).
std::optional<Layout> RingPieces(const PlanStep& step);

// The exchange step `step` of `plan` is lowered through: between its input
// and output layouts, with sender groups for an all-gather or all-to-all
// over mesh groups (Mesh::GroupOf over the step's axes). The one lowering
// rule: PlanProgram::Compile and the MPI backend both call it.
Result<Exchange> StepExchange(const CollectivePlan& plan, size_t step);

// The chunk plan step `step` prices its collective's messages at, where it
// is an all-gather, all-to-all or reduce-scatter over mesh groups of k > 1
// members (k - 1 chunks into every member: StepProgram::chunk_bytes), or
// an all-reduce over them (its ring's chunk, 2 (k - 1) of them into every
// member: StepProgram::all_reduce_chunk). 0 elsewhere.
int64_t PricedChunkBytes(const CollectivePlan& plan, size_t step);

}  // namespace reshard

#endif  // RESHARD_STEP_LOWERING_H_
