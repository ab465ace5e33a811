"""Realistic training programs, jax.jit against reshard.jax.jit: an MLP training step with FSDP and
tensor-parallel shardings whose sequence-parallel constraint rematerializes under jax.jit, a
transformer block (attention and MLP) with its gradient, and a scan over layers.

Run as a script (tests/python/test_realistic.py does, with XLA's warnings on): compiles each
program both ways, writing a line "== PROGRAM SIDE" to standard error before each compile so that
XLA's log can be attributed, runs both, and prints one JSON object per program on standard
output: bytes into each device, collectives, and the largest difference between the results."""
import json
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

MESH = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
wsc = jax.lax.with_sharding_constraint
B, S, H, F, HEADS, LAYERS = 8, 16, 32, 64, 4, 3


def ns(*spec):
    return NamedSharding(MESH, P(*spec))


def rms_norm(h):
    return h / jnp.sqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6)


def mlp(p, h):
    """Tensor-parallel MLP: hidden split over x, batch over y; the norm runs sequence-parallel."""
    h = wsc(h, ns(None, ("x", "y"), None))  # sequence parallel: the canonical move
    h = rms_norm(h)
    h = wsc(h, ns("y", None, None))
    u = jax.nn.gelu(h @ p["w1"])
    return wsc(u @ p["w2"], ns("y", None, "x"))


def attention(p, h):
    q, k, v = (jnp.einsum("bsh,hnd->bsnd", h, p[n]) for n in ("wq", "wk", "wv"))
    q = wsc(q, ns("y", None, "x", None))  # heads over x
    att = jax.nn.softmax(jnp.einsum("bsnd,btnd->bnst", q, k) / np.sqrt(H // HEADS), axis=-1)
    o = jnp.einsum("bnst,btnd->bsnd", att, v)
    return wsc(jnp.einsum("bsnd,ndh->bsh", o, p["wo"]), ns("y", None, "x"))


def block(p, h):
    return h + mlp(p, h + attention(p, h))


def init(rng, fsdp=True):
    def w(*shape, spec):
        return jax.device_put(rng.randn(*shape).astype(np.float32) / np.sqrt(shape[0]), ns(*spec))
    return {"w1": w(H, F, spec=("y" if fsdp else None, "x")), "w2": w(F, H, spec=("x", "y" if fsdp else None)),
            "wq": w(H, HEADS, H // HEADS, spec=(None, "x", None)), "wk": w(H, HEADS, H // HEADS, spec=(None, "x", None)),
            "wv": w(H, HEADS, H // HEADS, spec=(None, "x", None)), "wo": w(HEADS, H // HEADS, H, spec=("x", None, None))}


def mlp_train_step(p, x, y):
    def loss(q):
        return jnp.mean((mlp(q, x) - y) ** 2)
    value, g = jax.value_and_grad(loss)(p)
    return value, jax.tree_util.tree_map(lambda a, b: a - 1e-2 * b, p, g)


def block_grad(p, x):
    return jax.grad(lambda q: jnp.sum(jnp.sin(block(q, x))))(p)


def scan_layers(ps, x):
    def body(h, p):
        return block(p, h), None
    return jax.lax.scan(body, x, ps)[0]


def run(name, fn, args):
    out = {"name": name}
    results = {}
    for side, jit in (("jax.jit", jax.jit), ("reshard.jax.jit", rj.jit)):
        sys.stderr.write("== %s %s\n" % (name, side))
        sys.stderr.flush()
        f = jit(fn)
        text = f.lower(*args).compile().as_text()
        out[side] = {"bytes": hlo_bytes.recv_bytes(text), "collectives": [c["op"] for c in hlo_bytes.collectives(text)]}
        results[side] = f(*args)
    diffs = jax.tree_util.tree_map(lambda a, b: float(jnp.max(jnp.abs(a - b))), results["jax.jit"],
                                   results["reshard.jax.jit"])
    out["max_abs_diff"] = max(jax.tree_util.tree_leaves(diffs))
    print(json.dumps(out), flush=True)


def main():
    rng = np.random.RandomState(0)
    x = jax.device_put(rng.randn(B, S, H).astype(np.float32), ns("y", None, "x"))
    y = jax.device_put(rng.randn(B, S, H).astype(np.float32), ns("y", None, "x"))
    p = init(rng)
    run("mlp_train_step", mlp_train_step, (p, x, y))
    run("transformer_block_grad", block_grad, (p, x))
    layers = [init(rng) for _ in range(LAYERS)]
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *layers)
    stacked = {k: jax.device_put(v, NamedSharding(MESH, P(None, *p[k].sharding.spec))) for k, v in stacked.items()}
    run("scan_over_layers", scan_layers, (stacked, x))
    return 0


if __name__ == "__main__":
    sys.exit(main())
