"""The report's case in DTensor terms, on 8 gloo processes (CPU): DTensor.redistribute beside
reshard.torch.redistribute, with the collectives each ran and the bytes into each rank.

    .venv/bin/python examples/torch_report.py

f32[16,16,16] on a (4, 2) mesh ("x", "y"), [Shard(2), Shard(0)] -> [Shard(1), Shard(1)]: JAX's
P('y', None, 'x') -> P(None, ('x','y'), None).
"""
from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DeviceMesh, Shard, distribute_tensor
from torch.utils._python_dispatch import TorchDispatchMode


class Collectives(TorchDispatchMode):
    """The functional collectives DTensor runs, with the bytes each brings into this rank."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket).split(".")[-1]
        if name == "all_gather_into_tensor":
            x, k = args[0], int(args[1])
            self.seen.append("all-gather %d B (group of %d)" % (x.numel() * x.element_size() * (k - 1), k))
        elif name in ("all_to_all_single", "reduce_scatter_tensor", "all_reduce"):
            self.seen.append(name)
        return out


def main(rank, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=8)
    import reshard.torch as rt
    mesh = DeviceMesh("cpu", torch.arange(8).reshape(4, 2), mesh_dim_names=("x", "y"))
    full = torch.arange(16 * 16 * 16, dtype=torch.float32).reshape(16, 16, 16)
    x = distribute_tensor(full, mesh, [Shard(2), Shard(0)])
    target = [Shard(1), Shard(1)]
    mode = Collectives()
    with mode:
        ref = x.redistribute(placements=target)
    y = rt.redistribute(x, placements=target)
    stats = rt.last_run_stats()
    same = torch.equal(y.to_local(), ref.to_local()) and torch.equal(y.full_tensor(), full)
    ok = torch.tensor([int(same)])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if rank == 0:
        plan = rt.explain(x, target).plan
        ours = ", ".join("%s %d B (group of %d)" % (op, recv, step.group_size)
                         for (op, recv, _), step in zip(stats.steps, plan.steps))
        print("| redistribute | collectives (rank 0) | bytes into rank 0 |")
        print("|---|---|---|")
        print("| `x.redistribute(placements=[Shard(1), Shard(1)])` | %s | %d |" % (
            " + ".join(mode.seen), sum(int(s.split(" ")[1]) for s in mode.seen if s.startswith("all-gather"))))
        print("| `reshard.torch.redistribute(x, placements=[Shard(1), Shard(1)])` | %s | %d |" % (
            ours, stats.recv_bytes))
        print("values equal on every rank:", bool(ok.item()))
        print(rt.explain(x, target))
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    mp.spawn(main, args=(free,), nprocs=8)
