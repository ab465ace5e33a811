// Topology: the network a plan runs on, and the alpha-beta cost of a message
// over it.
//
// A message of b bytes from device p to device q costs alpha + b / beta,
// with alpha (latency, microseconds) and beta (bandwidth, bytes per
// microsecond = MB/s) chosen by where p and q sit:
//
//   flat           every pair alike: alpha, beta
//   nodes:K        devices p / K == q / K share a node (intra_alpha,
//                  intra_beta, e.g. NVLink); other pairs cross the network
//                  (alpha, beta, e.g. InfiniBand)
//   torus:AxB[xC]  device ids row-major on a torus; a message costs
//                  alpha + hops * hop_alpha + b * hops / (links * link_beta),
//                  hops the wrap-around Manhattan distance and links = 2 per
//                  torus dim (byte-hops spread over a device's links)
//
// A device sends and receives at once (full duplex): a step's time on one
// device is the larger of its send and receive sums, and a step takes as long
// as its slowest device, plus a fixed step latency for every step that
// communicates (launching and synchronizing one collective). Local copies
// (pack, transpose, pad) cost bytes / copy_beta. The bandwidth-only model
// (BandwidthOnly) sets every alpha and the step latency to 0, makes
// local copies free and prices a device by what it receives: plans are
// ordered by received bytes alone, the quantity the lower bound bounds.
// Immutable value; thread-safe.
#ifndef RESHARD_TOPOLOGY_H_
#define RESHARD_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/status.h"

namespace reshard {

struct LinkCost {
  double alpha_us = 0;           // per message
  double bytes_per_us = 1;       // bandwidth
  double hop_alpha_us = 0;       // torus: per hop
  friend bool operator==(const LinkCost&, const LinkCost&) = default;
};

class Topology {
 public:
  enum class Kind { kFlat, kNodes, kTorus };

  // Defaults (documented in docs/cost_model.md): a collective step costs
  // 10 us to launch and synchronize; flat links 1 us per message and
  // 25 GB/s; inter-node links 3 us and 25 GB/s (InfiniBand NDR per device),
  // intra-node 0.5 us and 450 GB/s (NVLink 4); torus links 1 us + 0.1 us per
  // hop, 45 GB/s (TPU ICI); local copies 1000 GB/s (HBM).
  static Topology Flat();
  static Topology Nodes(int64_t devices_per_node);
  static Topology Torus(std::vector<int64_t> dims);

  // "flat", "nodes:8", "torus:4x4", "torus:4x4x4". Errors name the column.
  static Result<Topology> Parse(std::string_view text);

  Kind kind() const { return kind_; }
  int64_t devices_per_node() const { return devices_per_node_; }
  const std::vector<int64_t>& torus_dims() const { return torus_dims_; }

  // The link classes: `network` is flat's and nodes' inter-node link and
  // torus' link; `intra_node` is used by nodes:K only.
  const LinkCost& network() const { return network_; }
  const LinkCost& intra_node() const { return intra_; }
  double step_latency_us() const { return step_latency_; }
  double copy_bytes_per_us() const { return copy_beta_; }

  // The same network with one cost changed: a new value each (a Topology
  // never changes once made, so plans priced over it stay true).
  Topology WithNetwork(const LinkCost& link) const;
  Topology WithIntraNode(const LinkCost& link) const;
  Topology WithStepLatency(double us) const;
  Topology WithCopyBytesPerUs(double bytes_per_us) const;
  // Every alpha, hop alpha and the step latency 0; local copies free;
  // receives alone priced.
  Topology BandwidthOnly() const;
  bool receive_only() const { return receive_only_; }

  // Cost of one message of `bytes` from device p to device q (p != q).
  double MessageTime(int64_t p, int64_t q, int64_t bytes) const;
  // The most one message of `bytes` can cost between any two devices.
  double WorstMessageTime(int64_t bytes) const;
  // The least one message of `bytes` can cost between two distinct devices
  // (a floor for pricing messages whose ends are not known).
  double LeastMessageTime(int64_t bytes) const;
  // The most bytes per microsecond any one message can move (a bound for
  // search heuristics).
  double FastestBytesPerUs() const;
  // True when every pair costs the same (flat, or nodes:K and torus with
  // equal link classes): lets callers price a group without visiting it.
  bool Uniform() const;
  double CopyTime(int64_t bytes) const { return static_cast<double>(bytes) / copy_beta_; }

  // "flat", "nodes:8", "torus:4x4", then the parameters.
  std::string ToString() const;

 private:
  Topology() = default;
  Kind kind_ = Kind::kFlat;
  int64_t devices_per_node_ = 1;
  std::vector<int64_t> torus_dims_;
  LinkCost network_{1.0, 25000.0, 0.0};
  LinkCost intra_{0.5, 450000.0, 0.0};
  double step_latency_ = 10.0;
  double copy_beta_ = 1000000.0;
  bool receive_only_ = false;
};

}  // namespace reshard

#endif  // RESHARD_TOPOLOGY_H_
