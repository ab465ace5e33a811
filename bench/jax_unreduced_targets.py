"""What jax 0.10.2 does with reshards into unreduced targets, beside reshard's plans (a benchmark,
not a test: reshard.jax leaves unreduced targets to jax, so there is no reshard program to compare
values with).

For each row (f32[16,16] on mesh x=4,y=2, Explicit axes), in its own process since Shardy may abort:
the bytes into a device of the compiled `jax.sharding.reshard` (tests/jax/hlo_bytes.py, an
all-reduce priced as a ring), or how it failed; and reshard's plan and bound by bytes
(`reshard plan ... --bandwidth-only`).

  python3 bench/jax_unreduced_targets.py [--reshard build/reshard]
"""
import argparse
import json
import os
import subprocess
import sys

ROWS = [  # (source spec, how it is made: A and B specs of a matmul, or None for a plain array; target spec)
    ("P(None, None, unreduced={'x'})", ("P(None, 'x')", "P('x', None)"), "P(None, None, unreduced={'y'})"),
    ("P('y', None, unreduced={'x'})", ("P('y', 'x')", "P('x', None)"), "P(None, None, unreduced={'x','y'})"),
    ("P('x', None)", None, "P(None, None, unreduced={'y'})"),
    ("P('x', None)", None, "P('x', None, unreduced={'y'})"),
    ("P(None, None, unreduced={'x','y'})", ("P(None, ('x','y'))", "P(('x','y'), None)"), "P('x', None, unreduced={'y'})"),
    ("P(None, None, unreduced={'x','y'})", ("P(None, ('x','y'))", "P(('x','y'), None)"), "P(None, 'x', unreduced={'y'})"),
]

ONE_ROW = r"""
import os, sys
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "jax"))
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
import hlo_bytes
src, made, dst = eval(sys.argv[2], {"P": P})
mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Explicit))
with jax.set_mesh(mesh):
    if made is None:
        a = jax.device_put(np.arange(256, dtype=np.float32).reshape(16, 16), NamedSharding(mesh, src))
        make = lambda a: a
        args = (a,)
    else:
        A = jax.device_put(np.ones((16, 32), np.float32), NamedSharding(mesh, made[0]))
        B = jax.device_put(np.ones((32, 16), np.float32), NamedSharding(mesh, made[1]))
        make = lambda A, B: jnp.dot(A, B, out_sharding=src)
        args = (A, B)
    alone = hlo_bytes.recv_bytes(jax.jit(make).lower(*args).compile().as_text(), all_reduce="ring")
    text = jax.jit(lambda *a: jax.sharding.reshard(make(*a), dst)).lower(*args).compile().as_text()
    print(hlo_bytes.recv_bytes(text, all_reduce="ring") - alone, ",".join(c["op"] for c in hlo_bytes.collectives(text)))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reshard", default="build/reshard")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print("| from | to | jax.sharding.reshard | reshard (by bytes) | lower bound |")
    print("|---|---|---|---|---|")
    for src, made, dst in ROWS:
        spec = "(%s, %s, %s)" % (src, "None" if made is None else "(%s, %s)" % made, dst)
        r = subprocess.run([sys.executable, "-c", ONE_ROW, root, spec], capture_output=True, text=True)
        if r.returncode == 0:
            nbytes, ops = r.stdout.split()[0], (r.stdout.split() + [""])[1]
            xla = "%s B (%s)" % (nbytes, ops or "no collectives")
        else:
            check = [line for line in r.stderr.splitlines() if "Check failed" in line]
            xla = "aborts (exit %d): %s" % (r.returncode, check[0].split("] ", 1)[-1] if check else r.stderr[-200:])
        p = subprocess.run([args.reshard, "plan", "--shape", "16,16", "--mesh", "x=4,y=2", "--from", src, "--to", dst,
                            "--bandwidth-only", "--json"], capture_output=True, text=True, check=True)
        plan = json.loads(p.stdout)
        ops = ", ".join(s["op"] for s in plan["steps"])
        print("| `%s` | `%s` | %s | %d B (%s) | %d B |" % (src, dst, xla, plan["stats"]["max_recv_bytes"], ops,
                                                      plan["lower_bound"]["max_recv_bytes"]))


if __name__ == "__main__":
    main()
