"""The canonical case in real JAX, both ways: XLA's own reshard
(with_sharding_constraint) and the module `reshard plan --emit jax` writes.
Prints each compiled program's collectives and the bytes one device receives,
and checks that both give exactly jax.device_put(x, target).

  python3 examples/jax_canonical.py [--reshard build/reshard]
(8 host CPU devices are forced; needs jax 0.10.2: scripts/setup_python.sh)
"""
import argparse
import os
import subprocess
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "jax"))
import hlo_bytes  # noqa: E402

SHAPE, MESH = (16, 16, 16), (("x", 4), ("y", 2))
SOURCE, TARGET = "P('y', None, 'x')", "P(None, ('x','y'), None)"


def report(name, compiled):
    text = compiled.as_text()
    ops = hlo_bytes.collectives(text)
    print("%-26s %6d bytes into each device: %s" % (
        name, hlo_bytes.recv_bytes(text),
        ", ".join("%s (%d B, group of %s)" % (c["op"], c["bytes"], c["group_size"]) for c in ops) or "none"))
    return hlo_bytes.recv_bytes(text), [c["op"] for c in ops]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reshard", default="build/reshard")
    args = ap.parse_args()
    source = subprocess.run(
        [args.reshard, "plan", "--shape", ",".join(map(str, SHAPE)), "--mesh", ",".join("%s=%d" % a for a in MESH),
         "--from", SOURCE, "--to", TARGET, "--for", "jax-cpu", "--emit", "jax"],
        check=True, capture_output=True, text=True).stdout
    module = {}
    exec(compile(source, "<reshard plan --emit jax>", "exec"), module)  # noqa: S102 (our emitter's output)

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    src, dst = NamedSharding(mesh, P("y", None, "x")), NamedSharding(mesh, P(None, ("x", "y"), None))
    x = jax.device_put(jnp.arange(np.prod(SHAPE), dtype=jnp.float32).reshape(SHAPE), src)
    want = jax.device_put(x, dst)

    xla = jax.jit(lambda v: jax.lax.with_sharding_constraint(v, dst), out_shardings=dst)
    ours = jax.jit(lambda v: module["reshard"](v, mesh), out_shardings=dst)
    print("f32[16,16,16] on mesh x=4,y=2: %s -> %s" % (SOURCE, TARGET))
    xla_bytes, xla_ops = report("XLA (sharding constraint)", xla.lower(x).compile())
    our_bytes, our_ops = report("reshard (--emit jax)", ours.lower(x).compile())
    for name, fn in (("XLA", xla), ("reshard", ours)):
        got = fn(x)
        if not (np.array_equal(np.asarray(got), np.asarray(want)) and got.sharding.is_equivalent_to(dst, 3)):
            sys.exit("%s: result differs from jax.device_put(x, target)" % name)
    print("both equal jax.device_put(x, target); reshard receives %.1fx fewer bytes (%d vs %d)" % (
        xla_bytes / our_bytes, our_bytes, xla_bytes))
    if our_ops != ["all-to-all"] or our_bytes != 1792:
        sys.exit("expected one all-to-all of 1792 bytes, got %s (%d B)" % (our_ops, our_bytes))


if __name__ == "__main__":
    main()
