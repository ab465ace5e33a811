// The step runner: one rank's part of a compiled plan run over a Comm, with
// each step's transport chosen once, the same on every rank. Here: creation
// (agreeing on layouts and options, compiling this rank's part) and the run
// loop; the choice of transports is rank_step_choice.cc, each transport
// rank_step_run.cc.
#include "reshard/rank_reshard.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>

#include "exec/fingerprint.h"
#include "exec/rank_step.h"
#include "exec/staging_cache.h"

namespace reshard {
namespace {

// What the ranks must share to run a plan together: each step's op, groups,
// program and layouts. Two plans with this hash equal run the same collectives.
uint64_t PlanHash(const CollectivePlan& plan) {
  uint64_t h = Mix(plan.source().Hash(), plan.target().Hash());
  for (const PlanStep& s : plan.steps()) {
    h = Mix(h, static_cast<uint64_t>(s.op));
    h = Mix(h, s.output.Hash());
    h = Mix(h, static_cast<uint64_t>(s.group_size));
    h = Mix(h, static_cast<uint64_t>(s.num_groups));
    for (int32_t a : s.group_axes) h = Mix(h, static_cast<uint64_t>(a));
    for (const ProgramOp& op : s.program) {
      h = Mix(h, static_cast<uint64_t>(op.kind));
      for (int64_t e : op.shape) h = Mix(h, static_cast<uint64_t>(e));
      for (int32_t a : op.axes) h = Mix(h, static_cast<uint64_t>(a));
    }
  }
  // The mesh orders the groups' members (the sub-groups' ranks).
  return plan.mesh() ? MixText(h, plan.mesh()->ToString()) : h;
}

// The same of a compiled program: its layouts, its copy forms and each step's op and groups.
uint64_t ProgramHash(const PlanProgram& program) {
  uint64_t h = static_cast<uint64_t>(program.copies());
  for (const Layout& l : program.layouts()) h = Mix(h, l.Hash());
  for (const StepProgram& s : program.steps()) {
    h = Mix(h, static_cast<uint64_t>(s.op));
    for (int32_t a : s.group_axes) h = Mix(h, static_cast<uint64_t>(a));
  }
  return program.mesh() ? MixText(h, program.mesh()->ToString()) : h;
}

// The planner options every rank must share (the plan follows from them and the layouts).
uint64_t PlannerOptionsHash(const PlannerOptions& o) {
  uint64_t h = Mix(static_cast<uint64_t>(o.strategy), static_cast<uint64_t>(o.target));
  h = Mix(h, static_cast<uint64_t>(o.memory_cap_bytes));
  h = MixText(h, o.topology.ToString());
  for (const Mesh& m : o.meshes) h = MixText(h, m.ToString());
  return h;
}

}  // namespace

void FreeCachedStaging() { StagingCache::Instance().Clear(); }

std::string_view StepTransportName(StepTransport t) {
  switch (t) {
    case StepTransport::kAuto: return "auto";
    case StepTransport::kAlltoallv: return "alltoallv";
    case StepTransport::kPointToPoint: return "p2p";
    case StepTransport::kDatatypes: return "alltoallw";
  }
  return "?";
}

Status RankReshard::State::Begin(std::unique_ptr<Comm> c, const RankOptions& o, uint64_t hash) {
  if (c == nullptr) return Status::InvalidArgument("no Comm given");
  comm = std::move(c);
  rank = comm->rank();
  size = comm->size();
  options = o;
  hash = Mix(hash, static_cast<uint64_t>(o.transport));
  hash = Mix(hash, static_cast<uint64_t>(o.max_message_bytes));
  hash = Mix(hash, o.priced_chunks ? 2 : 1);
  hash = Mix(hash, o.joined_by_caller ? 2 : 1);
  hash = Mix(hash, o.planner.has_value() ? PlannerOptionsHash(*o.planner) : 1);
  // Leading dimensions may differ by rank, orders may not: messages are
  // staged in the source buffers' order (device_program.h).
  hash = Mix(hash, static_cast<uint64_t>(o.source_format.order) * 2 + static_cast<uint64_t>(o.target_format.order));
  RESHARD_RETURN_IF_ERROR(CheckSame(*comm, hash, "layouts or options"));
  Status local = Status::Ok();
  if (o.max_message_bytes < 1)
    local = Status::InvalidArgument(fmt::format("max_message_bytes is {}; it must be at least 1", o.max_message_bytes));
  // (Over a backend of separate processes no caller joins the ranks, and
  // an unagreed error would leave the others waiting.)
  else if (o.joined_by_caller && !comm->ranks_in_process())
    local = Status::InvalidArgument(fmt::format(
        "joined_by_caller is for threads as ranks, whose caller joins them; this comm is {}", comm->name()));
  return AgreeStatus(*comm, local);
}

Status RankReshard::State::CompileOwnPart(const Layout& source, const Layout& target, std::vector<std::string> step_ops,
                                          const std::function<Result<PlanProgram>(const CompileOptions&)>& compile) {
  // Every layout device must be a rank: the same answer on every rank, as the layouts agree.
  for (const Layout* l : {&source, &target})
    if (!l->devices().empty() && l->devices().back() >= size)
      return Status::InvalidArgument(
          fmt::format("the layouts name device {}, but the communicator has {} ranks", l->devices().back(), size));
  CompileOptions co;
  co.only_device = rank;
  co.copies = CopyForms::kStaged;  // a rank packs and unpacks; it never reads another rank's buffers
  co.source_format = options.source_format;
  co.target_format = options.target_format;
  Result<PlanProgram> compiled = compile(co);
  RESHARD_RETURN_IF_ERROR(AgreeStatus(*comm, compiled.status()));
  owned = std::make_unique<PlanProgram>(std::move(compiled).value());
  program = owned.get();
  ops = std::move(step_ops);
  return Prepare();
}

Result<RankReshard> RankReshard::Create(std::unique_ptr<Comm> comm, const Layout& source, const Layout& target,
                                        const RankOptions& options) {
  if (!options.planner && source.partial() && !target.partial()) {
    // The one-step plan of partial sums: the reducing exchange.
    RankOptions o = options;
    o.planner = PlannerOptions{};
    o.planner->strategy = Strategy::kExchange;
    return Create(std::move(comm), source, target, o);
  }
  auto st = std::make_unique<State>();
  RESHARD_RETURN_IF_ERROR(st->Begin(std::move(comm), options, Mix(source.Hash(), target.Hash())));
  if (options.planner) {
    // Every rank plans alike (the planner is deterministic); a failure is the same everywhere,
    // but agree on it anyway, and on the plan, so options that differ cannot slip through.
    Result<PlanResult> planned = PlanReshard(source, target, *options.planner);
    RESHARD_RETURN_IF_ERROR(AgreeStatus(*st->comm, planned.status()));
    RESHARD_RETURN_IF_ERROR(CheckSame(*st->comm, PlanHash(planned->plan), "planner options (their plans)"));
    RankOptions o = options;
    o.planner.reset();
    std::unique_ptr<Comm> c = std::move(st->comm);
    return Create(std::move(c), planned->plan, o);
  }
  RESHARD_RETURN_IF_ERROR(st->CompileOwnPart(source, target, {"exchange"}, [&](const CompileOptions& co) -> Result<PlanProgram> {
    RESHARD_ASSIGN_OR_RETURN(Exchange ex, Exchange::Create(source, target));
    return PlanProgram::Compile(ex, co);
  }));
  return RankReshard(std::move(st));
}

Result<RankReshard> RankReshard::Create(std::unique_ptr<Comm> comm, const CollectivePlan& plan,
                                        const RankOptions& options) {
  auto st = std::make_unique<State>();
  RankOptions o = options;
  o.planner.reset();  // the plan is given
  RESHARD_RETURN_IF_ERROR(st->Begin(std::move(comm), o, PlanHash(plan)));
  RESHARD_RETURN_IF_ERROR(st->CompileOwnPart(plan.source(), plan.target(), plan.OpNames(),
                                             [&](const CompileOptions& co) { return PlanProgram::Compile(plan, co); }));
  return RankReshard(std::move(st));
}

Result<RankReshard> RankReshard::Create(std::unique_ptr<Comm> comm, const PlanProgram& program,
                                        const RankOptions& options) {
  auto st = std::make_unique<State>();
  RESHARD_RETURN_IF_ERROR(st->Begin(std::move(comm), options, ProgramHash(program)));
  // The runner packs and unpacks: without those copies it would send nothing.
  RESHARD_RETURN_IF_ERROR(AgreeStatus(
      *st->comm, program.has_staged_copies()
                     ? Status::Ok()
                     : Status::InvalidArgument("this program was compiled without the staged copies (pack and "
                                               "unpack) the step runner runs (CompileOptions::copies)")));
  if (static_cast<size_t>(st->size) != program.devices().size())
    return Status::InvalidArgument(fmt::format("the program has {} devices, but the communicator has {} ranks",
                                               program.devices().size(), st->size));
  st->program = &program;
  st->rank_is_index = true;
  for (const StepProgram& s : program.steps())
    st->ops.emplace_back(StepOpName(s.op));
  RESHARD_RETURN_IF_ERROR(st->Prepare());
  return RankReshard(std::move(st));
}

RankReshard::RankReshard(std::unique_ptr<State> state) : state_(std::move(state)) {}
RankReshard::RankReshard(RankReshard&&) noexcept = default;
RankReshard& RankReshard::operator=(RankReshard&&) noexcept = default;
RankReshard::~RankReshard() = default;

int64_t RankReshard::source_bytes() const { return state_->source_bytes; }
int64_t RankReshard::target_bytes() const { return state_->target_bytes; }
const std::vector<std::string>& RankReshard::step_ops() const { return state_->ops; }
Comm& RankReshard::comm() { return *state_->comm; }

std::vector<std::string> RankReshard::step_transports() const {
  std::vector<std::string> t;
  for (const StepRun& s : state_->steps) {
    if (s.p2p)
      t.emplace_back("p2p");
    else if (s.boxes)
      t.emplace_back("alltoallw");
    else if (s.reduce_scatter)
      t.emplace_back("reduce_scatter over groups");
    else if (s.all_reduce)
      t.emplace_back("allreduce over groups");
    else if (s.fused)
      t.emplace_back("in the allreduce");
    else if (s.grouped)
      t.push_back(fmt::format("{} over groups", s.allgather ? (s.chunk > 0 ? "allgather" : "allgatherv")
                                                            : (s.chunk > 0 ? "alltoall" : "alltoallv")));
    else
      t.emplace_back("alltoallv");
  }
  return t;
}

Result<RankRunStats> RankReshard::Execute(std::span<const std::byte> source, std::span<std::byte> target,
                                          const AfterStep& after_step) {
  State& st = *state_;
  if (st.failed) return Status::Internal("an earlier Execute of this object failed; it runs no more");
  Result<RankRunStats> r = st.Run(source, target, after_step);
  // An error agreed by every rank before any message moved leaves the object usable.
  if (!r.ok() && !st.clean_error) st.failed = true;
  return r;
}

Result<RankRunStats> RankReshard::State::Run(std::span<const std::byte> source, std::span<std::byte> target,
                                             const AfterStep& after_step) {
  State& st = *this;
  st.clean_error = false;
  Status sizes = Status::Ok();
  if (static_cast<int64_t>(source.size()) != st.source_bytes)
    sizes = Status::InvalidArgument(
        fmt::format("its source buffer holds {} bytes; its part of the source layout needs {}", source.size(), st.source_bytes));
  else if (static_cast<int64_t>(target.size()) != st.target_bytes)
    sizes = Status::InvalidArgument(
        fmt::format("its target buffer holds {} bytes; its part of the target layout needs {}", target.size(), st.target_bytes));
  st.clean_error = true;
  // (Not agreed where the caller joins: named by its rank, as an agreed
  // error from one rank is.)
  if (!st.options.joined_by_caller)
    RESHARD_RETURN_IF_ERROR(AgreeStatus(*st.comm, sizes));
  else if (!sizes.ok())
    return Status::InvalidArgument(fmt::format("rank {}: {}", st.rank, sizes.message()));
  st.clean_error = false;
  const auto start = std::chrono::steady_clock::now();
  RankRunStats stats;
  stats.peak_bytes = st.peak_bytes;
  const std::byte* in = source.data();
  // Where program step i writes (an all-reduce run in one call: where its
  // last program step does).
  auto out_of = [&](size_t i) { return i + 1 == st.steps.size() ? target.data() : st.between[i % 2].data(); };
  // Whether program step i's box exchange may end for this rank once it has
  // made its share of the copies: the run's last step, where the caller
  // joins every rank (and its hook waits for every rank) before it reads an
  // output. (Not an earlier step: the next one's packing reads its input
  // before any barrier.)
  auto boxes_end = [&](size_t i) {
    return st.options.joined_by_caller && i + 1 == st.steps.size() ? Comm::BoxesEnd::kOwnCopies
                                                                   : Comm::BoxesEnd::kEveryCopy;
  };
  for (size_t i = 0; i < st.steps.size(); ++i) {
    const StepRun& s = st.steps[i];
    std::byte* out = out_of(i);
    // Per plan step: an all-reduce's two program steps add up.
    if (i == 0 || s.plan_step != st.steps[i - 1].plan_step) {
      stats.step_bytes_sent.push_back(0);
      stats.step_bytes_received.push_back(0);
    }
    // A failed call is returned on the rank it failed on, and the others may
    // wait on this rank: aborting the job is the caller's call to make.
    const int64_t sent = stats.step_bytes_sent.back(), received = stats.step_bytes_received.back();
    if (s.all_reduce) {
      out = out_of(s.through);
      RESHARD_RETURN_IF_ERROR(st.RunAllReduce(s, in, out, stats));
      stats.bytes_moved += s.program->input_bytes;
    } else if (!s.fused) {
      RESHARD_RETURN_IF_ERROR(s.p2p       ? st.RunPointToPoint(s, in, out, stats)
                              : s.boxes   ? st.RunBoxes(s, in, out, boxes_end(i), stats)
                              : s.grouped ? st.RunGrouped(s, in, out, stats)
                                          : st.RunAlltoallv(s, in, out, stats, *st.comm));
      stats.bytes_moved += s.program->unpack.bytes + s.program->local.bytes;
    }
    // What the backend carried (priced chunks: their padding too).
    stats.bytes_sent += stats.step_bytes_sent.back() - sent;
    stats.bytes_received += stats.step_bytes_received.back() - received;
    // (An all-reduce run in one call leaves no output of its first program
    // step: the hook sees its last one's.)
    const bool whole = !s.all_reduce || s.through == i;
    if (after_step && whole) {
      Status hook = after_step(i, std::span<const std::byte>(out, static_cast<size_t>(s.program->output_bytes)));
      st.clean_error = true;  // between steps nothing is in flight
      RESHARD_RETURN_IF_ERROR(AgreeStatus(*st.comm, hook));
      st.clean_error = false;
    }
    in = out;
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace reshard
