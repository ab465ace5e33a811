"""What reshard.jax adds to the first compile of a program (a benchmark, not a test).

For each of N new pairs (the canonical move on f32[16k,16,16], k = 1..N, so that neither JAX's nor
reshard's caches hold it), the wall time of `.lower(x).compile()` of
  jax.jit(lambda a: with_sharding_constraint(a * 2, dst))    (XLA's own lowering)
  reshard.jax.jit(the same function)                          (reshard's op, its plan at the bound)
and, for an uneven pair where the plan is not at the bound, the same two: there the op compiles
the comparison once. Prints the medians and the differences, in milliseconds.

  python3 bench/jax_first_compile.py [--pairs 15]
"""
import argparse
import os
import statistics
import sys
import time

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import reshard.jax as rj  # noqa: E402


def compile_ms(fn, arg):
    t0 = time.perf_counter()
    fn.lower(arg).compile()
    return (time.perf_counter() - t0) * 1e3


def measure(shape_of, src, dst, pairs, arg_sharding=None):
    """Medians over `pairs` new shapes; the argument comes in `arg_sharding` (default src) and is
    constrained to src inside (JAX holds uneven arrays only inside jit), then to dst."""
    xla, ours = [], []
    for k in range(1, pairs + 1):
        arg = jax.ShapeDtypeStruct(shape_of(k), np.float32, sharding=arg_sharding or src)
        wsc = jax.lax.with_sharding_constraint
        body = (lambda a: wsc(a * 2, dst)) if arg_sharding is None else (lambda a: wsc(wsc(a, src) * 2, dst))
        # interleaved, a fresh function object each time (JAX caches by function and shapes)
        xla.append(compile_ms(jax.jit(lambda a: body(a)), arg))
        ours.append(compile_ms(rj.jit(lambda a: body(a)), arg))
    return statistics.median(xla), statistics.median(ours)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=15)
    args = ap.parse_args()
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    src, dst = NamedSharding(mesh, P("y", None, "x")), NamedSharding(mesh, P(None, ("x", "y"), None))
    # warm up JAX and XLA themselves (first-use costs that are no pair's)
    compile_ms(jax.jit(lambda a: a + 1), jax.ShapeDtypeStruct((8, 8, 8), np.float32, sharding=src))
    compile_ms(rj.jit(lambda a: jax.lax.with_sharding_constraint(a, dst)),
               jax.ShapeDtypeStruct((8, 16, 8), np.float32, sharding=src))
    rows = []
    x, o = measure(lambda k: (16 * k, 16, 16), src, dst, args.pairs)
    rows.append(("canonical move, plan at the bound (no comparison)", x, o))
    m4 = Mesh(np.array(jax.devices()[:4]), ("x",), axis_types=(AxisType.Auto,))
    x, o = measure(lambda k: (4 * k + 2, 3), NamedSharding(m4, P("x", None)), NamedSharding(m4, P(None, None)),
                   args.pairs, arg_sharding=NamedSharding(m4, P()))
    rows.append(("uneven slice + all-gather, not at the bound (compared)", x, o))
    print("first compile of a new pair, median of %d (ms): jax.jit | reshard.jax.jit | added" % args.pairs)
    for name, x, o in rows:
        print("  %-58s %7.1f | %7.1f | %+7.1f" % (name, x, o, o - x))
    print(rj.cache_info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
