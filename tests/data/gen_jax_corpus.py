#!/usr/bin/env python3
"""Generate jax_hlo_corpus.tsv: golden NamedSharding -> HloSharding / Shardy text from real JAX.

Run:  XLA_FLAGS=--xla_force_host_platform_device_count=64 python3 gen_jax_corpus.py
(the script sets XLA_FLAGS itself if unset). Requires `pip install "jax[cpu]"`.

Columns (tab separated):
  mesh        axis=size,... in mesh order, e.g. x=4,y=2
  device_ids  d.id of mesh.devices in row-major mesh order
  ndim        array rank passed to _to_xla_hlo_sharding / _to_sdy_sharding
  pspec       PartitionSpec as Python source, e.g. P('y', None, 'x'), P(None, ('x', 'y'))
  hlo         str(NamedSharding(mesh, spec)._to_xla_hlo_sharding(ndim)).
              NOTE: JAX emits *logical* device indices (= position in mesh.devices.flat);
              the actual device ids do not affect this column.
  sdy         str(NamedSharding(mesh, spec)._to_sdy_sharding(ndim).build({})) in an MLIR context.
  hlo_ids     same as hlo but with NamedSharding(..., _logical_device_ids=device_ids), i.e. the
              tile assignment expressed in device ids; JAX then always prints an explicit device
              list (via HloSharding.subgroup_with_device_ordering), even for identity order.
  sdy_ids     Shardy text for the _logical_device_ids variant.
"""
import os
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=64")

import random
import sys

import numpy as np
import jax
import jaxlib
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax._src.interpreters import mlir

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jax_hlo_corpus.tsv")
DEVS = jax.devices()
assert len(DEVS) >= 64, "need XLA_FLAGS=--xla_force_host_platform_device_count=64"
assert [d.id for d in DEVS[:64]] == list(range(64))


def fmt_entry(e):
    if e is None:
        return "None"
    if isinstance(e, tuple):
        if len(e) == 1:
            return "('%s',)" % e[0]
        return "(" + ", ".join("'%s'" % a for a in e) + ")"
    return "'%s'" % e


def fmt_pspec(spec):
    return "P(" + ", ".join(fmt_entry(e) for e in spec) + ")"


def make_case(axes, ids, ndim, spec):
    """axes: list of (name, size); ids: device ids in row-major mesh order."""
    shape = tuple(s for _, s in axes)
    names = tuple(n for n, _ in axes)
    devs = np.array([DEVS[i] for i in ids], dtype=object).reshape(shape)
    mesh = Mesh(devs, names)
    ns = NamedSharding(mesh, P(*spec))
    ns_ids = NamedSharding(mesh, P(*spec), _logical_device_ids=tuple(ids))
    hlo = str(ns._to_xla_hlo_sharding(ndim))
    hlo_ids = str(ns_ids._to_xla_hlo_sharding(ndim))
    with mlir.make_ir_context():
        sdy = str(ns._to_sdy_sharding(ndim).build({}))
        sdy_ids = str(ns_ids._to_sdy_sharding(ndim).build({}))
    return [",".join("%s=%d" % a for a in axes), ",".join(map(str, ids)), str(ndim),
            fmt_pspec(spec), hlo, sdy, hlo_ids, sdy_ids]


def fixed_cases():
    c = []
    x4y2 = [("x", 4), ("y", 2)]
    ar8 = list(range(8))
    c.append((x4y2, ar8, 3, ("y", None, "x")))           # {devices=[2,1,4]<=[4,2]T(1,0)}
    c.append((x4y2, ar8, 3, (None, ("x", "y"), None)))   # {devices=[1,8,1]<=[8]}
    c.append((x4y2, ar8, 3, (None, ("y", "x"), None)))
    c.append((x4y2, ar8, 3, ()))
    c.append((x4y2, ar8, 0, ()))
    c.append((x4y2, ar8, 3, ("x",)))
    c.append((x4y2, ar8, 3, ("y",)))
    c.append((x4y2, ar8, 1, (("x",),)))
    c.append((x4y2, ar8, 2, ("x", "y")))
    c.append((x4y2, ar8, 2, ("y", "x")))
    c.append((x4y2, ar8, 2, (None, None)))
    c.append(([("x", 8)], ar8, 1, ("x",)))
    c.append(([("x", 8)], ar8, 2, (None, "x")))
    c.append(([("x", 1)], [0], 2, ("x",)))
    c.append(([("x", 1), ("y", 1)], [0], 2, ("x", "y")))
    c.append(([("x", 4), ("one", 1), ("y", 2)], ar8, 3, ("one", "y", "x")))
    c.append(([("x", 4), ("one", 1), ("y", 2)], ar8, 2, (("x", "one"),)))
    c.append(([("x", 4), ("one", 1), ("y", 2)], ar8, 2, ("one",)))
    c.append(([("a", 2), ("b", 2), ("c", 2), ("d", 2)], list(range(16)), 4,
              (None, ("d", "b"), "c")))
    c.append(([("a", 2), ("b", 2), ("c", 2), ("d", 2)], list(range(16)), 2, (("c", "a"),)))
    c.append(([("a", 2), ("b", 4), ("c", 8)], list(range(64)), 3, (("c", "a", "b"),)))
    c.append(([("a", 2), ("b", 4), ("c", 8)], list(range(64)), 3, ("b",)))
    c.append(([("a", 4), ("b", 4), ("c", 4)], list(range(64)), 3, ("c", "a", "b")))
    # permuted device orders
    rng = random.Random(12345)
    p8 = ar8[:]; rng.shuffle(p8)
    c.append((x4y2, p8, 3, ("y", None, "x")))
    c.append((x4y2, p8, 3, (None, ("x", "y"), None)))
    c.append((x4y2, p8, 3, ("x",)))
    c.append((x4y2, p8, 3, ()))
    c.append((x4y2, list(range(7, -1, -1)), 2, ("x", "y")))
    return c


NAME_POOL = ["x", "y", "z", "w", "data", "model", "a", "b", "expert", "seq"]


def random_cases(rng, n):
    out = []
    while len(out) < n:
        k = rng.randint(1, 4)
        sizes = [rng.choice([1, 1, 2, 2, 2, 3, 4, 4, 5, 6, 8]) for _ in range(k)]
        tot = int(np.prod(sizes))
        if tot > 64:
            continue
        names = rng.sample(NAME_POOL, k)
        axes = list(zip(names, sizes))
        ids = list(range(tot))
        if rng.random() < 0.5:
            rng.shuffle(ids)
        ndim = rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4])
        slen = rng.randint(min(1, ndim), ndim)
        unused = names[:]
        rng.shuffle(unused)
        spec = []
        for _ in range(slen):
            r = rng.random()
            if r < 0.2 or not unused:
                spec.append(None)
            elif r < 0.6:
                spec.append(unused.pop())
            else:
                m = rng.randint(1, min(3, len(unused)))
                spec.append(tuple(unused.pop() for _ in range(m)))
        out.append((axes, ids, ndim, tuple(spec)))
    return out


def main():
    rng = random.Random(20240601)
    cases = fixed_cases() + random_cases(rng, 300)
    rows = []
    seen = set()
    for axes, ids, ndim, spec in cases:
        key = (tuple(axes), tuple(ids), ndim, spec)
        if key in seen:
            continue
        seen.add(key)
        rows.append(make_case(axes, ids, ndim, spec))
    with open(OUT, "w") as f:
        f.write("# generated by gen_jax_corpus.py with jax %s jaxlib %s; columns:\n"
                % (jax.__version__, jaxlib.__version__))
        f.write("#mesh\tdevice_ids\tndim\tpspec\thlo\tsdy\thlo_ids\tsdy_ids\n")
        for r in rows:
            assert all("\t" not in x and "\n" not in x for x in r), r
            f.write("\t".join(r) + "\n")
    print("wrote %d cases to %s" % (len(rows), OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
