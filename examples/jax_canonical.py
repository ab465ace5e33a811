"""The canonical case in real JAX, both ways, inside jax.jit: XLA's own reshard
(with_sharding_constraint) and reshard.jax.reshard (reshard's op: the compiler
hands it the source sharding, and it runs the per-device program the C++ JAX
emitter writes). Prints each compiled
program's collectives and the bytes one device receives, what reshard.jax.explain
says, and checks that both give exactly jax.device_put(x, target).

  python3 examples/jax_canonical.py
(8 host CPU devices are forced; needs the reshard package and jax 0.10.2:
 tests/python/run_python_tests.sh installs both into .venv)
"""
import argparse
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import reshard.jax as rj  # noqa: E402
from reshard import hlo_bytes  # noqa: E402

SHAPE = (16, 16, 16)


def report(name, compiled):
    text = compiled.as_text()
    ops = hlo_bytes.collectives(text)
    print("%-27s %5d bytes into each device: %s" % (
        name, hlo_bytes.recv_bytes(text),
        ", ".join("%s (%d B, group of %s)" % (c["op"], c["bytes"], c["group_size"]) for c in ops) or "none"))
    return hlo_bytes.recv_bytes(text), [c["op"] for c in ops]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reshard", help="ignored (the CLI is no longer needed: reshard.jax plans in-process)")
    ap.parse_args()

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    src, dst = NamedSharding(mesh, P("y", None, "x")), NamedSharding(mesh, P(None, ("x", "y"), None))
    x = jax.device_put(jnp.arange(np.prod(SHAPE), dtype=jnp.float32).reshape(SHAPE), src)
    want = jax.device_put(x, dst)

    xla = jax.jit(lambda v: jax.lax.with_sharding_constraint(v, dst), out_shardings=dst)
    ours = jax.jit(lambda v: rj.reshard(v, dst), out_shardings=dst)
    print("f32[16,16,16] on mesh x=4,y=2: P('y', None, 'x') -> P(None, ('x','y'), None)")
    xla_bytes, xla_ops = report("XLA (sharding constraint)", xla.lower(x).compile())
    our_bytes, our_ops = report("reshard.jax.reshard", ours.lower(x).compile())
    for name, fn in (("XLA", xla), ("reshard", ours)):
        got = fn(x)
        if not (np.array_equal(np.asarray(got), np.asarray(want)) and got.sharding.is_equivalent_to(dst, 3)):
            sys.exit("%s: result differs from jax.device_put(x, target)" % name)
    print("both equal jax.device_put(x, target); reshard receives %.1fx fewer bytes (%d vs %d)" % (
        xla_bytes / our_bytes, our_bytes, xla_bytes))
    print()
    print(rj.explain(x, dst))
    if our_ops != ["all-to-all"] or our_bytes != 1792:
        sys.exit("expected one all-to-all of 1792 bytes, got %s (%d B)" % (our_ops, our_bytes))


if __name__ == "__main__":
    main()
