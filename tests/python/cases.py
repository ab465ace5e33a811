"""Random JAX meshes, shardings and shapes for the Python package's tests, and the runner that
checks reshard.jax.reshard against jax.device_put and with_sharding_constraint.

Uneven shardings. JAX 0.10.2 refuses a sharding that does not divide the array at device_put
and at jit boundaries (and all-gathers an uneven jit output silently). So, as
tests/jax/harness.py does, an uneven side crosses the boundary padded to its ceil-padded shape,
which costs no collective: the input is the padded array in the source sharding, cropped inside
jit and constrained to the source sharding; the output is padded inside jit, constrained to the
target sharding and cropped outside. Both programs compared, reshard's and XLA's, get exactly the
same treatment.
"""
from __future__ import annotations

import math
import os
import random
import sys
from dataclasses import dataclass

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

import reshard.jax as rj

# The real-JAX suite's harness states how many ways a spec splits each dim;
# both suites use that one rule.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jax"))
from harness import shard_counts  # noqa: E402
from reshard import hlo_bytes

wsc = jax.lax.with_sharding_constraint
SEED = int(os.environ.get("RESHARD_PY_SEED", "20261130"))
NAMES = ("x", "y", "z", "data", "model", "a.b")

_RESULTS: dict[str, dict] = {}


def make_mesh(devices, sizes, names) -> Mesh:
    arr = np.array(devices, dtype=object).reshape(sizes)
    return Mesh(arr, tuple(names), axis_types=(AxisType.Auto,) * len(names))


def random_sizes(rng: random.Random, n: int, k: int) -> list[int]:
    """k axis sizes multiplying to n (1s allowed), in random order."""
    sizes = [1] * k
    m = n
    for p in (2, 3, 5, 7):
        while m % p == 0:
            sizes[rng.randrange(k)] *= p
            m //= p
    rng.shuffle(sizes)
    return sizes


def _factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def random_mesh(rng: random.Random, devices=None) -> Mesh:
    """1 to 8 devices (a random subset of jax.devices(), in random order; up to 16 where the
    process has 16) over 1 to 3 axes; or the given devices, in that order, over random axes."""
    pool = jax.devices()[:16]
    if devices is None:
        if len(pool) <= 8:
            n = rng.randint(1, len(pool))
        else:  # counts with prime factors up to 7 only, as random_sizes splits
            n = rng.choice([k for k in range(1, len(pool) + 1) if max(_factors(k), default=1) <= 7])
        devices = rng.sample(pool, n)
    else:
        devices = list(devices)
    k = rng.randint(1, 3)
    names = rng.sample(NAMES, k)
    return make_mesh(devices, random_sizes(rng, len(devices), k), names)


def random_spec(rng: random.Random, mesh: Mesh, ndim: int, use_all: bool = False) -> P:
    """Each mesh axis splits one random dim or none (use_all: one random dim); several axes on a
    dim in random order."""
    per_dim: list[list[str]] = [[] for _ in range(ndim)]
    for a in mesh.axis_names:
        d = rng.randrange(ndim if use_all else ndim + 1)
        if d < ndim:
            per_dim[d].append(a)
    for axes in per_dim:
        rng.shuffle(axes)
    entries = []
    for axes in per_dim:
        if not axes:
            entries.append(None)
        elif len(axes) == 1 and rng.random() < 0.8:
            entries.append(axes[0])
        else:
            entries.append(tuple(axes))
    while entries and entries[-1] is None and rng.random() < 0.5:
        entries.pop()  # JAX pads a short spec with None
    return P(*entries)


EXTENTS = (1, 2, 3, 4, 5, 6, 7, 8, 8, 12, 16, 16)


def random_shape(rng: random.Random, ndim: int) -> tuple[int, ...]:
    return tuple(rng.choice(EXTENTS) for _ in range(ndim))


def padding(shape, counts) -> list[tuple[int, int]]:
    return [(0, -(-n // k) * k - n) for n, k in zip(shape, counts)]


def is_replicated(mesh: Mesh, spec: P, ndim: int) -> bool:
    """Some device holds the same block as another (an axis of size > 1 unused, or all of them)."""
    used = math.prod(shard_counts(mesh, spec, ndim))
    return used < mesh.size


@dataclass
class Pair:
    name: str
    shape: tuple
    src: NamedSharding
    dst: NamedSharding

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def src_pad(self):
        return padding(self.shape, shard_counts(self.src.mesh, self.src.spec, self.ndim))

    @property
    def dst_pad(self):
        return padding(self.shape, shard_counts(self.dst.mesh, self.dst.spec, self.ndim))

    @property
    def src_even(self):
        return not any(p for _, p in self.src_pad)

    @property
    def dst_even(self):
        return not any(p for _, p in self.dst_pad)

    def describe(self) -> str:
        return "%s: shape %s, %s on %s %s -> %s on %s %s" % (
            self.name, self.shape, self.src.spec, dict(self.src.mesh.shape),
            [d.id for d in self.src.mesh.devices.flat], self.dst.spec, dict(self.dst.mesh.shape),
            [d.id for d in self.dst.mesh.devices.flat])


RICH_MESHES = ((2, 2), (4, 2), (2, 4), (2, 2, 2), (2, 3), (3, 2))


def rich_pairs(count: int, seed: int) -> list[Pair]:
    """Pairs on meshes of 2 or 3 axes of size >= 2 that rearrange every axis among the dims:
    the moves where reshard's plans differ from XLA's (one of two uneven)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        sizes = rng.choice(RICH_MESHES)
        mesh = make_mesh(rng.sample(jax.devices()[:8], math.prod(sizes)), sizes, rng.sample(NAMES, len(sizes)))
        ndim = rng.randint(2, 4)
        src = NamedSharding(mesh, random_spec(rng, mesh, ndim, use_all=True))
        for _ in range(20):
            dst = NamedSharding(mesh, random_spec(rng, mesh, ndim, use_all=True))
            if not src.is_equivalent_to(dst, ndim):
                break
        counts = zip(shard_counts(mesh, src.spec, ndim), shard_counts(mesh, dst.spec, ndim))
        even = i % 2 == 0
        shape = tuple(math.lcm(a, b) * rng.choice((1, 2)) if even else rng.choice(EXTENTS) for a, b in counts)
        out.append(Pair("rich%02d" % i, shape, src, dst))
    return out


def random_pairs(count: int, seed: int = SEED, other_mesh: float = 0.15) -> list[Pair]:
    """Pairs of layouts of one array: mostly on one mesh; a share with the target on another mesh
    over the same device list (other axes: JAX runs a jitted program on one device list). About
    one in ten may state the same layout twice; the others are redrawn until they differ."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        ndim = rng.randint(1, 4)
        mesh = random_mesh(rng)
        dst_mesh = random_mesh(rng, mesh.devices.flat) if rng.random() < other_mesh else mesh
        # a third rearrange every mesh axis among the dims (no replication on either side): the
        # moves XLA's partitioner handles worst
        use_all = rng.random() < 0.33
        src = NamedSharding(mesh, random_spec(rng, mesh, ndim, use_all))
        keep_equal = rng.random() < 0.1  # a few pairs state one layout twice
        for _ in range(10):
            dst = NamedSharding(dst_mesh, random_spec(rng, dst_mesh, ndim, use_all))
            if keep_equal or not src.is_equivalent_to(dst, ndim):
                break
        # half the pairs divide evenly on both sides; the rest take any small extents
        even = rng.random() < 0.5
        counts = zip(shard_counts(mesh, src.spec, ndim), shard_counts(dst_mesh, dst.spec, ndim))
        shape = tuple(math.lcm(a, b) * rng.choice((1, 1, 2, 3)) if even else rng.choice(EXTENTS)
                      for a, b in counts)
        out.append(Pair("pair%03d" % i, shape, src, dst))
    return out


def boundaries(pair: Pair):
    """(input array, pre, post, crop): pre/post carry uneven sides across the jit boundary padded."""
    x = np.arange(math.prod(pair.shape), dtype=np.float32).reshape(pair.shape)
    crop = tuple(slice(0, n) for n in pair.shape)
    if pair.src_even:
        xin = jax.device_put(x, pair.src)

        def pre(a):
            return wsc(a, pair.src)
    else:
        xin = jax.device_put(np.pad(x, pair.src_pad), pair.src)

        def pre(a):
            return wsc(a[crop], pair.src)
    if pair.dst_even:
        def post(y):
            return y
    else:
        def post(y):
            return wsc(jnp.pad(y, pair.dst_pad), pair.dst)
    return x, xin, pre, post, crop


def check_result(pair: Pair, out, x, crop):
    """out equals jax.device_put(x, target) exactly, device by device (padded for uneven targets)."""
    if pair.dst_even:
        want = jax.device_put(jax.device_put(x, pair.src) if pair.src_even else x, pair.dst)
        assert out.shape == x.shape, pair.describe()
        assert out.sharding.is_equivalent_to(pair.dst, pair.ndim), "%s: sharding %s" % (pair.describe(), out.sharding)
        assert np.array_equal(np.asarray(out), np.asarray(want)), pair.describe()
        want_by_device = {s.device: np.asarray(s.data) for s in want.addressable_shards}
        for s in out.addressable_shards:
            assert np.array_equal(np.asarray(s.data), want_by_device[s.device]), "%s: device %d" % (
                pair.describe(), s.device.id)
        return
    padded = tuple(n + p for n, (_, p) in zip(pair.shape, pair.dst_pad))
    assert out.shape == padded, pair.describe()
    assert np.array_equal(np.asarray(out)[crop], x), pair.describe()
    xp = np.zeros(padded, np.float32)
    xp[crop] = x
    index = pair.dst.devices_indices_map(padded)
    for s in out.addressable_shards:
        assert np.array_equal(np.asarray(s.data), xp[index[s.device]]), "%s: device %d" % (pair.describe(), s.device.id)


def compiled_bytes(fn, arg):
    text = fn.lower(arg).compile().as_text()
    return hlo_bytes.collectives(text), hlo_bytes.recv_bytes(text)


def run_pair(pair: Pair) -> dict:
    """reshard.jax.reshard inside jax.jit against jax.device_put and with_sharding_constraint."""
    x, xin, pre, post, crop = boundaries(pair)
    ours = jax.jit(lambda a: post(rj.reshard(pre(a), pair.dst)), out_shardings=pair.dst)  # no source=
    xla = jax.jit(lambda a: post(wsc(pre(a), pair.dst)), out_shardings=pair.dst)
    ours_ops, ours_bytes = compiled_bytes(ours, xin)
    xla_ops, xla_bytes = compiled_bytes(xla, xin)
    check_result(pair, ours(xin), x, crop)
    e = rj.explain(jax.ShapeDtypeStruct(pair.shape, np.float32), pair.dst, source=pair.src)
    result = {
        "name": pair.name, "case": pair.describe(), "src_even": pair.src_even, "dst_even": pair.dst_even,
        "replicated": is_replicated(pair.src.mesh, pair.src.spec, pair.ndim)
        or is_replicated(pair.dst.mesh, pair.dst.spec, pair.ndim),
        "ours_bytes": ours_bytes, "xla_bytes": xla_bytes, "choice": e.choice, "reason": e.reason,
        "ours_ops": [c["op"] for c in ours_ops], "xla_ops": [c["op"] for c in xla_ops],
        "verdict": "better" if ours_bytes < xla_bytes else "equal" if ours_bytes == xla_bytes else "worse",
    }
    _RESULTS[pair.name] = result
    assert ours_bytes <= xla_bytes, "%s: reshard %s B > XLA %s B\nours %s\nxla  %s\n%s" % (
        pair.describe(), ours_bytes, xla_bytes, ours_ops, xla_ops, e)
    return result


def results() -> dict:
    """This process's comparisons, by case name."""
    return dict(_RESULTS)


def add_results(more: dict) -> None:
    """Adds comparisons made in another process (a pytest-xdist worker)."""
    _RESULTS.update(more)


def summary() -> dict:
    rs = list(_RESULTS.values())
    choices: dict[str, int] = {}
    for r in rs:
        choices[r["choice"]] = choices.get(r["choice"], 0) + 1
    return {
        "cases": len(rs),
        "better": sum(r["verdict"] == "better" for r in rs),
        "equal": sum(r["verdict"] == "equal" for r in rs),
        "worse": sum(r["verdict"] == "worse" for r in rs),
        "uneven": sum(not (r["src_even"] and r["dst_even"]) for r in rs),
        "replicated": sum(r["replicated"] for r in rs),
        "choices": choices,
        "ours_bytes": sum(r["ours_bytes"] for r in rs),
        "xla_bytes": sum(r["xla_bytes"] for r in rs),
        "details": rs,
    }
