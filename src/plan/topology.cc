#include "reshard/topology.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <fmt/format.h>

#include "layout/checked_math.h"

namespace reshard {
namespace {

// Parses a positive integer at text[pos...]; advances pos.
Result<int64_t> ParsePositive(std::string_view text, size_t& pos) {
  const size_t start = pos;
  int64_t v = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    if (v > (int64_t{1} << 40))
      return Status::InvalidArgument(fmt::format("number too large at column {} of '{}'", start + 1, text));
    v = v * 10 + (text[pos] - '0');
    ++pos;
  }
  if (pos == start) return Status::InvalidArgument(fmt::format("expected a number at column {} of '{}'", start + 1, text));
  if (v < 1) return Status::InvalidArgument(fmt::format("expected a positive number at column {} of '{}'", start + 1, text));
  return v;
}

}  // namespace

Topology Topology::Flat() { return Topology(); }

Topology Topology::Nodes(int64_t devices_per_node) {
  Topology t;
  t.kind_ = Kind::kNodes;
  t.devices_per_node_ = devices_per_node;
  t.network_ = LinkCost{3.0, 25000.0, 0.0};
  return t;
}

Topology Topology::Torus(std::vector<int64_t> dims) {
  Topology t;
  t.kind_ = Kind::kTorus;
  t.torus_dims_ = std::move(dims);
  t.network_ = LinkCost{1.0, 45000.0, 0.1};
  return t;
}

Result<Topology> Topology::Parse(std::string_view text) {
  if (text == "flat") return Flat();
  if (text.starts_with("nodes:")) {
    size_t pos = 6;
    RESHARD_ASSIGN_OR_RETURN(int64_t k, ParsePositive(text, pos));
    if (pos != text.size())
      return Status::InvalidArgument(fmt::format("unexpected '{}' at column {} of '{}'", text.substr(pos), pos + 1, text));
    return Nodes(k);
  }
  if (text.starts_with("torus:")) {
    size_t pos = 6;
    std::vector<int64_t> dims;
    while (true) {
      if (dims.size() == 3)
        return Status::InvalidArgument(fmt::format("a torus has at most 3 dims: '{}' goes on at column {}", text, pos + 1));
      const size_t at = pos;
      RESHARD_ASSIGN_OR_RETURN(int64_t k, ParsePositive(text, pos));
      dims.push_back(k);
      int64_t size = 1;  // (the hop arithmetic takes the torus's size in int64)
      for (int64_t d : dims)
        if (!CheckedMul(size, d, &size))
          return Status::InvalidArgument(
              fmt::format("the torus's size overflows int64 at column {} of '{}'", at + 1, text));
      if (pos == text.size()) break;
      if (text[pos] != 'x')
        return Status::InvalidArgument(fmt::format("expected 'x' at column {} of '{}'", pos + 1, text));
      ++pos;
    }
    return Torus(std::move(dims));
  }
  return Status::InvalidArgument(
      fmt::format("unknown topology '{}' at column 1: expected flat, nodes:K or torus:AxB[xC]", text));
}

Topology Topology::WithNetwork(const LinkCost& link) const {
  Topology t = *this;
  t.network_ = link;
  return t;
}

Topology Topology::WithIntraNode(const LinkCost& link) const {
  Topology t = *this;
  t.intra_ = link;
  return t;
}

Topology Topology::WithStepLatency(double us) const {
  Topology t = *this;
  t.step_latency_ = us;
  return t;
}

Topology Topology::WithCopyBytesPerUs(double bytes_per_us) const {
  Topology t = *this;
  t.copy_beta_ = bytes_per_us;
  return t;
}

Topology Topology::BandwidthOnly() const {
  Topology t = *this;
  t.network_.alpha_us = t.network_.hop_alpha_us = 0;
  t.intra_.alpha_us = t.intra_.hop_alpha_us = 0;
  t.step_latency_ = 0;
  t.copy_beta_ = std::numeric_limits<double>::infinity();
  t.receive_only_ = true;
  return t;
}

bool Topology::Uniform() const {
  switch (kind_) {
    case Kind::kFlat: return true;
    case Kind::kNodes: return devices_per_node_ == 1 || network_ == intra_;
    case Kind::kTorus: return false;
  }
  return true;
}

namespace {

// One message of `bytes` over a link of the flat or nodes kinds.
double LinkTime(const LinkCost& l, int64_t bytes) { return l.alpha_us + static_cast<double>(bytes) / l.bytes_per_us; }

// One message of `bytes` over `hops` torus links of `dims` dimensions: a
// message spreads over the 2 x dims links out of a device.
double TorusTime(const LinkCost& l, size_t dims, int64_t hops, int64_t bytes) {
  const double links = 2.0 * static_cast<double>(dims);
  return l.alpha_us + static_cast<double>(hops) * l.hop_alpha_us +
         static_cast<double>(bytes) * static_cast<double>(hops) / (links * l.bytes_per_us);
}

}  // namespace

double Topology::MessageTime(int64_t p, int64_t q, int64_t bytes) const {
  switch (kind_) {
    case Kind::kFlat: return LinkTime(network_, bytes);
    case Kind::kNodes: return LinkTime(p / devices_per_node_ == q / devices_per_node_ ? intra_ : network_, bytes);
    case Kind::kTorus: {
      int64_t hops = 0, rp = p, rq = q;
      for (size_t i = torus_dims_.size(); i-- > 0;) {
        const int64_t n = torus_dims_[i];
        const int64_t d = std::llabs(rp % n - rq % n);
        hops += std::min(d, n - d);
        rp /= n;
        rq /= n;
      }
      hops += std::llabs(rp - rq);  // devices beyond the torus: count the distance in whole tori
      return TorusTime(network_, torus_dims_.size(), hops, bytes);
    }
  }
  return 0;
}

double Topology::FastestBytesPerUs() const {
  switch (kind_) {
    case Kind::kFlat: return network_.bytes_per_us;
    case Kind::kNodes: return std::max(network_.bytes_per_us, intra_.bytes_per_us);
    case Kind::kTorus: return 2.0 * static_cast<double>(torus_dims_.size()) * network_.bytes_per_us;
  }
  return network_.bytes_per_us;
}

double Topology::LeastMessageTime(int64_t bytes) const {
  switch (kind_) {
    case Kind::kFlat: return LinkTime(network_, bytes);
    case Kind::kNodes: return std::min(LinkTime(network_, bytes), LinkTime(intra_, bytes));
    case Kind::kTorus: return TorusTime(network_, torus_dims_.size(), 1, bytes);  // the nearest two devices
  }
  return 0;
}

double Topology::WorstMessageTime(int64_t bytes) const {
  switch (kind_) {
    case Kind::kFlat: return LinkTime(network_, bytes);
    case Kind::kNodes: return std::max(LinkTime(network_, bytes), LinkTime(intra_, bytes));
    case Kind::kTorus: {
      int64_t hops = 0;  // the farthest two devices
      for (int64_t n : torus_dims_) hops += n / 2;
      return TorusTime(network_, torus_dims_.size(), hops, bytes);
    }
  }
  return 0;
}

std::string Topology::ToString() const {
  std::string head;
  switch (kind_) {
    case Kind::kFlat: head = "flat"; break;
    case Kind::kNodes: head = fmt::format("nodes:{}", devices_per_node_); break;
    case Kind::kTorus: head = fmt::format("torus:{}", fmt::join(torus_dims_, "x")); break;
  }
  std::string s = fmt::format("{} (step {} us; alpha {} us, {} GB/s", head, step_latency_, network_.alpha_us,
                              network_.bytes_per_us / 1000.0);
  if (kind_ == Kind::kNodes)
    s += fmt::format("; inside a node {} us, {} GB/s", intra_.alpha_us, intra_.bytes_per_us / 1000.0);
  if (kind_ == Kind::kTorus) s += fmt::format("; {} us per hop", network_.hop_alpha_us);
  if (receive_only_) s += "; bandwidth only: receives priced, copies free";
  else s += fmt::format("; local copies {} GB/s", copy_beta_ / 1000.0);
  return s + ")";
}

}  // namespace reshard
