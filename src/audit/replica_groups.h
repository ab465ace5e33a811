// The device groups of an HLO collective, in every form XLA of jax 0.10.2's
// age prints them:
//
//   replica_groups={{0,1},{2,3}}                    explicit lists
//   replica_groups={}                               one group of every device
//   replica_groups=[2,4]<=[8]                       iota: 2 groups of 4 from arange(8)
//   replica_groups=[4,2]<=[2,2,2]T(2,1,0)           iota over a transposed arange
//   replica_groups=mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)) {'b'}
//       mesh form: the devices (arange reshaped and transposed, or a list)
//       laid out over the mesh axes; a group is the devices that share every
//       coordinate except those of the listed axes, ordered row-major over the
//       listed axes; {'b':(2)2} lists a sub-axis (pre-size 2, size 2)
//   source_target_pairs={{0,1},{1,0}}               a collective-permute's pairs
//
// Group members are ids (partition ids when the module has partitions).
#ifndef RESHARD_SRC_AUDIT_REPLICA_GROUPS_H_
#define RESHARD_SRC_AUDIT_REPLICA_GROUPS_H_

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "audit/hlo_module.h"
#include "reshard/status.h"

namespace reshard::audit {

using DeviceGroups = std::vector<std::vector<int64_t>>;

// The groups of `ins` (its replica_groups, with device_ids for the mesh
// form); no replica_groups or {} means one group of 0..num_devices-1.
// NotSupported for a form this reader does not know; InvalidArgument for
// malformed or inconsistent text.
Result<DeviceGroups> ReadReplicaGroups(const HloInstruction& ins, int64_t num_devices);

// Parses the replica_groups text alone (device_ids_text: the device_ids
// attribute's value, or empty).
Result<DeviceGroups> ParseReplicaGroups(std::string_view text, std::string_view device_ids_text, int64_t num_devices);

Result<std::vector<std::pair<int64_t, int64_t>>> ParseSourceTargetPairs(std::string_view text);

}  // namespace reshard::audit

#endif  // RESHARD_SRC_AUDIT_REPLICA_GROUPS_H_
