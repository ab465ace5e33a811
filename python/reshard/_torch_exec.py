"""Runs one rank's part of a reshard plan on a torch tensor with torch.distributed collectives.

A plan step's program (docs/plan_format.md#program) is the same on every rank: local ops
(reshape, transpose, pad, slice, dynamic-slice) become torch view and copy ops on the local
tensor, and collectives become torch.distributed calls over sub-groups of the plan mesh:

    all-to-all          all_to_all_single, equal chunks of dim 0, over the group of its axes
    all-gather          all_gather_into_tensor over the group of its axes
    collective-permute  batch_isend_irecv of the planned (source, target) pairs
    reduce-scatter      reduce_scatter_tensor over the group of its axes (partial sums; avg as a sum
                        divided by the group's size, which gloo has no op for)
    all-reduce          all_reduce over the group of its axes (the same ops)
    exchange            all_to_all_single with split sizes over the plan's devices; each message
                        packed from, and unpacked into, the runs the C++ exchange names
                        (Step.exchange), so the bytes are the minimal exchange's; from partial
                        sums (a reducing exchange) each part's contributions combined in part order;
                        a relayed one (priced by bytes) first sends each relay's piece to its helper
                        in one more all_to_all_single

The groups come from the C++ mesh (Mesh.groups), and each rank's place in them from the same
call, so the arithmetic lives in one place. Groups are created once per rank set and reused,
by every rank of the world together, as a DeviceMesh's are (GroupCache). Nothing here copies the whole array on a rank unless a layout of
the plan holds it whole there. Works with any torch.distributed backend whose collectives take
the tensors' device (gloo with CPU tensors, NCCL with CUDA tensors).

Buffers between structured steps are the plan's padded shards (Step.input_shard), data first
and zeros after, as the simulator (src/exec/plan_simulator.cc) checks them; the exact local
tensor is cut back out at the end.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist


@dataclass
class RunStats:
    """What one rank moved in one plan run: per step (op, bytes received, bytes sent), counted
    from the sizes handed to the collectives (the bytes of this rank's own chunk excluded)."""
    steps: list = field(default_factory=list)

    @property
    def recv_bytes(self) -> int:
        return sum(s[1] for s in self.steps)

    @property
    def send_bytes(self) -> int:
        return sum(s[2] for s in self.steps)


class GroupCache:
    """torch.distributed process groups by their rank set, created once and reused. A group's
    ranks are numbered in ascending order whatever order its members were listed in.

    Groups are created collectively: every rank of the world calls ensure() with the same
    lists in the same order (each rank plans the same move, SPMD, as DTensor code runs), and
    each missing group is made by a plain dist.new_group on every rank. Creating a group on its
    members alone would advance torch's group counter on those ranks only, and every later
    collective group creation (a DeviceMesh, for one) would then hang."""

    def __init__(self) -> None:
        self._groups: dict = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(ranks) -> tuple:
        return tuple(sorted(int(r) for r in ranks))

    def ensure(self, rank_lists) -> None:
        """Creates, on every rank, each group of rank_lists not made yet (size-1 groups never
        communicate and are skipped). REQUIRES: called by every rank with the same lists."""
        world = dist.get_world_size()
        for ranks in rank_lists:
            key = self._key(ranks)
            if len(key) < 2:
                continue
            with self._lock:
                if key in self._groups:
                    continue
            g = dist.group.WORLD if key == tuple(range(world)) else dist.new_group(list(key))
            with self._lock:
                self._groups[key] = g

    def get(self, ranks) -> object:
        with self._lock:
            g = self._groups.get(self._key(ranks))
        if g is None:
            raise RuntimeError("reshard.torch: process group %s was not created (ensure() first)" % (list(ranks),))
        return g


def plan_groups(plan) -> list:
    """Every group of ranks the plan's collectives run in, in a fixed order: the groups of each
    all-to-all and all-gather over its mesh axes (Mesh.groups), and the plan's ranks for an
    exchange. Collective-permutes are point-to-point on the default group."""
    out = []
    for step in plan.steps:
        for op in step.program:
            if op["op"] in ("all-to-all", "all-gather", "reduce-scatter", "all-reduce"):
                out.extend(plan.mesh.groups(list(op["axes"])))
            elif op["op"] == "exchange":
                out.append(sorted(plan.devices))
    return out


def _combine(a: torch.Tensor, b: torch.Tensor, op: str) -> torch.Tensor:
    """a and b combined element by element by a partial sum's op (avg: summed here)."""
    if op == "max":
        return torch.maximum(a, b)
    if op == "min":
        return torch.minimum(a, b)
    return a + b


def _divide(x: torch.Tensor, parts: int) -> torch.Tensor:
    """avg's last step: the sum over `parts` divided by it; integers truncated toward zero, as C,
    NCCL and reshard's own executors divide."""
    return x / parts if x.is_floating_point() or x.is_complex() else torch.div(x, parts, rounding_mode="trunc")


def _identity(op: str, shape, like: torch.Tensor) -> torch.Tensor:
    """A tensor of `op`'s identity: 0 for sum, the lowest value for max (-inf for floats), the
    highest for min (reduce_kernel.h's StoreIdentity)."""
    if op in ("sum", "avg"):
        return like.new_zeros(shape)
    if like.is_floating_point():
        value = float("-inf") if op == "max" else float("inf")
    else:
        info = torch.iinfo(like.dtype)
        value = info.min if op == "max" else info.max
    return like.new_full(shape, value)


def fit(x: torch.Tensor, shape) -> torch.Tensor:
    """x cut or padded with trailing zeros to `shape` (data first along every dim)."""
    shape = [int(n) for n in shape]
    if list(x.shape) == shape:
        return x
    keep = tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape))
    if all(b <= a for a, b in zip(x.shape, shape)):
        return x[keep]
    out = x.new_zeros(shape)
    out[keep] = x[keep]
    return out


def _indices(runs, device) -> torch.Tensor:
    """The local indices of a dim's (offset, length) runs, in order."""
    if not runs:
        return torch.zeros(0, dtype=torch.long, device=device)
    return torch.cat([torch.arange(o, o + n, device=device) for o, n in runs])


def _take(x: torch.Tensor, runs) -> torch.Tensor:
    """The cross product of per-dim runs of x, row-major (a view where every dim is one run)."""
    for d, r in enumerate(runs):
        x = x.narrow(d, r[0][0], r[0][1]) if len(r) == 1 else x.index_select(d, _indices(r, x.device))
    return x


def _put(out: torch.Tensor, runs, value: torch.Tensor) -> None:
    """Writes value (the runs' extents, row-major) into the cross product of runs of out."""
    value = value.reshape([sum(n for _, n in r) for r in runs])
    if all(len(r) == 1 for r in runs):  # one box: a narrowed view
        view = out
        for d, r in enumerate(runs):
            view = view.narrow(d, r[0][0], r[0][1])
        view.copy_(value)
        return
    idx = []
    for d, r in enumerate(runs):
        shape = [1] * len(runs)
        shape[d] = -1
        idx.append(_indices(r, out.device).view(shape))
    out[tuple(idx)] = value


def _mark(mask: torch.Tensor, runs) -> None:
    """Sets the cross product of runs of a boolean mask."""
    _put(mask, runs, torch.ones(math.prod(sum(n for _, n in r) for r in runs), dtype=torch.bool, device=mask.device))


def _group_order(members, device):
    """A torch process group numbers its ranks in ascending order; a plan's group lists its
    members in mesh order. Returns (to_rank, to_member): index tensors that reorder chunks from
    member order to group-rank order and back, or (None, None) when the two orders agree."""
    ranks = sorted(members)
    if ranks == list(members):
        return None, None
    member_of_rank = [members.index(r) for r in ranks]   # group rank j holds member member_of_rank[j]
    rank_of_member = [ranks.index(m) for m in members]
    return (torch.tensor(member_of_rank, device=device), torch.tensor(rank_of_member, device=device))


def _nbytes(x: torch.Tensor) -> int:
    return x.numel() * x.element_size()


class PlanRun:
    """One rank's executable form of a plan: its groups and exchange parts, found once."""

    def __init__(self, plan, rank: int, groups: GroupCache) -> None:
        self.plan = plan
        self.rank = int(rank)
        self.groups = groups
        self.mesh = plan.mesh
        self.devices = list(plan.devices)
        self._member: dict = {}     # axes -> (group ranks in member order, index of this rank, reorders)
        self._exchange: dict = {}   # step index -> (Step.exchange(rank), ranks, rank -> index, receive sizes)

    def _group_of(self, axes):
        key = tuple(axes)
        hit = self._member.get(key)
        if hit is None:
            if self.mesh is None:
                raise RuntimeError("a structured step without a plan mesh")
            for members in self.mesh.groups(list(axes)):
                if self.rank in members:
                    hit = (members, members.index(self.rank), _group_order(members, None))
                    break
            else:
                raise RuntimeError("rank %d is not in the plan mesh %s" % (self.rank, self.mesh))
            self._member[key] = hit
        return hit

    def run(self, local: torch.Tensor, stats: Optional[RunStats] = None) -> torch.Tensor:
        x = local
        for i, step in enumerate(self.plan.steps):
            padded = step.op != "exchange" or step.input_spec != ""
            x = fit(x, step.input_shard if padded else step.input.local_shape(self.rank))
            for op in step.program:
                x = self._op(i, step, op, x, padded, stats)
        return fit(x, self.plan.target.local_shape(self.rank)).contiguous()

    def _op(self, i, step, op, x, padded, stats):
        kind = op["op"]
        if kind == "reshape":
            return x.reshape(op["shape"])
        if kind == "transpose":
            return x.permute(op["perm"])
        if kind in ("pad", "slice"):
            return fit(x, op["shape"])
        if kind == "dynamic-slice":
            _, index, _ = self._group_of(op["axes"])
            d, n = op["dim"], op["shape"][op["dim"]]
            return x.narrow(d, index * n, n)
        if kind == "all-to-all":
            members, _, (to_rank, to_member) = self._group_of(op["axes"])
            g = len(members)
            x = x.contiguous()
            if to_rank is not None:  # chunk i goes to member i: put it at that member's group rank
                x = x.reshape([g, -1]).index_select(0, to_rank.to(x.device)).reshape(x.shape)
            out = torch.empty_like(x)
            if g > 1:
                dist.all_to_all_single(out, x, group=self.groups.get(members))
            else:
                out.copy_(x)
            if to_member is not None:
                out = out.reshape([g, -1]).index_select(0, to_member.to(x.device)).reshape(x.shape)
            moved = _nbytes(x) * (len(members) - 1) // len(members)
            self._count(stats, kind, moved, moved)
            return out
        if kind == "all-gather":
            members, _, (_, to_member) = self._group_of(op["axes"])
            x = x.contiguous()
            out = x.new_empty([x.shape[0] * len(members)] + list(x.shape[1:]))
            if len(members) > 1:
                dist.all_gather_into_tensor(out, x, group=self.groups.get(members))
            else:
                out.copy_(x)
            if to_member is not None:  # gathered in group-rank order; the program wants member order
                g = len(members)
                out = out.reshape([g, -1]).index_select(0, to_member.to(x.device)).reshape(out.shape)
            self._count(stats, kind, _nbytes(x) * (len(members) - 1), _nbytes(x))
            return out
        if kind in ("reduce-scatter", "all-reduce"):
            return self._reduce(kind, op, x, stats)
        if kind == "collective-permute":
            return self._permute(op, x, stats)
        if kind == "exchange":
            shape = op["shape"] if padded else step.output.local_shape(self.rank)
            return self._exchange_op(i, step, x, shape, stats)
        raise RuntimeError("unknown program op %r" % kind)

    def _reduce(self, kind, op, x, stats):
        """A reduction of partial values over the group of op's axes. The backend combines the
        members' values in its own order (the simulator's fixed member order is exact for
        integers; floats may differ in the last bits, as between any two collective libraries)."""
        members, _, (to_rank, _) = self._group_of(op["axes"])
        g = len(members)
        reduce = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                  "min": dist.ReduceOp.MIN}[op["reduce"]]
        x = x.contiguous()
        if kind == "reduce-scatter":
            if to_rank is not None:  # chunk i is member i's: put it at that member's group rank
                x = x.reshape([g, -1]).index_select(0, to_rank.to(x.device)).reshape(x.shape)
            out = x.new_empty([1] + list(x.shape[1:]))
            if g > 1:
                dist.reduce_scatter_tensor(out, x, op=reduce, group=self.groups.get(members))
            else:
                out.copy_(x)
            moved = _nbytes(out) * (g - 1)
        else:
            out = x.clone()
            if g > 1:
                dist.all_reduce(out, op=reduce, group=self.groups.get(members))
            moved = 2 * (g - 1) * (-(-x.numel() // g)) * x.element_size()  # as a ring moves it, as priced
        if op["reduce"] == "avg":
            out = _divide(out, g)
        self._count(stats, kind, moved, moved)
        return out

    def _count(self, stats, kind, recv, send):
        if stats is not None:
            stats.steps.append((kind, int(recv), int(send)))

    def _permute(self, op, x, stats):
        x = x.contiguous()
        pairs = [(int(s), int(t)) for s, t in op["source_target_pairs"]]
        out = x
        ops = []
        recv_buf = None
        sent = recv = 0
        for s, t in pairs:
            if s == self.rank and t == self.rank:
                out = x
            elif s == self.rank:
                ops.append(dist.P2POp(dist.isend, x, t))
                sent += _nbytes(x)
            elif t == self.rank:
                recv_buf = torch.empty_like(x)
                ops.append(dist.P2POp(dist.irecv, recv_buf, s))
                recv += _nbytes(x)
        if ops:
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        if recv_buf is not None:
            out = recv_buf
        self._count(stats, "collective-permute", recv, sent)
        return out

    def _exchange_part(self, i, step):
        """This rank's part of step i's exchange with its split sizes over the plan's ranks
        (ascending, as a process group numbers them), found once per step."""
        hit = self._exchange.get(i)
        if hit is None:
            part = step.exchange(self.rank)
            group_ranks = sorted(self.devices)
            pos = {r: k for k, r in enumerate(group_ranks)}
            recv_sizes = [0] * len(group_ranks)
            for peer, runs in part["recv"]:
                count = 1
                for r in runs:
                    count *= sum(length for _, length in r)
                recv_sizes[pos[peer]] = count
            hit = self._exchange[i] = (part, group_ranks, pos, recv_sizes)
        return hit

    @staticmethod
    def _reduce_received(part, x, local, recv, recv_sizes, pos, shape):
        """A reducing exchange's output: the parts routed to this rank (its own part is the local
        copies, already in `local`) combined element by element in part order, as the C++ executors
        do (the first part routed to an element writes it, later ones combine with it; with tile
        routes the parts differ from element to element); where no part is routed (a partial
        target), the identity of the target's op."""
        shape = [int(n) for n in shape]
        reached = sorted(set(part["recv_parts"]) | ({part["local_part"]} if part["local"] else set()))
        if not reached:  # no part routed here, or nothing of this rank's output exists (an empty shard)
            return _identity(part["fill"], shape, x) if part["fill"] is not None else local
        out = x.new_zeros(shape)
        written = torch.zeros(shape, dtype=torch.bool, device=x.device)
        for p in reached:
            got = local if p == part["local_part"] else x.new_zeros(shape)
            landed = torch.zeros(shape, dtype=torch.bool, device=x.device)
            if p == part["local_part"]:
                for _, runs in part["local"]:
                    _mark(landed, runs)
            offset = 0
            for (peer, runs), q in zip(part["recv"], part["recv_parts"]):
                n = recv_sizes[pos[peer]]
                if q == p:
                    _put(got, runs, recv[offset:offset + n])
                    _mark(landed, runs)
                offset += n
            out = torch.where(landed & written, _combine(out, got, part["reduce"]), torch.where(landed, got, out))
            written |= landed
        if part["reduce"] == "avg":
            out = torch.where(written, _divide(out, int(part["parts"])), out)
        if part["scale"] != 1:  # an avg target's part holds its share times the target's part count
            out = torch.where(written, out * int(part["scale"]), out)
        if part["fill"] is not None:
            out = torch.where(written, out, _identity(part["fill"], shape, x))
        return out

    def _relay_round(self, part, x, group_ranks, pos, stats):
        """A relayed exchange's first round: each relay's piece of its donor's part goes to its
        helper, which holds the same tile and combines the piece into its own values there (avg as
        a sum); the exchange then reads the result, the donor's message to the keeper without the
        piece (Step.exchange lists both rounds)."""
        send_sizes, recv_sizes, pieces = [0] * len(group_ranks), [0] * len(group_ranks), []
        for peer, runs in part["relay_send"]:
            piece = _take(x, runs).reshape(-1)
            send_sizes[pos[peer]] = piece.numel()
            pieces.append(piece)
        for peer, runs in part["relay_recv"]:
            recv_sizes[pos[peer]] = math.prod(sum(n for _, n in r) for r in runs)
        send = torch.cat(pieces) if pieces else x.new_empty(0)
        recv = x.new_empty(sum(recv_sizes))
        dist.all_to_all_single(recv, send.contiguous(), recv_sizes, send_sizes, group=self.groups.get(group_ranks))
        out = x.clone()
        offset = 0
        for peer, runs in part["relay_recv"]:
            n = recv_sizes[pos[peer]]
            _put(out, runs, _combine(_take(out, runs).reshape(-1), recv[offset:offset + n], part["reduce"]))
            offset += n
        es = x.element_size()
        self._count(stats, "exchange", sum(recv_sizes) * es, sum(send_sizes) * es)
        return out

    def _exchange_op(self, i, step, x, shape, stats):
        part, group_ranks, pos, recv_sizes = self._exchange_part(i, step)
        if "relay_send" in part and len(group_ranks) > 1:
            x = self._relay_round(part, x, group_ranks, pos, stats)
        out = x.new_zeros([int(n) for n in shape])
        for src_runs, dst_runs in part["local"]:
            _put(out, dst_runs, _take(x, src_runs))
        send_sizes = [0] * len(group_ranks)
        pieces = []
        for peer, runs in part["send"]:
            piece = _take(x, runs).reshape(-1)
            send_sizes[pos[peer]] = piece.numel()
            pieces.append(piece)
        send = torch.cat(pieces) if pieces else x.new_empty(0)
        recv = x.new_empty(sum(recv_sizes))
        if len(group_ranks) > 1:
            dist.all_to_all_single(recv, send.contiguous(), recv_sizes, send_sizes,
                                   group=self.groups.get(group_ranks))
        offset = 0
        if "parts" in part:
            out = self._reduce_received(part, x, out, recv, recv_sizes, pos, shape)
        else:
            for peer, runs in part["recv"]:
                n = recv_sizes[pos[peer]]
                _put(out, runs, recv[offset:offset + n])
                offset += n
        es = x.element_size()
        self._count(stats, "exchange", sum(recv_sizes) * es, sum(send_sizes) * es)
        return out
