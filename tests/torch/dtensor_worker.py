"""The reshard.torch suite's ranks: 8 gloo processes on CPU run every case, and rank 0 writes
what each rank saw to a JSON file that test_dtensor.py checks.

    python tests/torch/dtensor_worker.py OUT.json [--cases 300] [--seed 0]

Truth for a layout is torch's own split: the local tensor of a rank is made by applying each
mesh dim's placement._split_tensor (torch.chunk, _StridedShard's strided split) in mesh-dim order
to the full tensor, as distribute_tensor does; reshard's layouts are never used to build it.
Bytes are counted three ways: by reshard.torch (last_run_stats), by a wrapper around the
torch.distributed collectives it calls, and from the plan (Step.recv_bytes). DTensor's bytes are
counted by a dispatch mode around its functional collectives.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import traceback
import zlib

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DeviceMesh, DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard
from torch.utils._python_dispatch import TorchDispatchMode

WORLD = 8


# ---- truth -------------------------------------------------------------------------------------

def split_local(full: torch.Tensor, mesh: DeviceMesh, placements) -> torch.Tensor:
    coord = mesh.get_coordinate()
    local = full
    for i, p in enumerate(placements):
        if isinstance(p, Replicate):
            continue
        shards, _ = p._split_tensor(local, mesh.size(i), with_padding=False)
        local = shards[coord[i]]
    return local.contiguous()


def make_dtensor(full, mesh, placements, requires_grad=False):
    local = split_local(full, mesh, placements).clone()
    if requires_grad:
        local.requires_grad_(True)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=full.shape, stride=full.stride()), local


# ---- byte counters ---------------------------------------------------------------------------

class CollectiveBytes:
    """Wraps the torch.distributed calls reshard.torch makes and counts the bytes this rank
    receives from other ranks."""

    def __init__(self):
        self.recv = 0
        self.calls = 0
        self._orig = {}

    def __enter__(self):
        d = dist

        def a2a(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
            g = dist.get_world_size(group)
            me = dist.get_rank(group)
            if output_split_sizes is None:
                self.recv += output.numel() * output.element_size() * (g - 1) // g
            else:
                elem = output.element_size() * (output[0].numel() if output.dim() > 1 else 1)
                self.recv += (sum(output_split_sizes) - output_split_sizes[me]) * elem
            self.calls += 1
            return self._orig["all_to_all_single"](output, input, output_split_sizes, input_split_sizes,
                                                   group=group, async_op=async_op)

        def ag(output, input, group=None, async_op=False):
            self.recv += (output.numel() - input.numel()) * output.element_size()
            self.calls += 1
            return self._orig["all_gather_into_tensor"](output, input, group=group, async_op=async_op)

        def p2p(ops):
            for op in ops:
                if op.op is dist.irecv or getattr(op.op, "__name__", "") == "irecv":
                    self.recv += op.tensor.numel() * op.tensor.element_size()
            self.calls += 1
            return self._orig["batch_isend_irecv"](ops)

        def rs(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
            self.recv += output.numel() * output.element_size() * (dist.get_world_size(group) - 1)
            self.calls += 1
            return self._orig["reduce_scatter_tensor"](output, input, op=op, group=group, async_op=async_op)

        def ar(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
            g = dist.get_world_size(group)  # as a ring moves it, as reshard prices it
            self.recv += 2 * (g - 1) * -(-tensor.numel() // g) * tensor.element_size()
            self.calls += 1
            return self._orig["all_reduce"](tensor, op=op, group=group, async_op=async_op)

        for name, fn in (("all_to_all_single", a2a), ("all_gather_into_tensor", ag), ("batch_isend_irecv", p2p),
                         ("reduce_scatter_tensor", rs), ("all_reduce", ar)):
            self._orig[name] = getattr(d, name)
            setattr(d, name, fn)
        return self

    def __exit__(self, *exc):
        for name, fn in self._orig.items():
            setattr(dist, name, fn)


class DTensorBytes(TorchDispatchMode):
    """Counts the bytes this rank receives through DTensor's functional collectives."""

    def __init__(self):
        super().__init__()
        self.recv = 0
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket)
        if "c10d_functional" in name and "wait_tensor" not in name:
            short = name.split(".")[-1]
            x = args[0]
            nbytes = x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0
            if short.startswith("all_gather_into_tensor"):
                self.recv += nbytes * (int(args[1]) - 1)
            elif short.startswith("all_to_all_single"):
                from torch.distributed.distributed_c10d import _resolve_process_group
                g = _resolve_process_group(args[3])
                me = dist.get_rank(g)
                outs = list(args[1])
                rowb = (x[0].numel() if x.dim() > 1 else 1) * x.element_size()
                self.recv += (sum(outs) - outs[me]) * rowb
            elif short.startswith("reduce_scatter_tensor"):
                self.recv += nbytes * (int(args[2]) - 1) // int(args[2])
            elif short.startswith("all_reduce"):  # as a ring moves it, as reshard prices it
                from torch.distributed.distributed_c10d import _resolve_process_group
                k = dist.get_world_size(_resolve_process_group(args[2]))
                self.recv += 2 * (k - 1) * -(-x.numel() // k) * x.element_size()
            self.ops.append(short)
        return out


# ---- cases -------------------------------------------------------------------------------------

def meshes():
    ms = {
        "8": DeviceMesh("cpu", torch.arange(8), mesh_dim_names=("a",)),
        "4x2": DeviceMesh("cpu", torch.arange(8).reshape(4, 2), mesh_dim_names=("x", "y")),
        "2x2x2": DeviceMesh("cpu", torch.arange(8).reshape(2, 2, 2), mesh_dim_names=("a", "b", "c")),
        # a device order that is not the rank order
        "4x2-perm": DeviceMesh("cpu", torch.tensor([[3, 1], [0, 2], [7, 5], [6, 4]]), mesh_dim_names=("p", "q")),
    }
    # Sliced meshes: each rank's slice holds other ranks, and every slice runs the same move.
    ms["4x2[x]"] = ms["4x2"]["x"]
    ms["2x2x2[a,c]"] = ms["2x2x2"]["a", "c"]
    return ms


def random_placements(rng, ndim_mesh, rank):
    out = []
    for _ in range(ndim_mesh):
        r = rng.random()
        if r < 0.3 or rank == 0:
            out.append(Replicate())
        elif r < 0.8:
            out.append(Shard(rng.randrange(rank)))
        else:
            out.append(_StridedShard(rng.randrange(rank), split_factor=rng.choice([2, 3, 4])))
    return tuple(out)


def random_cases(n, seed):
    rng = random.Random(seed)
    names = ["8", "4x2", "2x2x2", "4x2-perm", "4x2[x]", "2x2x2[a,c]"]
    ndims = {"8": 1, "4x2": 2, "2x2x2": 3, "4x2-perm": 2, "4x2[x]": 1, "2x2x2[a,c]": 2}
    cases = []
    while len(cases) < n:
        m = names[len(cases) % len(names)]
        rank = rng.randint(1, 3)
        shape = tuple(rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16]) for _ in range(rank))
        src = random_placements(rng, ndims[m], rank)
        dst = random_placements(rng, ndims[m], rank)
        if src == dst:
            continue
        dtype = rng.choice([torch.float32, torch.float32, torch.int64, torch.bfloat16])
        cases.append(("random", m, shape, dtype, src, dst))
    return cases


def named_cases():
    S, R, SS = Shard, Replicate, _StridedShard
    return [
        ("report", "4x2", (16, 16, 16), torch.float32, (S(2), S(0)), (S(1), S(1))),
        ("pytorch#132751", "4x2", (16, 16), torch.float32, (S(0), S(1)), (S(1), S(0))),
        ("strided->shard", "4x2", (32, 8), torch.float32, (SS(0, split_factor=2), S(0)), (S(0), S(0))),
        ("shard->strided", "4x2", (32, 8), torch.float32, (S(0), S(0)), (SS(0, split_factor=2), S(0))),
        ("strided->replicate", "4x2", (32, 8), torch.float32, (SS(0, split_factor=2), S(0)), (R(), R())),
        ("strided->cols", "4x2", (32, 8), torch.float32, (SS(0, split_factor=2), S(0)), (S(1), R())),
        ("strided uneven", "4x2", (13, 5), torch.float32, (SS(0, split_factor=2), S(0)), (S(1), S(0))),
        ("uneven", "4x2", (10, 7), torch.float32, (S(0), S(1)), (S(1), S(0))),
        ("uneven 3-d", "2x2x2", (5, 3, 7), torch.float32, (S(0), S(2), R()), (S(2), S(1), S(0))),
    ]


def dtensor_order_baseline(plan):
    """The plan's "dtensor_order" baseline (DTensor's own sequence, priced), or None."""
    return next((b for b in plan.baselines if b["name"] == "dtensor_order"), None)


def expected_bytes(plan, rank):
    devices = list(plan.devices)
    if rank not in devices:
        return 0
    i = devices.index(rank)
    return int(sum(s.recv_bytes[i] for s in plan.steps))


def run_case(case, mesh, rt, out):
    kind, mname, shape, dtype, src, dst = case
    n = 1
    for s in shape:
        n *= s
    # the same data on every rank (hash() of text differs between processes)
    g = torch.Generator().manual_seed(zlib.crc32(repr((mname, shape, str(src), str(dst))).encode()))
    full = (torch.randint(-1000, 1000, shape, generator=g)).to(dtype)
    x, _ = make_dtensor(full, mesh, src)
    want = split_local(full, mesh, dst)
    rec = {"kind": kind, "mesh": mname, "shape": list(shape), "dtype": str(dtype).replace("torch.", ""),
           "src": rt.placements_text(src), "dst": rt.placements_text(dst)}
    # reshard.torch, default plan
    with CollectiveBytes() as wrap:
        y = rt.redistribute(x, placements=dst)
    st = rt.last_run_stats()
    rec["exact"] = bool(torch.equal(y.to_local(), want)) and list(y.to_local().shape) == list(want.shape)
    rec["placements_ok"] = tuple(y.placements) == tuple(dst)
    rec["shape_ok"] = tuple(y.shape) == tuple(full.shape)
    rec["recv"] = st.recv_bytes if st is not None else 0
    rec["wrapped_recv"] = wrap.recv
    plan = rt.plan_for(rt.layout_of(x), rt.layout_of(mesh, dst, shape, dtype), rt.mesh_of(mesh))
    rec["planned_recv"] = expected_bytes(plan, dist.get_rank())
    rec["collectives"] = int(plan.stats["collectives"])
    rec["ops"] = [s.op for s in plan.steps]
    rec["lower_bound"] = int(plan.lower_bound["max_recv_bytes"])
    if kind == "report":
        e = rt.explain(x, dst)
        rec["explain"] = [e.dtensor_max_recv_bytes, e.reshard_max_recv_bytes, e.lower_bound_max_recv_bytes]
    # planned by bytes
    yb = rt.redistribute(x, placements=dst, bandwidth_only=True)
    stb = rt.last_run_stats()
    rec["exact_bw"] = bool(torch.equal(yb.to_local(), want))
    rec["recv_bw"] = stb.recv_bytes if stb is not None else 0
    pb = rt.plan_for(rt.layout_of(x), rt.layout_of(mesh, dst, shape, dtype), rt.mesh_of(mesh), bandwidth_only=True)
    rec["max_recv_bw_plan"] = int(pb.stats["max_recv_bytes"])
    # DTensor's own. torch 2.15's DTensor raises on some ranks only for some _StridedShard moves,
    # and the others then hang in its next collective, so random _StridedShard pairs are
    # compared with the truth alone (the named ones run DTensor too).
    if kind == "random" and any(isinstance(p, _StridedShard) for p in src + dst):
        rec["stride_ok"] = tuple(y.stride()) == tuple(full.stride())
        rec["dtensor_skipped"] = True
        out.append(rec)
        return
    mode = DTensorBytes()
    try:
        with mode:
            ref = x.redistribute(placements=dst)
        rec["dtensor_exact"] = bool(torch.equal(ref.to_local(), want))
        rec["stride_ok"] = tuple(y.stride()) == tuple(ref.stride())
        rec["dtensor_recv"] = mode.recv
        rec["dtensor_ops"] = mode.ops
    except Exception as e:  # noqa: BLE001 (DTensor refuses some _StridedShard moves)
        rec["dtensor_error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
        rec["stride_ok"] = tuple(y.stride()) == tuple(full.stride())
    out.append(rec)


def autograd_cases(mesh, rt, out):
    """The backward moves the gradient back: the same local gradients as DTensor's."""
    S, R, SS = Shard, Replicate, _StridedShard
    for src, dst, shape in [((S(2), S(0)), (S(1), S(1)), (16, 16, 16)), ((S(0), S(1)), (R(), S(0)), (9, 6)),
                            ((SS(0, split_factor=2), S(0)), (S(1), R()), (16, 4))]:
        full = torch.randn(shape, generator=torch.Generator().manual_seed(7))
        w = torch.randn(shape, generator=torch.Generator().manual_seed(8))
        grads = []
        for use_reshard in (True, False):
            x, leaf = make_dtensor(full, mesh, src, requires_grad=True)
            y = rt.redistribute(x, placements=dst) if use_reshard else x.redistribute(placements=dst)
            wl = split_local(w, mesh, dst)
            (y.to_local() * wl).sum().backward()
            grads.append(leaf.grad.clone())
            if use_reshard:
                req = y.requires_grad
        want = split_local(w, mesh, src)
        # twice differentiable, as DTensor's is: d/dx of (d/dx sum(y^2 * w)) . v
        second = []
        for use_reshard in (True, False):
            x, leaf = make_dtensor(full, mesh, src, requires_grad=True)
            y = rt.redistribute(x, placements=dst) if use_reshard else x.redistribute(placements=dst)
            wl = split_local(w, mesh, dst)
            (g,) = torch.autograd.grad((y.to_local() ** 2 * wl).sum(), leaf, create_graph=True)
            (g * split_local(full, mesh, src)).sum().backward()
            second.append(leaf.grad.clone())
        out.append({"kind": "autograd", "second_order_equals_dtensor": bool(torch.allclose(second[0], second[1])), "src": rt.placements_text(src), "dst": rt.placements_text(dst),
                    "requires_grad": bool(req), "grad_exact": bool(torch.allclose(grads[0], want)),
                    "grad_equals_dtensor": bool(torch.allclose(grads[0], grads[1]))})


def partial_autograd_cases(mesh, rt, out):
    """Twice differentiable from and into partial sums, as DTensor's redistribute is: the
    gradient of partial sums is replicated, so the backward of [Partial()] -> [Replicate()] is
    Replicate -> Replicate, and its own backward moves nothing (it ran the forward all-reduce,
    and the second-order gradient came out times the ranks summed)."""
    S, R, P = Shard, Replicate, Partial
    for src, dst, shape in [((P(), S(0)), (R(), S(0)), (8, 6)), ((S(0), P()), (S(1), R()), (8, 8)),
                            ((P("max"), R()), (R(), R()), (4, 6)), ((R(), S(0)), (S(1), P()), (8, 8))]:
        full = torch.randn(shape, generator=torch.Generator().manual_seed(9))
        w = torch.randn(shape, generator=torch.Generator().manual_seed(10))
        v = torch.randn(shape, generator=torch.Generator().manual_seed(11))
        plain = tuple(R() if p.is_partial() else p for p in src)
        results = []
        for use_reshard in (True, False):
            leaf = split_local(full, mesh, plain).clone().requires_grad_(True)
            x = DTensor.from_local(leaf, mesh, src, run_check=False, shape=full.shape, stride=full.stride())
            y = rt.redistribute(x, placements=dst) if use_reshard else x.redistribute(placements=dst)
            wl = split_local(w, mesh, tuple(R() if p.is_partial() else p for p in dst)).clone().requires_grad_(True)
            (g,) = torch.autograd.grad((y.to_local() * wl).sum(), leaf, create_graph=True)
            (d2,) = torch.autograd.grad((g * split_local(v, mesh, plain)).sum(), wl)
            results.append((g.detach().clone(), d2.clone()))
        out.append({"kind": "partial-autograd", "src": rt.placements_text(src), "dst": rt.placements_text(dst),
                    "grad_equals_dtensor": bool(torch.allclose(results[0][0], results[1][0])),
                    "second_order_equals_dtensor": bool(torch.allclose(results[0][1], results[1][1])),
                    "second_order": results[0][1].flatten()[:4].tolist(),
                    "dtensor_second_order": results[1][1].flatten()[:4].tolist()})


def flattened_case(rt, out):
    """pytorch PR #194457: with a flattened mesh present, DTensor returned wrong values. The mesh
    is ranks 0-3; every rank calls redistribute (SPMD), and afterwards every rank can still build
    a new DeviceMesh and move on it (the groups reshard.torch made kept the ranks in step)."""
    from torch.distributed.tensor import distribute_tensor
    mesh = DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("a", "b"))
    mesh["a", "b"]._flatten()
    full = torch.arange(15, dtype=torch.float32).reshape(5, 3)
    x = distribute_tensor(full, mesh, (Shard(0), Shard(0)))
    y = rt.redistribute(x, placements=(Replicate(), Replicate()))
    later = DeviceMesh("cpu", torch.arange(8).reshape(2, 4), mesh_dim_names=("u", "v"))
    z = rt.redistribute(distribute_tensor(full, later, (Shard(0), Shard(1))), placements=(Shard(1), Replicate()))
    rec = {"kind": "flattened", "later_mesh_exact": bool(torch.equal(z.to_local(), split_local(full, later, (Shard(1), Replicate()))))}
    if mesh.get_coordinate() is not None:
        rec["exact"] = bool(torch.equal(y.to_local(), full))
        out.append(rec)
    else:
        rec["outside"] = True
        out.append(rec)


def same_placements_case(mesh, rt, out):
    """Equal placements move nothing and keep the local tensor, as DTensor does."""
    full = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    x, _ = make_dtensor(full, mesh, (Shard(0), Replicate()))
    y = rt.redistribute(x, placements=(Shard(-2), Replicate()))
    out.append({"kind": "same", "same_local": y._local_tensor is x._local_tensor,
                "placements_ok": tuple(y.placements) == (Shard(0), Replicate())})


def partial_parts(full, mesh, placements, op, seed):
    """This rank's local partial value: partial values P_c, one per coordinate c over the Partial
    mesh dims (row-major), whose reduction by `op` is `full` exactly (integers: sum and max; avg
    with float64 whose sums are exact), split as the other placements split."""
    dims = [i for i, p in enumerate(placements) if p.is_partial()]
    coord = mesh.get_coordinate()
    count, mine = 1, 0
    for i in dims:
        count, mine = count * mesh.size(i), mine * mesh.size(i) + coord[i]
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randint(-50, 50, full.shape, generator=g).to(full.dtype) for _ in range(count - 1)]
    if op == "max":
        parts = [full - p.abs() - 1 for p in parts]  # below full: the last part, full itself, wins
        last = full.clone()
    elif op == "avg":
        last = full * count - sum(parts, torch.zeros_like(full))
    else:
        last = full - sum(parts, torch.zeros_like(full))
    part = (parts + [last])[mine]
    plain = tuple(Replicate() if p.is_partial() else p for p in placements)
    return split_local(part, mesh, plain)


def _partial_draw(rng, i, meshes_by_name):
    """Case i's mesh (its name and DeviceMesh, in turn), tensor rank, shape (even, or for every
    third case uneven: where no structured plan applies, the reducing exchange) and op."""
    m = ["8", "4x2", "2x2x2", "4x2-perm"][i % 4]
    rank = rng.randint(1, 2)
    shape = tuple(rng.choice([8, 16]) for _ in range(rank)) if i % 3 else tuple(rng.choice([3, 5, 7]) for _ in range(rank))
    return m, meshes_by_name[m], rank, shape, rng.choice(["sum", "sum", "max", "avg"])


def partial_cases(meshes_by_name, rt, out, n, seed):
    """Partial sources to random targets: values equal torch's split of the reduced tensor on
    every rank; bytes counted three ways agree; DTensor's own result where it runs."""
    rng = random.Random(seed + 17)
    for i in range(n):
        m, mesh, rank, shape, op = _partial_draw(rng, i, meshes_by_name)
        while True:
            src = list(random_placements(rng, mesh.ndim, rank))
            src = [Partial(op) if (isinstance(p, Replicate) or rng.random() < 0.3) else p for p in src]
            src = [p if not isinstance(p, _StridedShard) else Shard(p.dim) for p in src]
            if any(p.is_partial() for p in src):
                break
        dst = tuple(p if not isinstance(p, _StridedShard) else Shard(p.dim)
                    for p in random_placements(rng, mesh.ndim, rank))
        src = tuple(src)
        dtype = torch.float64 if op == "avg" else torch.int64
        g = torch.Generator().manual_seed(zlib.crc32(repr((m, shape, str(src), str(dst))).encode()))
        full = torch.randint(-1000, 1000, shape, generator=g).to(dtype)
        local = partial_parts(full, mesh, src, op, zlib.crc32(repr((i, m)).encode()))
        x = DTensor.from_local(local, mesh, src, run_check=False, shape=full.shape, stride=full.stride())
        want = split_local(full, mesh, dst)
        rec = {"kind": "partial", "mesh": m, "shape": list(shape), "op": op, "src": rt.placements_text(src),
               "dst": rt.placements_text(dst)}
        with CollectiveBytes() as wrap:
            y = rt.redistribute(x, placements=dst, bandwidth_only=bool(i % 2))
        st = rt.last_run_stats()
        rec["exact"] = bool(torch.equal(y.to_local(), want)) and tuple(y.placements) == dst
        plan = lambda: rt.plan_for(rt.layout_of(x), rt.layout_of(mesh, dst, shape, dtype),  # noqa: E731
                                   rt.mesh_of(mesh), bandwidth_only=bool(i % 2))
        rec["recv"] = st.recv_bytes if st is not None else 0
        rec["wrapped_recv"] = wrap.recv
        try:
            rec["ops"] = [s.op for s in plan().steps]
            rec["max_recv"] = int(plan().stats["max_recv_bytes"])
            rec["lower_bound"] = int(plan().lower_bound["max_recv_bytes"])
            rec["planned_recv"] = expected_bytes(plan(), dist.get_rank())
        except NotImplementedError:  # no plan: DTensor's own reduction ran
            rec["ops"], rec["max_recv"], rec["lower_bound"], rec["planned_recv"] = ["dtensor"], 0, 0, rec["recv"]
        if m != "4x2-perm" and op == "sum":  # DTensor's own, where its device order is the rank order
            try:
                mode = DTensorBytes()
                with mode:
                    ref = x.redistribute(placements=dst)
                rec["dtensor_exact"] = bool(torch.equal(ref.to_local(), want))
                rec["dtensor_recv"] = mode.recv
                if rec["ops"] != ["dtensor"]:
                    base = dtensor_order_baseline(plan())
                    if base:
                        rec["dtensor_baseline"] = int(base["max_recv_bytes"])
                        rec["dtensor_baseline_ops"] = list(base["ops"])
            except Exception as e:  # noqa: BLE001
                rec["dtensor_error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
        out.append(rec)
    # The DTensor rows, f32[16,16] on the 4x2 mesh: bytes into the busiest rank, reshard's
    # (its cost model's plan, and by bytes) against DTensor's own.
    mesh = meshes_by_name["4x2"]
    full = torch.arange(256, dtype=torch.float32).reshape(16, 16)
    for src, dst in (((Partial(), Shard(0)), (Shard(0), Shard(0))), ((Partial(), Replicate()), (Shard(0), Replicate())),
                     ((Partial(), Replicate()), (Replicate(), Replicate()))):
        local = partial_parts(full, mesh, src, "sum", 7)
        x = DTensor.from_local(local, mesh, src, run_check=False, shape=full.shape, stride=full.stride())
        rec = {"kind": "partial-named", "src": rt.placements_text(src), "dst": rt.placements_text(dst)}
        want = split_local(full, mesh, dst)
        y = rt.redistribute(x, placements=dst)
        rec["recv"] = rt.last_run_stats().recv_bytes
        yb = rt.redistribute(x, placements=dst, bandwidth_only=True)
        rec["recv_bw"] = rt.last_run_stats().recv_bytes
        rec["exact"] = bool(torch.equal(y.to_local(), want) and torch.equal(yb.to_local(), want))
        # With memory for a relayed exchange (a copy of each shard): the bound where direct delivery misses it.
        yr = rt.redistribute(x, placements=dst, bandwidth_only=True, memory_cap=4096)
        rec["recv_relayed"] = rt.last_run_stats().recv_bytes
        rec["exact"] = rec["exact"] and bool(torch.equal(yr.to_local(), want))
        pr = rt.plan_for(rt.layout_of(x), rt.layout_of(mesh, dst, (16, 16), torch.float32), rt.mesh_of(mesh),
                         bandwidth_only=True, memory_cap=4096)
        rec["relays"] = sum(len(s.relays) for s in pr.steps)
        mode = DTensorBytes()
        with mode:
            ref = x.redistribute(placements=dst)
        rec["dtensor_recv"] = mode.recv
        rec["dtensor_exact"] = bool(torch.equal(ref.to_local(), want))
        p = rt.plan_for(rt.layout_of(x), rt.layout_of(mesh, dst, (16, 16), torch.float32), rt.mesh_of(mesh))
        rec["lower_bound"] = int(p.lower_bound["max_recv_bytes"])
        base = dtensor_order_baseline(p)
        rec["dtensor_baseline"] = int(base["max_recv_bytes"]) if base else None
        out.append(rec)


def partial_target_cases(meshes_by_name, rt, out, n, seed):
    """Random placements, Partial or not, into random placements with a Partial (issue 17): the
    target's reduction, made by reshard and (where DTensor's own is right) by DTensor's
    full_tensor, equals the array on every rank; the bytes as planned; the gradient of a sum
    comes back as DTensor's rule states (replicated over the Partial dims)."""
    rng = random.Random(seed + 29)
    # First, partial sources whose parts are routed tile by tile (same op, and other ops: every
    # part of a tile into one target part), then random pairs.
    # Then the same Partial placements on both sides: the parts moved alike by collectives
    # (docs/cost_model.md, "Parts moved alike"): an all-to-all, an all-gather.
    fixed = [((Partial(), Shard(0)), (Partial(), Partial()), "sum", "sum"),
             ((Partial("max"), Shard(0)), (Shard(1), Partial()), "max", "sum"),
             ((Partial("max"), Shard(0)), (Partial("max"), Partial("max")), "max", "max"),
             ((Partial(), Shard(0)), (Partial(), Shard(1)), "sum", "sum"),
             ((Partial("max"), Shard(0)), (Partial("max"), Replicate()), "max", "max")]
    for i in range(n + len(fixed)):
        m, mesh, rank, shape, op = _partial_draw(rng, i, meshes_by_name)
        top = op if rng.random() < 0.5 else rng.choice(["sum", "max", "avg"])
        plain = lambda ps: tuple(p if not isinstance(p, _StridedShard) else Shard(p.dim) for p in ps)  # noqa: E731
        src = plain(random_placements(rng, mesh.ndim, rank))
        if rng.random() < 0.6:
            src = tuple(Partial(op) if (isinstance(p, Replicate) and rng.random() < 0.7) else p for p in src)
        while True:
            dst = tuple(Partial(top) if (isinstance(p, Replicate) or rng.random() < 0.3) else p
                        for p in plain(random_placements(rng, mesh.ndim, rank)))
            if any(p.is_partial() for p in dst) and dst != src:
                break
            if any(p.is_partial() for p in dst):  # the only partial target is the source: another op
                top = rng.choice([o for o in ("sum", "max", "avg") if o != top])
        if i < len(fixed):
            m, shape, (src, dst, op, top) = "4x2", (16, 16), fixed[i]
            mesh = meshes_by_name[m]
        ops = {op if any(p.is_partial() for p in src) else None, top} - {None}
        dtype = torch.float64 if "avg" in ops else torch.int64
        g = torch.Generator().manual_seed(zlib.crc32(repr((m, shape, str(src), str(dst))).encode()))
        full = torch.randint(-1000, 1000, shape, generator=g).to(dtype)
        if any(p.is_partial() for p in src):
            local = partial_parts(full, mesh, src, op, zlib.crc32(repr((i, m)).encode()))
        else:
            local = split_local(full, mesh, src)
        x = DTensor.from_local(local, mesh, src, run_check=False, shape=full.shape, stride=full.stride())
        rec = {"kind": "partial-target", "mesh": m, "shape": list(shape), "src": rt.placements_text(src),
               "dst": rt.placements_text(dst)}
        with CollectiveBytes() as wrap:
            y = rt.redistribute(x, placements=dst)
        st = rt.last_run_stats()
        reduced_placements = tuple(Replicate() if p.is_partial() else p for p in dst)
        reduced = rt.redistribute(y, placements=reduced_placements)
        rec["exact"] = (bool(torch.equal(reduced.to_local(), split_local(full, mesh, reduced_placements)))
                        and tuple(y.placements) == dst)
        if m != "4x2-perm":  # DTensor's reduction, where its device order is the rank order
            rec["dtensor_exact"] = bool(torch.equal(y.full_tensor(), full))
        rec["recv"] = st.recv_bytes if st is not None else None
        rec["wrapped_recv"] = wrap.recv
        try:
            p = rt.plan_for(rt.layout_of(x), rt.layout_of(mesh, dst, shape, dtype), rt.mesh_of(mesh))
            rec["ops"] = [s.op for s in p.steps]
            rec["planned_recv"] = expected_bytes(p, dist.get_rank())
        except NotImplementedError:  # no plan: DTensor's own ran
            rec["ops"], rec["planned_recv"] = ["dtensor"], rec["recv"]
        out.append(rec)
    # The gradient of a sum into a Partial target: the gradient of the reduced array, replicated
    # over the Partial dims, moved back to the source's placements.
    mesh = meshes_by_name["4x2"]
    full = torch.arange(64, dtype=torch.float64).reshape(8, 8)
    x = DTensor.from_local(split_local(full, mesh, (Shard(0), Replicate())), mesh, (Shard(0), Replicate()),
                           run_check=False).requires_grad_()
    y = rt.redistribute(x, placements=(Shard(1), Partial()))
    weight = torch.arange(64, dtype=torch.float64).reshape(8, 8) % 7
    loss = (y.full_tensor() * weight).sum()
    loss.backward()
    out.append({"kind": "partial-target-grad",
                "exact": bool(torch.equal(x.grad.to_local(), split_local(weight, mesh, (Shard(0), Replicate()))))})


def sliced_and_edge_cases(ms, rt, out):
    """What outside testing found: a mesh sliced from a larger one (each rank's slice holds other
    ranks: every slice's groups are created together, or ranks hang), moves between placements
    that both leave ranks empty (the empty local shape DTensor gives, forward and backward), a
    negative Shard dim past the tensor's rank, and an integer average (DTensor's own handling)."""
    from torch.distributed.tensor import distribute_tensor
    full = torch.arange(48, dtype=torch.float32).reshape(8, 6)
    for names, src, dst in ((("x",), (Shard(0),), (Shard(1),)), (("y",), (Shard(1),), (Replicate(),)),
                            (("a", "c"), (Shard(0), Shard(1)), (Shard(1), Shard(0)))):
        mesh = (ms["4x2"] if names[0] in ("x", "y") else ms["2x2x2"])[names if len(names) > 1 else names[0]]
        x = distribute_tensor(full, mesh, src)
        y = rt.redistribute(x, placements=dst)
        out.append({"kind": "sliced", "mesh": list(names), "exact": bool(torch.equal(y.to_local(), split_local(full, mesh, dst))),
                    "equals_dtensor": bool(torch.equal(y.to_local(), x.redistribute(mesh, dst).to_local()))})
    one = torch.ones(1, 1, 1)
    x = distribute_tensor(one, ms["8"], (Shard(0),))
    y = rt.redistribute(rt.redistribute(x, placements=(Shard(1),)), placements=(Shard(0),))
    leaf = distribute_tensor(one, ms["8"], (Shard(1),)).requires_grad_()
    z = rt.redistribute(leaf, placements=(Shard(0),))
    z.to_local().sum().backward()
    out.append({"kind": "empty-shards", "shape": list(y.to_local().shape),
                "dtensor_shape": list(x.redistribute(ms["8"], (Shard(1),)).redistribute(ms["8"], (Shard(0),)).to_local().shape),
                "grad_shape": list(leaf.grad.to_local().shape), "leaf_shape": list(leaf.to_local().shape)})
    try:
        rt.redistribute(distribute_tensor(full, ms["8"], (Shard(0),)), placements=(Shard(-3),))
        neg = "accepted"
    except ValueError as e:
        neg = str(e)
    avg = DTensor.from_local(torch.full((3,), 200, dtype=torch.uint8), ms["8"], (Partial("avg"),), run_check=False)
    outcome = []
    for move in (lambda: rt.redistribute(avg, placements=(Replicate(),)), lambda: avg.redistribute(ms["8"], (Replicate(),))):
        try:
            outcome.append(move().to_local().tolist())
        except Exception as e:  # noqa: BLE001 (DTensor's own error, compared)
            outcome.append(type(e).__name__)
    out.append({"kind": "edge", "negative_dim": neg, "int_avg": outcome[0], "int_avg_dtensor": outcome[1]})


def worker(rank, path, n_cases, seed, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    import reshard.torch as rt
    out = []
    try:
        ms = meshes()
        for case in named_cases() + random_cases(n_cases, seed):
            try:
                run_case(case, ms[case[1]], rt, out)
            except Exception:  # noqa: BLE001 (reported, and the test fails on it)
                out.append({"kind": case[0], "mesh": case[1], "shape": list(case[2]), "src": str(case[4]),
                            "dst": str(case[5]), "error": traceback.format_exc()[-2000:]})
        autograd_cases(ms["4x2"], rt, out)
        partial_autograd_cases(ms["4x2"], rt, out)
        partial_cases(ms, rt, out, max(8, n_cases // 5), seed)
        partial_target_cases(ms, rt, out, max(8, n_cases // 5), seed)
        same_placements_case(ms["4x2"], rt, out)
        flattened_case(rt, out)  # every rank builds the 4-rank mesh; ranks 0-3 move
        sliced_and_edge_cases(ms, rt, out)
    except Exception:  # noqa: BLE001
        out.append({"kind": "fatal", "error": traceback.format_exc()[-3000:]})
    gathered = [None] * WORLD if rank == 0 else None
    dist.gather_object(out, gathered, dst=0)
    if rank == 0:
        with open(path, "w") as f:
            json.dump({"ranks": gathered, "torch": torch.__version__}, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("RESHARD_TORCH_SEED", "0")))
    a = ap.parse_args(argv)
    mp.spawn(worker, args=(a.out, a.cases, a.seed, free_port()), nprocs=WORLD)


if __name__ == "__main__":
    sys.exit(main())
