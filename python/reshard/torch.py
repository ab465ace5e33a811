"""reshard.torch: DTensor redistribution with reshard's plans, on torch.distributed.

    import reshard.torch as rt
    y = rt.redistribute(x, placements=[Shard(1), Shard(1)])   # as x.redistribute(...)
    rt.layout_of(x)                                           # -> reshard.Layout
    print(rt.explain(x, [Shard(1), Shard(1)]))                # DTensor's steps beside reshard's plan

redistribute(dtensor, device_mesh=None, placements=None, *, async_op=False, forward_dtype=None,
backward_dtype=None) takes what DTensor.redistribute takes and returns what it returns: a DTensor
on the same mesh with the new placements, the same global shape and stride, local tensors of the
same shapes, and requires_grad carried through. It is differentiable: the backward moves the
gradient back with the reverse plan. The C++ planner plans the move between the two layouts
(cached per mesh, shape, dtype and placements) and every rank runs its part of the plan with
torch's collectives over sub-groups of the mesh (reshard/_torch_exec.py).

Placements: Shard, Replicate and _StridedShard (torch 2.15's semantics: docs/notations/dtensor.md),
on any mesh rank, uneven shapes included, meshes whose device order is not the rank order
included. Partial sources (partial sums: Partial(), Partial("avg"|"max"|"min")) are reduced by
the plan's reduce-scatter or all-reduce over their mesh dims (reduce_scatter_tensor, all_reduce),
whose replicas share the reduction where there are some (docs/cost_model.md#partial-sums); their
gradient comes back replicated over those dims, as DTensor's does. Partial targets (from any
placements, Partial or not) are one reducing exchange (from a Partial source, where it moves less,
a reduction first): each part (each tile of a part, within each target tile) routed into one part
of the target, combined there, into Partial("avg") of k parts times k (float16: the value in every
part), the rest the identity (0 for sum and avg;
docs/cost_model.md#partial-targets): local values differ from DTensor's (which divides a
Replicate by the mesh size to make Partial()), their reduction is the same array. Where reshard
has no plan (uneven splits that are not XLA's), DTensor.redistribute moves them. Moving between
two different meshes raises NotImplementedError, as DTensor does.

async_op is accepted for DTensor's signature; the move has completed when redistribute returns.

Call redistribute on every rank of the world, as DTensor programs do (SPMD): ranks outside the
DTensor's mesh return at once, but take part in creating the process groups the plan needs
(every rank creates them together, as it creates a DeviceMesh's).

torch is an optional dependency: `pip install 'reshard[torch]'`. `import reshard` works without
it; `import reshard.torch` without it raises ImportError saying how to install it.
"""
from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence

try:
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DeviceMesh, DTensor, Partial, Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
except ImportError as e:  # pragma: no cover (the package's tests run with and without torch)
    raise ImportError("reshard.torch needs PyTorch (torch >= 2.4 with torch.distributed): "
                      "pip install 'reshard[torch]' or pip install torch") from e

import reshard as _reshard
from reshard import _torch_exec
from reshard._torch_exec import RunStats

__all__ = ["redistribute", "layout_of", "mesh_of", "placements_text", "plan_for", "explain", "Explanation",
           "last_run_stats", "cache_info", "clear_cache", "RunStats"]


def _dtype_name(dtype) -> str:
    """reshard's element type for a torch dtype: torch's names ("float32", "bfloat16") are
    reshard.dtype_name's; other types (float8) plan as the type of their size, as there."""
    if isinstance(dtype, str):
        return _reshard.dtype_name(dtype)
    name = str(dtype).replace("torch.", "")
    if name in _reshard._XLA_NAMES:
        return _reshard.dtype_name(name)
    size = torch.empty(0, dtype=dtype).element_size()
    if size in _reshard._BY_SIZE:  # only bytes matter to a plan
        return _reshard._BY_SIZE[size]
    raise ValueError("dtype: %s (%d bytes per element) has no reshard element type" % (dtype, size))


def mesh_of(device_mesh: DeviceMesh) -> _reshard.Mesh:
    """The reshard.Mesh of a DeviceMesh: its dim names (dim0, dim1, ... where it has none) and
    sizes, over its global ranks in row-major order (a reshard device id is a global rank)."""
    if not isinstance(device_mesh, DeviceMesh):
        raise TypeError("device_mesh: expected torch.distributed.DeviceMesh, got %s" % type(device_mesh).__name__)
    names = device_mesh.mesh_dim_names or tuple("dim%d" % i for i in range(device_mesh.ndim))
    sizes = list(device_mesh.mesh.shape)
    ids = [int(r) for r in device_mesh.mesh.flatten().tolist()]
    return _reshard.Mesh(list(zip(names, sizes)), ids)


def _normalize(placements: Sequence, ndim: int) -> tuple:
    """Negative Shard dims counted from the end, once, as DTensor does; one that names no dim of
    an ndim-dim tensor (Shard(-3) of a matrix) is a ValueError, never wrapped again."""
    out = []
    for p in placements:
        if isinstance(p, Shard) and p.dim < 0:
            if p.dim + ndim < 0:
                raise ValueError("placements: %r names no dim of a %d-dim tensor" % (p, ndim))
            if isinstance(p, _StridedShard):
                p = _StridedShard(p.dim + ndim, split_factor=p.split_factor)
            else:
                p = Shard(p.dim + ndim)
        out.append(p)
    return tuple(out)


def placements_text(placements: Sequence) -> str:
    """DTensor placements as reshard's DTensor text ("[Shard(2), Shard(0)]"), which the C++
    notation reads (Partial with its op). Raises TypeError for other objects."""
    parts = []
    for p in placements:
        if isinstance(p, _StridedShard):
            parts.append("_StridedShard(%d, split_factor=%d)" % (p.dim, int(p.split_factor)))
        elif isinstance(p, Shard):
            parts.append("Shard(%d)" % p.dim)
        elif isinstance(p, Replicate):
            parts.append("Replicate()")
        elif isinstance(p, Partial) or (hasattr(p, "is_partial") and p.is_partial()):
            op = str(getattr(p, "reduce_op", "sum"))
            parts.append("Partial()" if op == "sum" else 'Partial("%s")' % op)
        else:
            raise TypeError("placements: %r is not a DTensor placement" % (p,))
    return "[" + ", ".join(parts) + "]" if parts else "()"


def layout_of(x, placements: Optional[Sequence] = None, shape: Optional[Sequence[int]] = None,
              dtype=None) -> _reshard.Layout:
    """The reshard.Layout of a DTensor, or of (device_mesh, placements, shape, dtype): which rank
    holds which elements, as DTensor places them (torch.chunk splits, nested in mesh-dim order)."""
    if isinstance(x, DTensor):
        mesh, placements = x.device_mesh, x.placements if placements is None else placements
        shape, dtype = (tuple(x.shape) if shape is None else shape), (x.dtype if dtype is None else dtype)
    elif isinstance(x, DeviceMesh):
        mesh = x
        if placements is None or shape is None:
            raise TypeError("layout_of(device_mesh, placements, shape, dtype): placements and shape are needed")
    else:
        raise TypeError("layout_of: expected a DTensor or a DeviceMesh, got %s" % type(x).__name__)
    dtype = torch.float32 if dtype is None else dtype
    return _reshard.parse(placements_text(placements), [int(n) for n in shape], _dtype_name(dtype),
                          mesh_of(mesh)).layout


# Plans by (mesh, shape, dtype, source, target, bandwidth_only, memory_cap), least recently used first out.
_CACHE_SIZE = 256
_plans: "collections.OrderedDict[Any, Any]" = collections.OrderedDict()
_runs: dict = {}
_lock = threading.Lock()
_stats = {"hits": 0, "misses": 0}
_groups = _torch_exec.GroupCache()
_local = threading.local()


def _plan_cached(source, target, mesh, bandwidth_only, memory_cap=0):
    key = (str(mesh), tuple(mesh.device_ids), source, target, bool(bandwidth_only), memory_cap or 0)
    with _lock:
        p = _plans.get(key)
        if p is not None:
            _plans.move_to_end(key)
            _stats["hits"] += 1
            return p
        _stats["misses"] += 1
    p = _reshard.plan(source, target, meshes=[mesh], backend="nccl", bandwidth_only=bandwidth_only,
                      memory_cap=memory_cap or None)
    with _lock:
        _plans[key] = p
        while len(_plans) > _CACHE_SIZE:
            _plans.popitem(last=False)
    return p


def _rank_key(p):
    # Modeled times of the two plans come from two models, so they are not compared: on a tie
    # the cost model's plan (first in the min below) is kept.
    return (int(p.stats["collectives"]), int(p.stats["max_recv_bytes"]), int(p.stats["total_bytes"]))


def plan_for(source: _reshard.Layout, target: _reshard.Layout, mesh: _reshard.Mesh, *,
             bandwidth_only: bool = False, memory_cap: "int | str" = 0) -> _reshard.PlanResult:
    """reshard's plan between two layouts over `mesh` (cached). Plans may use every collective
    torch.distributed has, the ragged exchange (all_to_all_single with split sizes) included.

    bandwidth_only=True prices plans by received bytes alone: the busiest rank receives the
    lower bound. Otherwise the plan is the better, by (collectives, bytes into the busiest
    rank, bytes in all), of the cost model's plan and the bytes-only one: on torch.distributed the ragged
    exchange is one call like any collective, so a plan that pads (an all-gather of an uneven
    dim) is used only where it saves a collective.

    memory_cap: the most bytes a rank may hold during a step, as reshard.plan takes it (an int,
    or text such as "64K"; 0: twice its largest source and target shards together, the planner's
    default). Some plans at the bound need more: a
    relayed reducing exchange (from Partial placements) holds a copy of each shard."""
    by_bytes = _plan_cached(source, target, mesh, True, memory_cap)
    if bandwidth_only:
        return by_bytes
    modeled = _plan_cached(source, target, mesh, False, memory_cap)
    return min((modeled, by_bytes), key=_rank_key)


def cache_info() -> dict:
    """Plan cache hits, misses and size."""
    with _lock:
        return {"hits": _stats["hits"], "misses": _stats["misses"], "size": len(_plans), "max_size": _CACHE_SIZE}


def clear_cache() -> None:
    with _lock:
        _plans.clear()
        _runs.clear()


def last_run_stats() -> Optional[RunStats]:
    """What this thread's last redistribute (forward or backward) moved on this rank: per step
    the op and the bytes received and sent, as handed to torch's collectives."""
    return getattr(_local, "stats", None)


def _run(plan, rank: int, local: torch.Tensor) -> torch.Tensor:
    key = (id(plan), rank)
    with _lock:
        r = _runs.get(key)
        if r is None or r.plan is not plan:
            if len(_runs) > 4 * _CACHE_SIZE:  # entries of plans the cache let go
                _runs.clear()
            r = _runs[key] = _torch_exec.PlanRun(plan, rank, _groups)
    stats = RunStats()
    out = r.run(local, stats)
    _local.stats = stats
    return out


class _Move(torch.autograd.Function):
    """The local tensor's move under a plan `fwd`. Its backward is the same Function on the
    gradient's plan `bwd`, whose own backward is `bwd2` (the gradient's layouts the other way),
    so the backward is differentiable too (DTensor's redistribute is twice differentiable).
    `bwd2` is `fwd` only where the layouts hold no partial sums: the gradient of partial sums
    is replicated, so the backward of [Partial()] -> [Replicate()] is Replicate -> Replicate,
    and its own backward moves nothing (running `fwd`, an all-reduce, summed the replicas).
    `out_shape()`: the local shape DTensor gives the result, asked for only
    where it is empty. An empty shard has that shape (a reshard layout says only that the rank holds nothing, and two placements of
    one tensor can both leave a rank empty: [0, 1, 1] or [1, 0, 1]); the gradient comes back in
    the input's."""

    @staticmethod
    def forward(ctx, local, fwd, bwd, bwd2, rank, grad_dtype, out_shape):  # noqa: D401
        ctx.fwd, ctx.bwd, ctx.bwd2, ctx.rank, ctx.grad_dtype, ctx.in_dtype = fwd, bwd, bwd2, rank, grad_dtype, local.dtype
        ctx.in_shape = tuple(local.shape)
        out = _run(fwd(), rank, local.contiguous())
        return out.reshape(out_shape()) if out.numel() == 0 else out

    @staticmethod
    def backward(ctx, grad):
        g = grad
        if ctx.grad_dtype is not None and g.dtype != ctx.grad_dtype:
            g = g.to(ctx.grad_dtype)
        out = _Move.apply(g, ctx.bwd, ctx.bwd2, ctx.bwd, ctx.rank, None, lambda: ctx.in_shape)
        if out.dtype != ctx.in_dtype:
            out = out.to(ctx.in_dtype)
        return out, None, None, None, None, None, None


def redistribute(dtensor: DTensor, device_mesh: Optional[DeviceMesh] = None,
                 placements: Optional[Sequence] = None, *, async_op: bool = False,
                 forward_dtype: Optional[torch.dtype] = None, backward_dtype: Optional[torch.dtype] = None,
                 bandwidth_only: bool = False, memory_cap: "int | str" = 0) -> DTensor:
    """DTensor.redistribute with reshard's plan (see the module docstring). bandwidth_only
    (reshard's own keyword) prices plans by received bytes alone: every rank then receives the
    lower bound, where a plan within memory_cap (plan_for) reaches it."""
    del async_op  # the move has completed on return, which an async caller may rely on too
    # Like DTensor code, every rank of the world calls this (SPMD): groups are created together.
    if not isinstance(dtensor, DTensor):
        raise TypeError("redistribute: expected a DTensor, got %s" % type(dtensor).__name__)
    mesh = device_mesh or dtensor.device_mesh
    if mesh != dtensor.device_mesh:
        raise NotImplementedError("reshard.torch: redistributing to another DeviceMesh is not supported "
                                  "(DTensor.redistribute does not support it either)")
    if placements is None:
        raise RuntimeError("placements is needed for redistribute!")
    if len(placements) != mesh.ndim:
        raise ValueError("placements: %d given for a %d-dim mesh" % (len(placements), mesh.ndim))
    src_placements = tuple(dtensor.placements)
    dst_placements = _normalize(placements, dtensor.ndim)
    if dst_placements == src_placements:  # nothing moves: DTensor's own result (the same local tensor)
        return dtensor.redistribute(mesh, dst_placements, forward_dtype=forward_dtype,
                                    backward_dtype=backward_dtype)
    local = dtensor.to_local()
    if forward_dtype is not None and local.dtype != forward_dtype:
        local = local.to(forward_dtype)
    shape = tuple(dtensor.shape)
    rmesh = mesh_of(mesh)
    partial = any(p.is_partial() for p in src_placements + dst_placements)
    if not (local.is_floating_point() or local.is_complex()) and any(
            p.is_partial() and str(getattr(p, "reduce_op", "sum")) == "avg" for p in src_placements + dst_placements):
        # An average of integers in their own type wraps where the parts' sum leaves its range
        # (200s of uint8 over 4 ranks: 8): DTensor's own handling, as it is, instead.
        return dtensor.redistribute(mesh, dst_placements, forward_dtype=forward_dtype, backward_dtype=backward_dtype)
    try:
        src = layout_of(mesh, src_placements, shape, local.dtype)
        dst = layout_of(mesh, dst_placements, shape, local.dtype)
    except NotImplementedError:
        if not partial:
            raise
        return _dtensor_reduction(dtensor, mesh, dst_placements, forward_dtype, backward_dtype)
    # The gradient moves back in backward_dtype, else in the input's dtype, as DTensor's does; the
    # gradient of partial sums is replicated over their mesh dims (DTensor's rule), on both sides.
    gdt = backward_dtype or dtensor.dtype
    grad_placements = tuple(Replicate() if p.is_partial() else p for p in src_placements)
    grad_out = tuple(Replicate() if p.is_partial() else p for p in dst_placements)
    if gdt == local.dtype and grad_placements == src_placements and grad_out == dst_placements:
        gsrc, gdst = dst, src
    else:
        gsrc, gdst = layout_of(mesh, grad_out, shape, gdt), layout_of(mesh, grad_placements, shape, gdt)
    fwd = lambda: plan_for(src, dst, rmesh, bandwidth_only=bandwidth_only, memory_cap=memory_cap)  # noqa: E731
    bwd = lambda: plan_for(gsrc, gdst, rmesh, bandwidth_only=bandwidth_only, memory_cap=memory_cap)  # noqa: E731
    # The backward's own backward: the gradient's layouts the other way (the forward's, where
    # they are the forward's layouts).
    bwd2 = fwd if (gsrc, gdst) == (dst, src) else (  # noqa: E731
        lambda: plan_for(gdst, gsrc, rmesh, bandwidth_only=bandwidth_only, memory_cap=memory_cap))
    if partial:
        try:
            fwd()
        except NotImplementedError:
            return _dtensor_reduction(dtensor, mesh, dst_placements, forward_dtype, backward_dtype)
    # Every rank, in the mesh or not, plans both directions and creates their groups together
    # (on a sliced mesh, with the ranks of every slice beside it: _sibling_groups).
    plans = (fwd, bwd) if bwd2 is fwd else (fwd, bwd, bwd2)
    _groups.ensure(_sibling_groups(mesh, [g for p in plans for g in _torch_exec.plan_groups(p())]))
    if mesh.get_coordinate() is not None:
        out_shape = lambda: tuple(compute_local_shape_and_global_offset(shape, mesh, dst_placements)[0])  # noqa: E731
        local = _Move.apply(local, fwd, bwd, bwd2, dist.get_rank(), gdt, out_shape)
    return DTensor.from_local(local, mesh, dst_placements, run_check=False, shape=dtensor.shape,
                              stride=dtensor.stride())


def _sibling_groups(mesh: DeviceMesh, groups: list) -> list:
    """The groups to create for a move whose plan runs in `groups` (rank lists of `mesh`).
    torch creates a process group on every rank of the world together, and each rank's
    reshard.torch creates the groups its own plan needs. On a mesh sliced from a larger one
    (mesh2d["x"]: ranks 0 and 2 on ranks 0 and 2, ranks 1 and 3 on the others) the slices
    beside it run the same move on other ranks at the same time (SPMD, as DTensor code does):
    so each group is created for every slice, at the same mesh positions, slices in the root
    mesh's order, and every rank asks for the same groups in the same order. A slice over dims
    the root does not name (a flattened one) is NotImplementedError on every rank."""
    root = mesh._get_root_mesh() if hasattr(mesh, "_get_root_mesh") else mesh
    if root is mesh or root.mesh.numel() == mesh.mesh.numel() or all(len(set(g)) < 2 for g in groups):
        return groups  # (groups of one rank are never created)
    names, root_names = tuple(mesh.mesh_dim_names or ()), tuple(root.mesh_dim_names or ())
    if not names or any(n not in root_names for n in names):
        raise NotImplementedError("reshard.torch: a mesh sliced over dims its root mesh does not name (%s of %s) "
                                  "is not supported" % (names, root_names))
    kept = [root_names.index(n) for n in names]
    others = [d for d in range(root.ndim) if d not in kept]
    slices = root.mesh.permute(*others, *kept).reshape(-1, mesh.mesh.numel()).tolist()
    position = {int(r): i for i, r in enumerate(mesh.mesh.flatten().tolist())}
    out = []
    for ranks in slices:
        for g in groups:
            out.append([int(ranks[position[int(r)]]) for r in g])
    return out


def _dtensor_reduction(dtensor, mesh, dst_placements, forward_dtype, backward_dtype):
    """Partial sums reshard has no plan for (uneven torch.chunk splits, Partial dims with
    different ops): DTensor's own reduction, where its result is right. Every rank decides alike."""
    if mesh.mesh.flatten().tolist() != sorted(mesh.mesh.flatten().tolist()):
        # torch 2.15's own redistribute gives wrong values on such meshes (docs/torch.md).
        raise NotImplementedError("reshard.torch: these partial sums have no reshard plan (uneven splits or mixed "
                                  "ops), and DTensor's own redistribute is wrong on a mesh whose device order is "
                                  "not the rank order")
    _local.stats = None  # nothing of reshard's ran
    return dtensor.redistribute(mesh, dst_placements, forward_dtype=forward_dtype, backward_dtype=backward_dtype)


@dataclass
class Explanation:
    """DTensor's redistribution beside reshard's plan for one (mesh, shape, dtype, placements) pair.
    reshard's bytes are into the busiest rank. DTensor's steps are the transforms torch's own
    planner chooses (torch.distributed.tensor._redistribute), one per mesh dim that changes, as
    it plans them, priced into a rank that holds full chunks; on CPU process groups DTensor
    runs an all-to-all as an all-gather and a chunk, which moves more."""
    source: str
    target: str
    mesh: str
    shape: tuple
    dtype: str
    dtensor_steps: list
    dtensor_max_recv_bytes: Optional[int]
    reshard_steps: list
    reshard_max_recv_bytes: int
    lower_bound_max_recv_bytes: int
    plan: Any

    def __str__(self) -> str:
        lines = ["%s %s on mesh %s: %s -> %s" % (self.dtype, list(self.shape), self.mesh, self.source, self.target),
                 "  DTensor: " + (", ".join(self.dtensor_steps) or "nothing moves") + (
                     "" if self.dtensor_max_recv_bytes is None else ", %d B into a rank" % self.dtensor_max_recv_bytes),
                 "  reshard: %s, %d B into the busiest rank (lower bound %d B)" % (
                     ", ".join(self.reshard_steps) or "nothing moves", self.reshard_max_recv_bytes,
                     self.lower_bound_max_recv_bytes)]
        return "\n".join(lines)


def _dtensor_steps(dtensor: DTensor, placements: tuple) -> tuple:
    """The transforms DTensor's redistribute plans for this move (its private planner), each with
    the bytes it brings into a rank that holds a full chunk, priced from the shapes DTensor pads
    to (an all-gather receives k-1 padded chunks, an all-to-all (k-1)/k of the padded local
    tensor). ([], None) when this torch has no planner we can read."""
    try:
        from torch.distributed.tensor._dtensor_spec import DTensorSpec
        from torch.distributed.tensor._redistribute import _gen_transform_infos
        src = dtensor._spec
        dst = DTensorSpec(dtensor.device_mesh, placements, tensor_meta=src.tensor_meta)
        infos = _gen_transform_infos(src, dst)
    except Exception:  # noqa: BLE001 (a private API: absent or changed in other torch versions)
        return [], None
    steps, total = [], 0
    elem = torch.empty(0, dtype=dtensor.dtype).element_size()
    for t in infos:
        a, b = t.src_dst_placements
        k = dtensor.device_mesh.size(t.mesh_dim)
        shape = [int(n) for n in t.logical_shape]
        numel = 1
        for n in shape:
            numel *= n
        if a.is_partial() and b.is_replicate():  # all-reduce, as a ring moves it
            op, recv = "all-reduce", 2 * (k - 1) * -(-numel // k) * elem
        elif a.is_partial() and not b.is_partial():  # reduce-scatter of padded chunks
            d = b.dim
            chunk = -(-shape[d] // k) * (numel // shape[d] if shape[d] else 0)
            op, recv = "reduce-scatter", (k - 1) * chunk * elem
        elif b.is_replicate() and not a.is_replicate():
            d = a.dim
            chunk = -(-shape[d] // k) * (numel // shape[d] if shape[d] else 0)
            op, recv = "all-gather", (k - 1) * chunk * elem
        elif a.is_replicate():
            op, recv = "local chunk", 0
        elif b.is_partial() or a.is_partial():
            op, recv = "reduction", 0
        else:
            d = a.dim
            local = -(-shape[d] // k) * (numel // shape[d] if shape[d] else 0)
            op, recv = "all-to-all", local * (k - 1) // k * elem
        total += recv
        steps.append("%s over mesh dim %d (%s -> %s) %d B" % (op, t.mesh_dim, a, b, recv))
    return steps, total


def explain(dtensor: DTensor, placements: Sequence, *, bandwidth_only: bool = False,
            memory_cap: "int | str" = 0) -> Explanation:
    """What redistribute(dtensor, placements=...) does, beside what DTensor.redistribute does."""
    mesh = dtensor.device_mesh
    dst_placements = _normalize(placements, dtensor.ndim)
    src = layout_of(dtensor)
    dst = layout_of(mesh, dst_placements, tuple(dtensor.shape), dtensor.dtype)
    p = plan_for(src, dst, mesh_of(mesh), bandwidth_only=bandwidth_only, memory_cap=memory_cap)
    steps = ["%s over %s" % (s.op, "(" + ",".join(s.group) + ")") if s.group else s.op for s in p.steps]
    dt_steps, dt_bytes = _dtensor_steps(dtensor, dst_placements)
    return Explanation(placements_text(dtensor.placements), placements_text(dst_placements), str(mesh_of(mesh)),
                       tuple(dtensor.shape), _dtype_name(dtensor.dtype), dt_steps, dt_bytes,
                       steps, int(p.stats["max_recv_bytes"]), int(p.lower_bound["max_recv_bytes"]), p)
