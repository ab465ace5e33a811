// The states and edges of the planner's search (named_planner.h): a state
// lists, per tensor dim, the plan-mesh axes that split it, major to minor
// (AxisLists, plan_mesh.h); an edge is one structured step to another state,
// or the ragged exchange to the target; a path's Cost is the sum of its
// edges'. Also the texts --explain shows for them, the short keys the search
// hashes states by, and the neighbours the search tries from a state.
//
// Cost is additive and totally ordered, and its sums saturate, so every
// machine orders plans the same way. StateOfKey(StateKey(s)) == s.
//
// All are values or pure functions: safe to use from any thread.
#ifndef RESHARD_SRC_PLAN_SEARCH_STATE_H_
#define RESHARD_SRC_PLAN_SEARCH_STATE_H_

#include <algorithm>
#include <cmath>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "layout/checked_math.h"

#include "plan/plan_mesh.h"
#include "plan/structured_step.h"
#include "reshard/dtype.h"
#include "reshard/layout.h"

namespace reshard {

// Additive and totally ordered: modeled time (picoseconds), then bytes
// received by the busiest device, then bytes received in all, then ragged
// exchanges, then steps.
struct Cost {
  int64_t time_ps = 0, bytes = 0, total = 0, exchanges = 0, steps = 0;
  friend auto operator<=>(const Cost&, const Cost&) = default;
  Cost operator+(const Cost& o) const {
    return {SaturatingAdd(time_ps, o.time_ps), SaturatingAdd(bytes, o.bytes), SaturatingAdd(total, o.total),
            exchanges + o.exchanges, steps + o.steps};
  }
};

// Time in whole picoseconds (saturating), so that costs compare exactly and
// ties break the same way on every machine.
inline int64_t Picoseconds(double us) {
  const double ps = us * 1e6;
  return ps >= 9.2e18 ? INT64_MAX : std::llround(ps);
}

// A state as its dims' axis lists: "[{x}, {}, {y, z}]".
std::string StateText(const PlanMesh& pm, const AxisLists& s);
// The same with partial sums pending over `unreduced` (none: as above):
// "[{x}, {}] unreduced {y}".
std::string StateText(const PlanMesh& pm, const AxisLists& s, const std::vector<int32_t>& unreduced);

// A group of axes: "{x,y}".
std::string AxesText(const PlanMesh& pm, const std::vector<int32_t>& axes);

// The layout of state `s` of an array of `shape` and `dtype`.
Layout StateLayout(const PlanMesh& pm, const AxisLists& s, const std::vector<int64_t>& shape, DType dtype);
// The same with a pending reduction `op` over the plan-mesh axes `unreduced`
// (partial sums, reduction_planner.h); fails where an axis is used twice.
Result<Layout> StateLayout(const PlanMesh& pm, const AxisLists& s, const std::vector<int64_t>& shape, DType dtype,
                           const std::vector<int32_t>& unreduced, ReduceOp op);

// One edge of the search: a structured step, or the ragged exchange to the target.
struct Edge {
  bool exchange = false;
  AxisLists to;
  StepDraft draft;            // structured
  double time_us = 0;
  int64_t recv_bytes = 0, peak_bytes = 0, total_bytes = 0;
  Cost cost() const { return Cost{Picoseconds(time_us), recv_bytes, total_bytes, exchange ? 1 : 0, 1}; }
};

// An edge as --explain lists it: "all-to-all over {x,y}: [...] -> [...]".
std::string EdgeText(const PlanMesh& pm, const AxisLists& from, const Edge& e);

// A state as a short string (axis ids, dims separated by 0xFF): hashed and
// compared far faster than nested vectors.
inline std::string StateKey(const AxisLists& s) {
  std::string k;
  for (const auto& l : s) {
    for (int32_t a : l) k.push_back(static_cast<char>(a));
    k.push_back(static_cast<char>(0xFF));
  }
  return k;
}

// The state StateKey made `key` from.
AxisLists StateOfKey(const std::string& key);

// Whether `a` is a prefix of `b`.
inline bool IsPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// Calls visit(state, key) once for each state one structured step from `s`
// that may lead toward `t`, in a fixed order. Candidates are built in one
// scratch state and copied only by the visitor, since most are repeats.
template <typename Visit>
void ForEachNeighbour(const PlanContext& ctx, const AxisLists& s, const AxisLists& t, Visit&& visit) {
  const size_t rank = s.size();
  // Repeats are many: compare hashes before keys.
  std::vector<std::pair<size_t, std::string>> seen;
  const std::hash<std::string> hash;
  seen.emplace_back(hash(StateKey(s)), StateKey(s));
  std::vector<int> where(ctx.axis_sizes.size(), -1);  // dim holding each axis
  for (size_t d = 0; d < rank; ++d)
    for (int32_t a : s[d]) where[a] = static_cast<int>(d);
  auto add = [&](const AxisLists& v) {
    std::string key = StateKey(v);
    const size_t h = hash(key);
    for (const auto& [sh, sk] : seen)
      if (sh == h && sk == key) return;
    seen.emplace_back(h, key);
    visit(v, std::move(key));
  };
  AxisLists v;
  // All-gathers of one dim's minor axes; and of everything off the target's prefix.
  AxisLists off = s;
  for (size_t d = 0; d < rank; ++d) {
    for (size_t m = 1; m <= s[d].size(); ++m) {
      v = s;
      v[d].resize(s[d].size() - m);
      add(v);
    }
    size_t p = 0;
    while (p < s[d].size() && p < t[d].size() && s[d][p] == t[d][p]) ++p;
    off[d].resize(p);
  }
  add(off);
  // Slices: the target's next axes where unused; and all dims at once.
  AxisLists all_slices = s;
  for (size_t d = 0; d < rank; ++d) {
    if (!IsPrefix(s[d], t[d])) continue;
    for (size_t i = s[d].size(); i < t[d].size() && where[t[d][i]] < 0; ++i) {
      v = s;
      v[d].insert(v[d].end(), t[d].begin() + s[d].size(), t[d].begin() + i + 1);
      add(v);
      all_slices[d] = v[d];
    }
  }
  add(all_slices);
  // Slices of any unused target axis onto any dim: less data for the steps
  // after (a permute can put the axes in order later).
  std::vector<bool> in_target(ctx.axis_sizes.size(), false);
  for (const auto& l : t)
    for (int32_t a : l) in_target[a] = true;
  for (size_t a = 0; a < ctx.axis_sizes.size(); ++a) {
    if (where[a] >= 0 || !in_target[a]) continue;
    for (size_t d = 0; d < rank; ++d) {
      v = s;
      v[d].push_back(static_cast<int32_t>(a));
      add(v);
    }
  }
  // All-to-alls: the target's next axes of a dim, taken from other dims'
  // minor ends; each dim alone, then every dim at once.
  auto move_next = [&](const AxisLists& base, size_t e, size_t count, AxisLists& out) {
    out = base;
    const std::span<const int32_t> axes(t[e].begin() + s[e].size(), count);
    std::map<int, size_t> taken;  // source dim -> axes taken from it
    for (int32_t a : axes) {
      if (where[a] < 0 || where[a] == static_cast<int>(e)) return false;
      ++taken[where[a]];
    }
    for (auto [d, k] : taken) {
      // The axes taken from dim d must be exactly its minor-most k.
      for (size_t i = s[d].size() - k; i < s[d].size(); ++i)
        if (std::find(axes.begin(), axes.end(), s[d][i]) == axes.end()) return false;
      if (out[d].size() != s[d].size()) return false;  // already changed by another move
      out[d].resize(s[d].size() - k);
    }
    out[e].insert(out[e].end(), axes.begin(), axes.end());
    return true;
  };
  AxisLists fused = s;
  for (size_t e = 0; e < rank; ++e) {
    if (!IsPrefix(s[e], t[e])) continue;
    size_t best = 0;
    for (size_t count = 1; s[e].size() + count <= t[e].size(); ++count) {
      if (move_next(s, e, count, v)) {
        add(v);
        best = count;
      }
    }
    if (best && move_next(fused, e, best, v)) fused = v;
  }
  add(fused);
  // Moves of a dim's minor axes to the minor end of another dim (steps of
  // hierarchical plans, and ways around a blocked axis).
  for (size_t d = 0; d < rank; ++d)
    for (size_t m = 1; m <= s[d].size(); ++m)
      for (size_t e = 0; e < rank; ++e) {
        if (e == d) continue;
        v = s;
        v[e].insert(v[e].end(), s[d].end() - m, s[d].end());
        v[d].resize(s[d].size() - m);
        add(v);
      }
  // Collective-permutes: straight to the target; each dim's axes reordered
  // with those its target has first, in the target's order; swaps of
  // equal-size axes.
  add(t);
  for (size_t d = 0; d < rank; ++d) {
    v = s;
    std::stable_sort(v[d].begin(), v[d].end(), [&](int32_t a, int32_t b) {
      auto rank_of = [&](int32_t x) {
        auto it = std::find(t[d].begin(), t[d].end(), x);
        return it == t[d].end() ? t[d].size() : static_cast<size_t>(it - t[d].begin());
      };
      return rank_of(a) < rank_of(b);
    });
    add(v);
  }
  for (size_t a = 0; a < ctx.axis_sizes.size(); ++a) {
    if (where[a] < 0) continue;
    for (size_t b = 0; b < ctx.axis_sizes.size(); ++b) {
      if (b == a || ctx.axis_sizes[a] != ctx.axis_sizes[b] || (where[b] >= 0 && b < a)) continue;
      v = s;
      for (auto& l : v)
        for (int32_t& x : l) x = x == static_cast<int32_t>(a) ? static_cast<int32_t>(b) : x == static_cast<int32_t>(b) ? static_cast<int32_t>(a) : x;
      add(v);
    }
  }
}

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_SEARCH_STATE_H_
