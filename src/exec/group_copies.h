// Compiles a structured step's copies once per group pattern
// (GroupCopies, device_program.h) where its layouts repeat from group to
// group. Internal to the compile (device_program.cc) and the memory
// estimate (GroupCopyPairs).
#ifndef RESHARD_SRC_EXEC_GROUP_COPIES_H_
#define RESHARD_SRC_EXEC_GROUP_COPIES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "reshard/collective_plan.h"
#include "reshard/device_program.h"
#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/status.h"

namespace reshard {

// The pattern of a step from `in` to `out` over `mesh`'s groups along
// `axes`, the program's devices `devices` (ascending) indexing its arrays;
// nullopt where the step does not repeat from group to group (the
// conditions on GroupCopies), or where `in` and `out` are not both over
// exactly `devices`, the mesh's devices. A partial `in`'s parts are
// combined as Exchange::RouteParts routes them. Buffers in `in_format` and `out_format` (each the same for
// every device); `direct`: the direct form (every pair's copies; without
// it only the local pairs'); `staging`, where given, the order boxes are
// staged in: the staged form. With `with_copies` false, everything but the copies
// (their ranges stay empty): what GroupCopyPairs needs. Cost: linear in
// devices, plus the pattern's pairs (classes x group size) times the rank.
std::optional<GroupCopies> MakeGroupCopies(const Mesh& mesh, const std::vector<int32_t>& axes, const Layout& in,
                                           const Layout& out, std::span<const int64_t> devices,
                                           const BufferFormat& in_format, const BufferFormat& out_format,
                                           bool direct, const BufferFormat* staging, bool with_copies);

// Whether the program step from `in` of plan step `ps` is of a kind written
// per group pattern (MakeGroupCopies decides the rest): an all-gather or
// all-to-all from its input, a reduce-scatter or all-reduce from its partial
// input, and an all-reduce's gathering of its ring pieces (RingPieces).
bool GroupPatternKind(const PlanStep& ps, const Layout& in);
// Internal unless every group copy of `gc` stays inside its sender's
// input and its receiver's output (and its staged box), with the buffer
// sizes of `devices` (indexed like the compile's devices): checked once per
// pattern, on its first group, as a member's buffers are one size in every
// group of a pattern. `step`: the program step, for the message.
Status CheckGroupCopyBounds(const GroupCopies& gc, std::span<const DeviceProgram> devices, size_t step);

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_GROUP_COPIES_H_
