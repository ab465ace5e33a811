"""Time per redistribution, reshard.torch against DTensor.redistribute, on 8 gloo processes (CPU).

    .venv/bin/python bench/torch_vs_dtensor.py [--rounds 7] [--mib 64]

Cases (f32, mesh (4, 2) named ("x", "y")):
  report     the report's case scaled to --mib: [Shard(2), Shard(0)] -> [Shard(1), Shard(1)]
  strided    an FSDP2 + tensor-parallel checkpoint weight to plain row order:
             [_StridedShard(0, split_factor=2), Shard(0)] -> [Shard(0), Shard(0)]
Rounds alternate the two tools; each timing is the slowest rank's, between barriers; the table
gives medians, the bytes each tool received into the busiest rank, and whether the values equal
torch's own split. Not a test: docs/benchmarks.md reports its ratios.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DeviceMesh, DTensor, Shard
from torch.distributed.tensor.placement_types import _StridedShard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
from dtensor_worker import DTensorBytes, split_local  # noqa: E402  (the suite's truth and counter)


def cases(mib):
    n = round((mib * (1 << 20) / 4) ** (1 / 3) / 8) * 8  # a cube of about `mib` MiB, divisible by 8
    rows = mib * (1 << 20) // 4 // 2048
    return [
        ("report", (n, n, n), (Shard(2), Shard(0)), (Shard(1), Shard(1))),
        ("strided", (rows, 2048), (_StridedShard(0, split_factor=2), Shard(0)), (Shard(0), Shard(0))),
    ]


def timed(fn):
    dist.barrier()
    t = time.perf_counter()
    out = fn()
    dist.barrier()
    dt = torch.tensor([time.perf_counter() - t], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    return out, dt.item()


def worker(rank, rounds, mib, port, results):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=8)
    import reshard.torch as rt
    mesh = DeviceMesh("cpu", torch.arange(8).reshape(4, 2), mesh_dim_names=("x", "y"))
    rows = []
    for name, shape, src, dst in cases(mib):
        full = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)
        x = DTensor.from_local(split_local(full, mesh, src), mesh, src, run_check=False, shape=full.shape,
                               stride=full.stride())
        want = split_local(full, mesh, dst)
        del full
        times = {"reshard": [], "dtensor": []}
        ok = {}
        for r in range(rounds + 1):  # round 0 warms up (plans, groups)
            for tool in (("reshard", "dtensor") if r % 2 == 0 else ("dtensor", "reshard")):
                if tool == "reshard":
                    y, t = timed(lambda: rt.redistribute(x, placements=dst))
                else:
                    y, t = timed(lambda: x.redistribute(placements=dst))
                if r:
                    times[tool].append(t)
                ok[tool] = bool(torch.equal(y.to_local(), want))
                del y
        rt.redistribute(x, placements=dst)
        ours = torch.tensor([rt.last_run_stats().recv_bytes])
        mode = DTensorBytes()
        with mode:
            x.redistribute(placements=dst)
        theirs = torch.tensor([mode.recv])
        dist.all_reduce(ours, op=dist.ReduceOp.MAX)
        dist.all_reduce(theirs, op=dist.ReduceOp.MAX)
        rows.append((name, shape, statistics.median(times["reshard"]), statistics.median(times["dtensor"]),
                     int(ours), int(theirs), ok["reshard"], ok["dtensor"]))
    if rank == 0:
        results.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--mib", type=int, default=64)
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(worker, args=(a.rounds, a.mib, port, q), nprocs=8)
    rows = q.get()
    print("| case | shape | reshard.torch | DTensor | DTensor / reshard | bytes into busiest rank (reshard, DTensor) "
          "| values (reshard, DTensor) |")
    print("|---|---|---|---|---|---|---|")
    for name, shape, tr, td, br, bd, okr, okd in rows:
        print("| %s | %s | %.1f ms | %.1f ms | %.2f | %d, %d | %s, %s |" % (
            name, "x".join(map(str, shape)), tr * 1e3, td * 1e3, td / tr, br, bd,
            "exact" if okr else "WRONG", "exact" if okd else "WRONG"))


if __name__ == "__main__":
    main()
