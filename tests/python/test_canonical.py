"""The canonical case through reshard.jax.reshard inside jax.jit: f32[16,16,16] on mesh x=4,y=2,
P('y', None, 'x') -> P(None, ('x','y'), None). The result equals the input exactly; the compiled
program is exactly one all-to-all (1792 B into each device) and no all-gather, where the same
program with with_sharding_constraint compiles to XLA's all-gathers (14336 B)."""
import os
import subprocess
import sys

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import cases
import reshard.jax as rj
from reshard import hlo_bytes

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
wsc = jax.lax.with_sharding_constraint


def _canonical():
    mesh = cases.make_mesh(jax.devices()[:8], (4, 2), ("x", "y"))
    src = NamedSharding(mesh, P("y", None, "x"))
    dst = NamedSharding(mesh, P(None, ("x", "y"), None))
    x = jax.device_put(jnp.arange(16 ** 3, dtype=jnp.float32).reshape(16, 16, 16), src)
    return mesh, src, dst, x


def _ops(fn, x):
    text = fn.lower(x).compile().as_text()
    return [c["op"] for c in hlo_bytes.collectives(text)], hlo_bytes.recv_bytes(text)


def test_canonical_inside_jit():
    mesh, src, dst, x = _canonical()
    ours = jax.jit(lambda a: rj.reshard(a, dst))
    xla = jax.jit(lambda a: wsc(a, dst))
    ours_ops, ours_bytes = _ops(ours, x)
    xla_ops, xla_bytes = _ops(xla, x)
    assert ours_ops == ["all-to-all"] and "all-gather" not in ours_ops and ours_bytes == 1792
    assert xla_ops.count("all-gather") == 2 and "all-to-all" not in xla_ops and xla_bytes == 14336
    y = ours(x)
    assert np.array_equal(np.asarray(y), np.asarray(x))
    assert y.sharding.is_equivalent_to(dst, 3)
    want = jax.device_put(x, dst)
    for a, b in zip(sorted(y.addressable_shards, key=lambda s: s.device.id),
                    sorted(want.addressable_shards, key=lambda s: s.device.id)):
        assert np.array_equal(np.asarray(a.data), np.asarray(b.data))


def test_canonical_eager_and_partition_spec_under_set_mesh():
    mesh, src, dst, x = _canonical()
    y = rj.reshard(x, dst)  # a jax.Array: its own sharding is the source
    assert np.array_equal(np.asarray(y), np.asarray(x)) and y.sharding.is_equivalent_to(dst, 3)
    with jax.set_mesh(mesh):
        f = jax.jit(lambda a: rj.reshard(a, P(None, ("x", "y"), None), source=P("y", None, "x")))
        ops, b = _ops(f, x)
        assert ops == ["all-to-all"] and b == 1792
        assert np.array_equal(np.asarray(f(x)), np.asarray(x))


def test_canonical_explain():
    mesh, src, dst, x = _canonical()
    e = rj.explain(x, dst)
    assert e.choice == "reshard" and e.reshard_bytes == 1792 and e.xla_bytes == 14336
    assert [c["op"] for c in e.xla_collectives] == ["all-gather", "all-gather"]
    assert [c["op"] for c in e.reshard_collectives] == ["all-to-all"]
    assert e.plan.op_names == ["all-to-all"] and e.plan.lower_bound["max_recv_bytes"] == 1792
    text = str(e)
    assert "XLA (with_sharding_constraint), compiled: 14336 B" in text
    assert "reshard (its plan as the compiler runs it), compiled: 1792 B" in text
    assert "the JAX emitter does not write the ragged exchange yet" in text
    assert e.as_dict()["choice"] == "reshard"


def test_jax_canonical_example():
    """examples/jax_canonical.py prints both compiled collective lists and byte counts."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "jax_canonical.py")],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reshard.jax.reshard          1792 bytes into each device: all-to-all (1792 B, group of 8)" in r.stdout, r.stdout
    assert "XLA (sharding constraint)   14336 bytes into each device: all-gather (6144 B, group of 4), " \
           "all-gather (8192 B, group of 2)" in r.stdout, r.stdout
