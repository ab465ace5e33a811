#!/usr/bin/env python3
"""Generate the fixtures of `reshard audit` with real JAX 0.10.2 on host CPU devices.

    .venv/bin/python tests/data/audit/gen_audit_fixtures.py [CASE...]

For every case below (a jitted program whose shardings force, or do not force,
reshards) it runs one subprocess that compiles the program with
XLA_FLAGS="--xla_force_host_platform_device_count=N --xla_dump_to=DIR" and writes,
under tests/data/audit/<case>/:

    compiled.hlo.txt                 jitted.lower(*args).compile().as_text()
    dump/<module>.cpu_after_optimizations.txt
                                     the one relevant file of the --xla_dump_to folder
    xla.log                          the subprocess' standard error: XLA's absl log, where
                                     "[SPMD] Involuntary full rematerialization" lines appear

(the dump is made with --xla_dump_large_constants, so that offset tables of
16 entries or more are printed; compiled.hlo.txt elides them as "{...}")
and the manifest tests/data/audit/cases.json: per case its description, device
count, the logged rematerializations (source and target sharding text and the
instruction's shape, read from xla.log with a regular expression), the bytes one
device receives through all collectives of the compiled module (tests/jax/hlo_bytes.py,
an independent reader), and `expect`: what the audit must report, written here by
hand from what the program does (see the cases' comments).

Nothing is executed on the devices: programs are compiled from ShapeDtypeStructs.
"""
from __future__ import annotations

import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

# ---------------------------------------------------------------------------
# The cases. Each returns (jitted function, args). `expect` lists the findings
# the audit must report: kind and the source/target sharding text as XLA
# prints it; "none" cases are ones where XLA already moves the lower bound.
# ---------------------------------------------------------------------------


def _setup():
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
    return np, jax, jnp, AxisType, Mesh, NamedSharding, P


def mesh_of(axes):
    np, jax, _, AxisType, Mesh, _, _ = _setup()
    n = 1
    for _, s in axes:
        n *= s
    devs = np.array(jax.devices()[:n]).reshape([s for _, s in axes])
    return Mesh(devs, tuple(a for a, _ in axes), axis_types=(AxisType.Auto,) * len(axes))


def sds(shape, dtype="float32"):
    _, jax, jnp, *_ = _setup()
    return jax.ShapeDtypeStruct(shape, getattr(jnp, dtype))


def _constrained(axes):
    """jax, jnp, a NamedSharding maker over a mesh of `axes`, and with_sharding_constraint."""
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(axes)
    return jax, jnp, (lambda *a: NamedSharding(m, P(*a))), jax.lax.with_sharding_constraint


def reshard_jit(shape, axes, src, dst, dtype="float32", body=None):
    """jax.jit with in_shardings=src, out_shardings=dst around an elementwise body."""
    _, jax, jnp, _, _, NamedSharding, _ = _setup()
    m = mesh_of(axes)
    fn = body or (lambda v: v * 2)
    return jax.jit(fn, in_shardings=NamedSharding(m, src), out_shardings=NamedSharding(m, dst)), (sds(shape, dtype),)


def reshard_wsc(shape, axes, src, dst, dtype="float32"):
    """jax.jit(in_shardings=src) with with_sharding_constraint(dst) inside."""
    _, jax, jnp, _, _, NamedSharding, _ = _setup()
    m = mesh_of(axes)

    def f(v):
        return jax.lax.with_sharding_constraint(v + 1, NamedSharding(m, dst))
    return jax.jit(f, in_shardings=NamedSharding(m, src)), (sds(shape, dtype),)


X4Y2 = [("x", 4), ("y", 2)]
X2Y4 = [("x", 2), ("y", 4)]


def case_canonical_jit():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16, 16), X4Y2, P("y", None, "x"), P(None, ("x", "y"), None))


def case_canonical_wsc():
    _, _, _, _, _, _, P = _setup()
    return reshard_wsc((16, 16, 16), X4Y2, P("y", None, "x"), P(None, ("x", "y"), None))


def case_swap_axes():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16), X4Y2, P("x", "y"), P("y", "x"))


def case_device_order():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16), X4Y2, P(("x", "y")), P(("y", "x")))


def case_gather_all():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16), X4Y2, P("x", None), P(None, None))


def case_slice_only():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16), X4Y2, P(None, None), P("x", "y"))


def case_transpose_x8():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16), [("x", 8)], P("x", None), P(None, "x"))


def case_partial_to_other_axis():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16), X4Y2, P("x", None), P(None, "y"))


def case_move_dim_bf16():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((8, 32, 16), X4Y2, P(None, "x", "y"), P("x", None, "y"), dtype="bfloat16")


def case_remat_3d_16dev():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16, 16), [("a", 2), ("b", 2), ("c", 4)], P("c", None, ("a", "b")), P(None, ("a", "c"), "b"))


def case_remat_rank1():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((64,), X4Y2, P(("x", "y")), P(("y", "x")), body=lambda v: v + 1)


def case_remat_int32():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((32, 8), X4Y2, P("y", "x"), P(("x", "y"), None), dtype="int32")


def case_rank4_heads():
    _, _, _, _, _, _, P = _setup()
    return reshard_wsc((4, 8, 8, 16), X4Y2, P("y", None, "x", None), P(None, "x", None, "y"))


def case_replicated_axis_swap():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 32), X4Y2, P(None, "x"), P("y", None))


def case_two_reshards():
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(X4Y2)
    s = lambda *a: NamedSharding(m, P(*a))

    def f(a, b):
        a2 = jax.lax.with_sharding_constraint(a * 3, s(None, ("x", "y")))
        b2 = jax.lax.with_sharding_constraint(b + 1, s("x", None))
        return a2, b2
    return (jax.jit(f, in_shardings=(s("y", "x"), s(None, "x")), out_shardings=(s(None, ("x", "y")), s("x", None))),
            (sds((16, 16)), sds((16, 16))))


def case_mlp():
    # x @ w1, relu, a sharding constraint that disagrees with the dot's layout, @ w2.
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(X4Y2)
    s = lambda *a: NamedSharding(m, P(*a))

    def mlp(x, w1, w2):
        h = jnp.maximum(x @ w1, 0)
        h = jax.lax.with_sharding_constraint(h, s("y", "x"))
        return h @ w2
    return (jax.jit(mlp, in_shardings=(s("x", None), s(None, "y"), s("y", None)), out_shardings=s("x", None)),
            (sds((32, 16)), sds((16, 64)), sds((64, 16))))


def case_mlp_megatron():
    # Megatron-style MLP: column- then row-parallel; XLA needs only the reduce. No reshard waste.
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(X4Y2)
    s = lambda *a: NamedSharding(m, P(*a))

    def mlp(x, w1, w2):
        return jnp.maximum(x @ w1, 0) @ w2
    return (jax.jit(mlp, in_shardings=(s("x", None), s(None, "y"), s("y", None)), out_shardings=s("x", None)),
            (sds((32, 16)), sds((16, 64)), sds((64, 16))))


def case_transformer_block():
    # One attention + MLP block. The residual stream is sequence-sharded over
    # ('x','y') between blocks, heads are sharded over 'x' inside attention,
    # and the output is asked for hidden-sharded: the shardings force reshards.
    jax, jnp, s, wsc = _constrained(X4Y2)
    B, S, D, H = 2, 16, 32, 4
    Dh = D // H

    def block(x, wq, wk, wv, wo, w1, w2):
        h = x - jnp.mean(x, axis=-1, keepdims=True)
        h = wsc(h, s(None, None, None))
        q = (h @ wq).reshape(B, S, H, Dh)
        k = (h @ wk).reshape(B, S, H, Dh)
        v = (h @ wv).reshape(B, S, H, Dh)
        q, k, v = (wsc(t, s(None, None, "x", None)) for t in (q, k, v))
        a = jax.nn.softmax(jnp.einsum("bshd,bthd->bhst", q, k) / Dh ** 0.5, axis=-1)
        o = jnp.einsum("bhst,bthd->bshd", a, v).reshape(B, S, D)
        x = x + wsc(o @ wo, s(None, ("x", "y"), None))
        f = jnp.maximum(x @ w1, 0) @ w2
        return wsc(x + f, s(None, None, ("x", "y")))
    args = (sds((B, S, D)), sds((D, D)), sds((D, D)), sds((D, D)), sds((D, D)), sds((D, 4 * D)), sds((4 * D, D)))
    shard = (s(None, ("x", "y"), None), s(None, "x"), s(None, "x"), s(None, "x"), s("x", None), s(None, "y"), s("y", None))
    return jax.jit(block, in_shardings=shard, out_shardings=s(None, None, ("x", "y"))), args


def case_uneven_rows():
    # 10 rows over 4 devices inside the program (XLA pads the shards).
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(X4Y2)
    s = lambda *a: NamedSharding(m, P(*a))

    def f(v):
        w = jax.lax.with_sharding_constraint(v[:10] * 2, s("x", "y"))
        return jax.lax.with_sharding_constraint(w + 1, s("y", "x"))
    return jax.jit(f, in_shardings=s(None, None)), (sds((16, 8)),)


def case_sum_then_reshard():
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(X4Y2)
    s = lambda *a: NamedSharding(m, P(*a))

    def f(v):
        r = jnp.sum(v, axis=1)
        return jax.lax.with_sharding_constraint(r, s(None, ("y", "x")))
    return jax.jit(f, in_shardings=s("x", None, "y")), (sds((16, 8, 16)),)


def case_fsdp_gather():
    # FSDP: weights sharded over all devices, gathered for the dot. Lower bound; no finding.
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(X4Y2)
    s = lambda *a: NamedSharding(m, P(*a))

    def f(x, w):
        return x @ w
    return jax.jit(f, in_shardings=(s(("x", "y"), None), s(None, ("x", "y"))), out_shardings=s(("x", "y"), None)), (
        sds((32, 16)), sds((16, 16)))


def case_x16_canonical_analog():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((32, 16, 16), [("x", 4), ("y", 4)], P("y", None, "x"), P(None, ("x", "y"), None))


def case_transpose_then_reshard():
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(X4Y2)
    s = lambda *a: NamedSharding(m, P(*a))

    def f(v):
        return jax.lax.with_sharding_constraint(jnp.transpose(v, (1, 0, 2)), s("y", "x", None))
    return jax.jit(f, in_shardings=s("x", None, "y")), (sds((16, 8, 8)),)


def case_remat_two_dims_to_one():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16, 8), X4Y2, P("x", "y", None), P(None, None, ("x", "y")))


def case_remat_two_dims_to_one_yx():
    _, _, _, _, _, _, P = _setup()
    return reshard_wsc((16, 16, 8), X4Y2, P("x", "y", None), P(None, None, ("y", "x")))


def case_remat_canonical_bf16():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16, 16), X4Y2, P("y", None, "x"), P(None, ("x", "y"), None), dtype="bfloat16")


def case_dot_output_remat():
    # A dot's output (batch and sequence sharded like its input) constrained to
    # be sharded over the hidden dim: the dot's layout is forced into another.
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(X4Y2)
    s = lambda *a: NamedSharding(m, P(*a))

    def f(x, w, w2):
        h = jnp.maximum(x @ w, 0)
        h = jax.lax.with_sharding_constraint(h, s(None, None, ("x", "y")))
        return h @ w2
    return (jax.jit(f, in_shardings=(s("x", "y", None), s(None, None), s(("x", "y"), None)), out_shardings=s(None, None, None)),
            (sds((8, 16, 16)), sds((16, 32)), sds((32, 16))))


def case_slice_then_reshard():
    # A user's slice of an unsharded dim, then a reshard of the slice.
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    m = mesh_of(X4Y2)
    s = lambda *a: NamedSharding(m, P(*a))

    def f(v):
        return jax.lax.with_sharding_constraint(v[:, :16] * 2, s(None, ("x", "y")))
    return jax.jit(f, in_shardings=s(("x", "y"), None)), (sds((16, 32)),)


def case_move_dim_f16():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((8, 32, 16), X4Y2, P(None, "x", "y"), P("x", None, "y"), dtype="float16")


def case_remat_canonical_f16():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16, 16), X4Y2, P("y", None, "x"), P(None, ("x", "y"), None), dtype="float16")


def case_transpose_x8_bf16():
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((16, 16), [("x", 8)], P("x", None), P(None, "x"), dtype="bfloat16")


Y2Z4 = [("y", 2), ("z", 4)]


def case_a2a_permute():
    # XLA: an all-to-all over all 8 devices, then a collective-permute into the target's
    # device order (120 B into the busiest device); reshard's plan: one all-to-all (56 B).
    _, _, _, _, _, _, P = _setup()
    return reshard_jit((8, 16, 1), Y2Z4, P(("z", "y")), P(None, ("y", "z")))


def case_a2a_permute_wsc():
    _, _, _, _, _, _, P = _setup()
    return reshard_wsc((8, 16, 1), Y2Z4, P(("z", "y")), P(None, ("y", "z")))


def case_scan_remat():
    # A lax.scan over 4 layers whose body reshards its carry twice per iteration, each a full
    # rematerialization: P('y',None,'x') -> P(None,('x','y'),None) -> P('y',None,'x').
    jax, jnp, s, wsc = _constrained(X4Y2)

    def body(c, w):
        h = wsc(c * w, s(None, ("x", "y"), None))
        return wsc(jnp.tanh(h), s("y", None, "x")), None

    def f(x, ws):
        return jax.lax.scan(body, x, ws)[0]
    return (jax.jit(f, in_shardings=(s("y", None, "x"), s(None, "y", None, "x")), out_shardings=s("y", None, "x")),
            (sds((16, 16, 16)), sds((4, 16, 16, 16))))


def case_scan_layers():
    # A scan over 4 layers of stacked weights f32[4,32,32] P(None,None,'y'): each layer is a
    # dot (its partial sums over x completed by an all-reduce), then P('x','y') -> P('y','x').
    # XLA computes the layer slice's per-device offset from partition-id before the loop and
    # carries it through; inside, the loop counter picks the layer (the same index on every
    # device), so the body's dot and the reshards after it are followed.
    jax, jnp, s, wsc = _constrained(X2Y4)

    def layer(h, w):
        h = wsc(jnp.tanh(h @ w), s("x", "y"))
        return wsc(h, s("y", "x")), None

    def f(ws, x):
        return jax.lax.scan(layer, x, ws)[0]
    return jax.jit(f, in_shardings=(s(None, None, "y"), s("x", None))), (sds((4, 32, 32)), sds((16, 32)))


def case_cond_branches():
    # lax.cond whose two branches each make the same full rematerialization of f32[8,16,4]
    # P('x',None,'y') into P(None,('x','y'),None) on x=4,y=2 and return it: a finding in each
    # branch; one branch runs per call, so the totals count one.
    jax, jnp, s, wsc = _constrained(X4Y2)

    def f(x, p):
        return jax.lax.cond(p, lambda v: wsc(v * 2, s(None, ("x", "y"), None)),
                            lambda v: wsc(v * 3, s(None, ("x", "y"), None)), x)
    return (jax.jit(f, in_shardings=(s("x", None, "y"), s())),
            (sds((8, 16, 4)), jax.ShapeDtypeStruct((), jnp.bool_)))


def case_fork_returned_and_back():
    # A value resharded P('x','y') -> P('y','x') is returned in that layout and, after an add,
    # resharded back: two reshards (there, and back from the returned layout), each at the lower
    # bound, not one there-and-back chain priced from the source's layout (which claimed every
    # byte XLA moved as a saving and counted the first reshard's collectives twice).
    jax, jnp, s, wsc = _constrained(X2Y4)

    def f(a):
        b = wsc(a * 2, s("y", "x"))
        return b, wsc(b + 1, s("x", "y"))
    return jax.jit(f, in_shardings=s("x", "y"), out_shardings=(s("y", "x"), s("x", "y"))), (sds((16, 16)),)


def case_reshard_jax_seed():
    # The canonical program fixed with reshard.jax.reshard, and reshard.jax.explain() of the same
    # move, as a user checks it: explain compiles XLA's lowering and reshard's plan to compare
    # (modules named jit_reshard_comparison_only, which never run; XLA logs the
    # rematerialization of the first). The program itself moves the lower bound.
    _, jax, jnp, _, _, NamedSharding, P = _setup()
    import reshard.jax as rj
    m = mesh_of(X4Y2)
    src, dst = NamedSharding(m, P("y", None, "x")), NamedSharding(m, P(None, ("x", "y"), None))
    fn = jax.jit(lambda v: rj.reshard(v * 2, dst), in_shardings=src, out_shardings=dst)

    def after():
        rj.explain(jax.ShapeDtypeStruct((16, 16, 16), jnp.float32, sharding=src), dst)
    return fn, (sds((16, 16, 16)),), after


CANON_FROM, CANON_TO = "{devices=[2,1,4]<=[4,2]T(1,0)}", "{devices=[1,8,1]<=[8]}"


def remat(src, dst, xla, ours, logged=True, **extra):
    """extra: moved_as (the element type XLA's collectives carry, where it is not the array's),
    trip_count (the finding is inside a loop that runs this often)."""
    return dict({"kind": "full-rematerialization", "from": src, "to": dst, "xla": xla, "reshard": ours, "logged": logged},
                **extra)


def excess(src, dst, xla, ours, **extra):
    return dict({"kind": "excess", "from": src, "to": dst, "xla": xla, "reshard": ours, "logged": False}, **extra)


def expect(findings, reshards, followed=True):
    """What `reshard audit` must report on the case's folder: its findings, the
    number of reshards it finds in the module (findings or not), and whether it
    follows every value (otherwise a note must say what it did not follow)."""
    return {"findings": findings, "reshards": reshards, "followed": followed}


# name: (program, devices, description, expect). The expectations were checked
# by hand: logged rematerializations against XLA's log (same shardings), bytes
# against tests/jax/hlo_bytes.py, layouts against `reshard convert` of the
# PartitionSpecs; "no finding" cases move the lower bound (or, for swap_axes,
# what reshard's structured plan moves too).
CASES = {
    "canonical_jit": (case_canonical_jit, 8, "f32[16,16,16] P('y',None,'x') -> P(None,('x','y'),None) via in/out_shardings",
                      expect([remat(CANON_FROM, CANON_TO, 14336, 1792)], 1)),
    "canonical_wsc": (case_canonical_wsc, 8, "the canonical case via with_sharding_constraint",
                      expect([remat(CANON_FROM, CANON_TO, 14336, 1792)], 1)),
    "swap_axes": (case_swap_axes, 8, "P('x','y') -> P('y','x'): all-to-all then collective-permute, as reshard's structured plan",
                  expect([], 1)),
    "device_order": (case_device_order, 8, "P(('x','y')) -> P(('y','x')): one collective-permute, the lower bound", expect([], 1)),
    "gather_all": (case_gather_all, 8, "P('x',None) -> replicated: one all-gather, the lower bound", expect([], 1)),
    "slice_only": (case_slice_only, 8, "replicated -> P('x','y'): a local slice, no traffic", expect([], 0)),
    "transpose_x8": (case_transpose_x8, 8, "P('x',None) -> P(None,'x') on x=8: one all-to-all, the lower bound", expect([], 1)),
    "partial_to_other_axis": (case_partial_to_other_axis, 8, "P('x',None) -> P(None,'y'): slice then all-gather, the lower bound",
                              expect([], 1)),
    "move_dim_bf16": (case_move_dim_bf16, 8, "bf16[8,32,16] P(None,'x','y') -> P('x',None,'y'): XLA:CPU's all-to-all "
                      "carries f32, as reshard's plan does there: no finding", expect([], 1)),
    "move_dim_f16": (case_move_dim_f16, 8, "f16[8,32,16] P(None,'x','y') -> P('x',None,'y'): XLA:CPU moves f16 as f16 "
                     "(unlike bf16), as reshard's plan does: no finding", expect([], 1)),
    "transpose_x8_bf16": (case_transpose_x8_bf16, 8, "bf16[16,16] P('x',None) -> P(None,'x') on x=8: one f32 all-to-all",
                          expect([], 1)),
    "remat_3d_16dev": (case_remat_3d_16dev, 16, "f32[16,16,16] on a=2,b=2,c=4: P('c',None,('a','b')) -> P(None,('a','c'),'b')",
                       expect([remat("{devices=[4,1,4]<=[4,4]T(1,0)}", "{devices=[1,8,2]<=[2,2,4]T(0,2,1)}", 8192, 1728)], 1)),
    "remat_rank1": (case_remat_rank1, 8, "f32[64] P(('x','y')) -> P(('y','x')): one collective-permute", expect([], 1)),
    "remat_int32": (case_remat_int32, 8, "s32[32,8] P('y','x') -> P(('x','y'),None)",
                    expect([excess("{devices=[2,4]<=[4,2]T(1,0)}", "{devices=[8,1]<=[8]}", 224, 176)], 1)),
    "rank4_heads": (case_rank4_heads, 8, "f32[4,8,8,16] P('y',None,'x',None) -> P(None,'x',None,'y') via a sharding constraint",
                    expect([], 1)),
    "replicated_axis_swap": (case_replicated_axis_swap, 8, "P(None,'x') -> P('y',None)", expect([], 1)),
    "two_reshards": (case_two_reshards, 8, "two arrays, each with its own reshard", expect([], 2)),
    "mlp": (case_mlp, 8, "MLP whose hidden activation is constrained against the next dot's layout",
            expect([excess("{devices=[2,4]<=[4,2]T(1,0)}", "{devices=[4,1,2]<=[8] last_tile_dim_replicate}", 2560, 2432)], 4)),
    "mlp_megatron": (case_mlp_megatron, 8, "Megatron MLP (column- then row-parallel): only the reduction", expect([], 0)),
    "transformer_block": (case_transformer_block, 8, "attention + MLP block with sequence/head/hidden shardings (the "
                          "attention's dots, and so two all-reduces and an all-gather, are not followed)",
                          expect([], 3, followed=False)),
    "uneven_rows": (case_uneven_rows, 8, "10 rows over x=4 (padded shards): halo exchanges the audit does not follow",
                    expect([], 0, followed=False)),
    "sum_then_reshard": (case_sum_then_reshard, 8, "a reduction, then a sharding constraint", expect([], 1)),
    "fsdp_gather": (case_fsdp_gather, 8, "FSDP weight gather for a dot: the lower bound", expect([], 1)),
    "x16_canonical_analog": (case_x16_canonical_analog, 16, "f32[32,16,16] on x=4,y=4: the canonical pattern",
                             expect([remat("{devices=[4,1,4]<=[4,4]T(1,0)}", "{devices=[1,16,1]<=[16]}", 30720, 1920)], 1)),
    "transpose_then_reshard": (case_transpose_then_reshard, 8, "a transpose, then a sharding constraint", expect([], 1)),
    "remat_two_dims_to_one": (case_remat_two_dims_to_one, 8, "f32[16,16,8] P('x','y',None) -> P(None,None,('x','y'))",
                              expect([remat("{devices=[4,2,1]<=[8]}", "{devices=[1,1,8]<=[8]}", 7168, 896)], 1)),
    "remat_two_dims_to_one_yx": (case_remat_two_dims_to_one_yx, 8,
                                 "f32[16,16,8] P('x','y',None) -> P(None,None,('y','x')) via a sharding constraint",
                                 expect([remat("{devices=[4,2,1]<=[8]}", "{devices=[1,1,8]<=[4,2]T(1,0)}", 7168, 896)], 1)),
    "remat_canonical_bf16": (case_remat_canonical_bf16, 8, "the canonical case in bf16 (XLA:CPU gathers it as f32, and "
                             "reshard's plan moves f32 there too)", expect([remat(CANON_FROM, CANON_TO, 14336, 1792, moved_as="f32")], 1)),
    "remat_canonical_f16": (case_remat_canonical_f16, 8, "the canonical case in f16 (XLA:CPU gathers f16 as f16)",
                            expect([remat(CANON_FROM, CANON_TO, 7168, 896)], 1)),
    "a2a_permute": (case_a2a_permute, 8, "f32[8,16,1] on y=2,z=4: P(('z','y')) -> P(None,('y','z')): all-to-all + "
                    "collective-permute where one all-to-all does", expect([excess("{devices=[8,1,1]<=[2,4]T(1,0)}",
                                                                                "{devices=[1,8,1]<=[8]}", 120, 56)], 1)),
    "a2a_permute_wsc": (case_a2a_permute_wsc, 8, "the all-to-all + permute case via a sharding constraint",
                        expect([excess("{devices=[8,1,1]<=[2,4]T(1,0)}", "{devices=[1,8,1]<=[8]}", 120, 56)], 1)),
    "scan_remat": (case_scan_remat, 8, "lax.scan over 4 layers whose body rematerializes its carry twice per iteration",
                   expect([remat(CANON_TO, CANON_FROM, 14336, 1792, logged=True, trip_count=4),
                           remat(CANON_FROM, CANON_TO, 14336, 1792, logged=True, trip_count=4)], 2)),
    "reshard_jax_seed": (case_reshard_jax_seed, 8, "the canonical program fixed with reshard.jax.reshard, explained: "
                         "reshard.jax's comparison modules are in the dump and the log, never the user's",
                         expect([], 1)),
    "dot_output_remat": (case_dot_output_remat, 8, "a dot's output constrained to another sharding: XLA gathers the input instead",
                         expect([], 1)),
    "scan_layers": (case_scan_layers, 8, "lax.scan over 4 layers of stacked weights: each layer's dot, its all-reduce, "
                    "then P('x','y') -> P('y','x') and the next dot's gather, followed inside the loop "
                    "(XLA: all-to-all, collective-permute, all-gather, 1152 B; reshard: permute and gather, 1024 B)",
                    expect([excess("{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
                                   "{devices=[1,2,4]<=[8] last_tile_dim_replicate}", 1152, 1024, trip_count=4)], 2)),
    "cond_branches": (case_cond_branches, 8, "lax.cond whose two branches each rematerialize the array alike: one "
                      "finding per branch, each logged by XLA",
                      expect([remat("{devices=[4,1,2]<=[8]}", "{devices=[1,8,1]<=[8]}", 1792, 224),
                              remat("{devices=[4,1,2]<=[8]}", "{devices=[1,8,1]<=[8]}", 1792, 224)], 2)),
    "fork_returned_and_back": (case_fork_returned_and_back, 8, "P('x','y') -> P('y','x'), returned so and resharded "
                               "back: two reshards at the lower bound", expect([], 2)),
    "slice_then_reshard": (case_slice_then_reshard, 8, "a slice of an unsharded dim, then a reshard: partial collective-permutes",
                           expect([], 1, followed=False)),
}

# ---------------------------------------------------------------------------
# Random single-reshard programs: jax.jit(lambda v: v * 2) with random in_shardings and
# out_shardings (evenly divided shapes, meshes of 8 devices, one in five in bf16), all compiled
# in one process. Kept in tests/data/audit/random/: modules.hlo.txt (each program's
# --xla_dump_to module after optimizations, one after another, metadata and source
# locations dropped to keep the file small), xla.log, and programs.json (per program: the
# module's name, mesh, shape, dtype, the PartitionSpecs and their HLO sharding text, and the
# bytes one device receives through all collectives of the module, by tests/jax/hlo_bytes.py).
# ---------------------------------------------------------------------------

RANDOM = "random"
RANDOM_COUNT, RANDOM_SEED = 60, 15
RANDOM_MESHES = ([("x", 8)], [("x", 4), ("y", 2)], [("y", 2), ("z", 4)], [("x", 2), ("y", 2), ("z", 2)])


def _random_spec(rng, axes, rank):
    """A PartitionSpec as a list of per-dim axis tuples: each axis on one dim or on none."""
    dims = [[] for _ in range(rank)]
    for name, _ in axes:
        d = rng.randrange(rank + 1)
        if d < rank:
            dims[d].append(name)
    for d in dims:
        rng.shuffle(d)
    return dims


def random_programs():
    import random
    rng = random.Random(RANDOM_SEED)
    out = []
    while len(out) < RANDOM_COUNT:
        axes = rng.choice(RANDOM_MESHES)
        rank = rng.randint(1, 3)
        src, dst = _random_spec(rng, axes, rank), _random_spec(rng, axes, rank)
        if src == dst:
            continue
        size = dict(axes)
        shape = []
        for d in range(rank):
            tiles = max(math.prod(size[a] for a in src[d]), math.prod(size[a] for a in dst[d]))
            shape.append(tiles * rng.choice((1, 1, 2, 4)) if tiles > 1 else rng.choice((1, 2, 4, 8, 16)))
        dtype = "bfloat16" if rng.randrange(5) == 0 else "float32"
        out.append({"name": "random_%02d" % len(out), "mesh": axes, "shape": shape, "dtype": dtype,
                    "src": src, "dst": dst})
    return out


def _pspec(P, dims):
    return P(*[None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims])


def random_worker(out_dir):
    _, jax, _, _, _, NamedSharding, P = _setup()
    manifest = []
    for p in random_programs():
        m = mesh_of(p["mesh"])
        src, dst = NamedSharding(m, _pspec(P, p["src"])), NamedSharding(m, _pspec(P, p["dst"]))
        fn = lambda v: v * 2  # noqa: E731
        fn.__name__ = fn.__qualname__ = p["name"]
        jax.jit(fn, in_shardings=src, out_shardings=dst).lower(sds(tuple(p["shape"]), p["dtype"])).compile()
        rank = len(p["shape"])
        manifest.append(dict(p, src_spec=str(_pspec(P, p["src"])), dst_spec=str(_pspec(P, p["dst"])),
                             src_hlo=str(src._to_xla_hlo_sharding(rank)), dst_hlo=str(dst._to_xla_hlo_sharding(rank))))
    with open(os.path.join(out_dir, "programs.json"), "w") as f:
        json.dump(manifest, f)


_METADATA = re.compile(r", metadata=\{[^{}]*\}")
_SECTION_LINE = re.compile(r"^(FileNames|FunctionNames|FileLocations|StackFrames)$|^[0-9]+ ")


def _small(text):
    """An HLO module's text without metadata and source-location sections."""
    lines = [_METADATA.sub("", l) for l in text.splitlines()]
    return "\n".join(l for l in lines if not _SECTION_LINE.match(l)) + "\n"


def run_random(py):
    case_dir = os.path.join(HERE, RANDOM)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    sys.path.insert(0, os.path.join(ROOT, "tests", "jax"))
    import hlo_bytes
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8 --xla_dump_to=%s --xla_dump_large_constants" % (
            os.path.join(tmp, "dump"))
        env["JAX_PLATFORMS"] = "cpu"
        env["TF_CPP_MIN_LOG_LEVEL"] = "0"
        r = subprocess.run([py, os.path.abspath(__file__), "--worker", RANDOM, tmp], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("random programs failed:\n%s" % r.stderr[-4000:])
        with open(os.path.join(tmp, "programs.json")) as f:
            programs = json.load(f)
        texts = []
        for p in programs:
            found = glob.glob(os.path.join(tmp, "dump", "*.jit_%s.cpu_after_optimizations.txt" % p["name"]))
            if len(found) != 1:
                sys.exit("%s: expected one module in the dump, found %s" % (p["name"], found))
            with open(found[0]) as f:
                text = _small(f.read())
            texts.append(text)
            p["module"] = "jit_" + p["name"]
            p["xla_recv_bytes_all_collectives"] = int(hlo_bytes.recv_bytes(text))
            p["collectives"] = [c["op"] for c in hlo_bytes.collectives(text)]
    with open(os.path.join(case_dir, "modules.hlo.txt"), "w") as f:
        f.write("\n".join(texts))
    with open(os.path.join(case_dir, "xla.log"), "w") as f:
        f.write("".join(l + "\n" for l in r.stderr.splitlines() if "[SPMD]" in l or "CpuDevice(" in l))
    with open(os.path.join(case_dir, "programs.json"), "w") as f:
        head = {"generator": "tests/data/audit/gen_audit_fixtures.py", "jax": _jax_version(), "seed": RANDOM_SEED,
                "logged_rematerializations": sum(1 for _ in REMAT.finditer(r.stderr))}
        f.write(json.dumps(head)[:-1] + ', "programs": [\n')
        f.write(",\n".join(json.dumps(p) for p in programs) + "\n]}\n")  # one program a line
    bf16 = sum(p["dtype"] == "bfloat16" for p in programs)
    print("random: %d programs (%d bf16), %d logged rematerializations" % (
        len(programs), bf16, sum(1 for _ in REMAT.finditer(r.stderr))))


REMAT = re.compile(r"Involuntary full rematerialization\. The compiler cannot go from sharding (\{.*?\}) to (\{.*?\}) "
                   r"efficiently for HLO operation %?([\w.\-]+) = ([a-z0-9]+\[[0-9,]*\])")


def worker(name, out_dir):
    if name == RANDOM:
        random_worker(out_dir)
        return
    fn, args, *after = CASES[name][0]()
    compiled = fn.lower(*args).compile()
    with open(os.path.join(out_dir, "compiled.hlo.txt"), "w") as f:
        f.write(compiled.as_text())
    for a in after:  # what else the case does once its program is compiled (more compiles)
        a()


def run_case(name, py):
    devices = CASES[name][1]
    case_dir = os.path.join(HERE, name)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(os.path.join(case_dir, "dump"))
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=%d --xla_dump_to=%s --xla_dump_large_constants" % (
            devices, os.path.join(tmp, "dump"))
        env["JAX_PLATFORMS"] = "cpu"
        env["TF_CPP_MIN_LOG_LEVEL"] = "0"
        r = subprocess.run([py, os.path.abspath(__file__), "--worker", name, case_dir], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("%s failed:\n%s" % (name, r.stderr[-4000:]))
        with open(os.path.join(case_dir, "xla.log"), "w") as f:
            f.write(r.stderr)
        # Every module the process compiled: the program's own, and any that a library
        # compiled beside it (reshard.jax's comparisons).
        after = sorted(glob.glob(os.path.join(tmp, "dump", "*after_optimizations.txt")))
        if not after:
            sys.exit("%s: no *after_optimizations.txt in the dump" % name)
        for a in after:
            shutil.copy(a, os.path.join(case_dir, "dump", os.path.basename(a)))
    sys.path.insert(0, os.path.join(ROOT, "tests", "jax"))
    import hlo_bytes
    with open(os.path.join(case_dir, "compiled.hlo.txt")) as f:
        text = f.read()
    remats = [{"from": m.group(1), "to": m.group(2), "instruction": m.group(3), "local_shape": m.group(4)}
              for m in REMAT.finditer(r.stderr)]
    return {
        "name": name,
        "description": CASES[name][2],
        "devices": devices,
        "logged_rematerializations": remats,
        "xla_recv_bytes_all_collectives": int(hlo_bytes.recv_bytes(text)),
        "collectives": [c["op"] for c in hlo_bytes.collectives(text)],
    }


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    # --expect-only: rewrite the expectations in cases.json without compiling.
    expect_only = "--expect-only" in sys.argv[1:]
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or list(CASES) + [RANDOM]
    if RANDOM in names:
        names.remove(RANDOM)
        if not expect_only:
            run_random(sys.executable)
    manifest_path = os.path.join(HERE, "cases.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = {c["name"]: c for c in json.load(f)["cases"]}
    for name in names:
        entry = dict(manifest[name]) if expect_only else run_case(name, sys.executable)
        entry["description"] = CASES[name][2]
        entry["expect"] = CASES[name][3]
        manifest[name] = entry
        if expect_only:
            continue
        print("%-24s %2d logged, %6d B in all collectives: %s" % (
            name, len(entry["logged_rematerializations"]), entry["xla_recv_bytes_all_collectives"],
            ", ".join(entry["collectives"]) or "none"))
    version = _old_version(manifest_path) if expect_only else _jax_version()
    with open(manifest_path, "w") as f:
        json.dump({"generator": "tests/data/audit/gen_audit_fixtures.py", "jax": version,
                   "cases": [manifest[n] for n in CASES if n in manifest]}, f, indent=1)
        f.write("\n")


def _old_version(path):
    with open(path) as f:
        return json.load(f).get("jax", "")


def _jax_version():
    r = subprocess.run([sys.executable, "-c", "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip()


if __name__ == "__main__":
    main()
