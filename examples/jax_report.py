"""The report's program, as its author wrote it, and the one word to change.

    def f(a, b, c):
        d = a + b
        d = jax.lax.with_sharding_constraint(d, P(None, ('x', 'y'), None))
        return c + d

jax.jit(f) rematerializes d: XLA logs "Involuntary full rematerialization" and all-gathers the
whole array onto every device (14336 bytes into each). reshard.jax.jit(f), the same call with
the same arguments, compiles the constraint to reshard's plan: one all-to-all, 1792 bytes.
Prints each compiled program's collectives and bytes, checks that the values are equal, and
writes a line "== reshard.jax.jit" to standard error between the two compiles, so that XLA's
log can be read for each (run with TF_CPP_MIN_LOG_LEVEL=0 to see it).

  python3 examples/jax_report.py
(8 host CPU devices are forced; needs the reshard package and jax 0.10.2)
"""
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, PartitionSpec as P  # noqa: E402

import reshard.jax  # noqa: E402
from reshard import hlo_bytes  # noqa: E402


def f(a, b, c):
    d = a + b
    d = jax.lax.with_sharding_constraint(d, P(None, ('x', 'y'), None))
    return c + d


def collectives(compiled):
    text = compiled.as_text()
    ops = hlo_bytes.collectives(text)
    return hlo_bytes.recv_bytes(text), ", ".join("%s %d B" % (c["op"], c["bytes"]) for c in ops) or "none"


def main():
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    a = b = c = np.arange(16 ** 3, dtype=np.float32).reshape(16, 16, 16)
    shardings = (P('y', None, 'x'), P('y', None, 'x'), None)  # c: the compiler's choice
    with jax.set_mesh(mesh):
        before = jax.jit(f, in_shardings=shardings)
        n_before, ops_before = collectives(before.lower(a, b, c).compile())
        sys.stderr.write("== reshard.jax.jit\n")
        sys.stderr.flush()
        after = reshard.jax.jit(f, in_shardings=shardings)
        n_after, ops_after = collectives(after.lower(a, b, c).compile())
        equal = np.array_equal(np.asarray(before(a, b, c)), np.asarray(after(a, b, c)))
    print("jax.jit(f):         %5d bytes into each device: %s" % (n_before, ops_before))
    print("reshard.jax.jit(f): %5d bytes into each device: %s" % (n_after, ops_after))
    print("values equal: %s" % equal)
    return 0 if equal and n_after < n_before else 1


if __name__ == "__main__":
    sys.exit(main())
