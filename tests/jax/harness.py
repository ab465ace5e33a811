"""Runs an emitted `reshard(x, mesh)` module in real JAX and compares it with XLA.

For one corpus case (tests/data/collective_cases.tsv, jax=1):

1. the mesh: jax.sharding.Mesh over the case's device ids, axis types Auto
   (jax.make_mesh in JAX 0.10 makes Explicit axes, which with_sharding_constraint
   refuses);
2. x = arange(prod(shape)).reshape(shape) as float32, in the source sharding;
3. ours = jit(lambda a: reshard(wsc(a, src), mesh)); XLA's = jit(lambda a: wsc(wsc(a, src), dst));
4. the result must equal x exactly, device by device, in the target sharding;
5. bytes received per device (tests/jax/hlo_bytes.py) of both compiled programs;
   ours must not exceed XLA's.

Uneven layouts. JAX 0.10.2 refuses a sharding that does not divide the array
at device_put and at jit boundaries (and replicates an uneven jit output, with
an all-gather). So an uneven side is carried across the boundary padded to its
ceil-padded shape, which costs no collective: the input is the padded array in
the source sharding, sliced back inside jit (then wsc(source)); the output is
padded inside jit (then wsc(target)) and sliced outside. Both programs, ours
and XLA's, get exactly the same treatment, so the byte counts compare.
For an even target the output sharding of our program is checked directly (it
is compiled without out_shardings); for an uneven target a wrong sharding can
only show up as extra bytes (the final wsc would have to move data).
"""
from __future__ import annotations

import math
import os
import re

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

import corpus
import hlo_bytes

wsc = jax.lax.with_sharding_constraint

# name -> summary dict; written to $RESHARD_JAX_SUMMARY by conftest.py
SUMMARY: dict[str, dict] = {}


class HarnessFailure(AssertionError):
    pass


def make_mesh(case: corpus.Case) -> Mesh:
    axes = case.mesh_axes
    if not axes:
        raise HarnessFailure("%s: no named mesh (jax=1 needs one)" % case.name)
    n = math.prod(s for _, s in axes)
    ids = case.device_ids or list(range(n))
    by_id = {d.id: d for d in jax.devices()}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise HarnessFailure("%s: needs devices %s but JAX has %d (set XLA_FLAGS="
                             "--xla_force_host_platform_device_count=N)" % (case.name, missing, len(by_id)))
    devs = np.array([by_id[i] for i in ids], dtype=object).reshape([s for _, s in axes])
    return Mesh(devs, tuple(a for a, _ in axes), axis_types=(AxisType.Auto,) * len(axes))


_SPEC_NS = {"P": PartitionSpec, "PartitionSpec": PartitionSpec, "None": None,
            "jax": type("jaxns", (), {"sharding": type("shns", (), {"P": PartitionSpec,
                                                                    "PartitionSpec": PartitionSpec})})}


def parse_spec(text: str) -> PartitionSpec:
    spec = eval(text, {"__builtins__": {}}, dict(_SPEC_NS))  # noqa: S307 (corpus text, no builtins)
    if not isinstance(spec, PartitionSpec):
        raise HarnessFailure("not a PartitionSpec: %r" % text)
    return spec


def spec_of(case: corpus.Case, text: str) -> PartitionSpec:
    """The layout text as a PartitionSpec: read directly, or via `reshard convert --to jax`."""
    if re.match(r"\s*(P\s*\(|PartitionSpec|jax\.)", text):
        return parse_spec(text)
    args = ["convert"] + case.common_args() + ["--sharding", text, "--to", "jax"]
    r = corpus.run_cli(args)
    if r.returncode != 0:
        raise HarnessFailure("%s: cannot state %r as a PartitionSpec:\n$ %s\n%s" %
                             (case.name, text, corpus.shell_line(args), r.stderr))
    return parse_spec(r.stdout.strip())


def shard_counts(mesh: Mesh, spec: PartitionSpec, ndim: int) -> list[int]:
    out = []
    for d in range(ndim):
        e = spec[d] if d < len(spec) else None
        if e is None:
            out.append(1)
        elif isinstance(e, (tuple, list)):
            out.append(math.prod(mesh.shape[a] for a in e))
        else:
            out.append(mesh.shape[e])
    return out


def load_module(source: str, filename: str = "<emitted>"):
    """exec the module text into a fresh namespace; return its reshard function."""
    ns: dict = {"__name__": "reshard_emitted", "__file__": filename}
    exec(compile(source, filename, "exec"), ns)  # noqa: S102 (our own emitter's output)
    fn = ns.get("reshard")
    if not callable(fn):
        raise HarnessFailure("%s defines no reshard(x, mesh)" % filename)
    return fn


def emitted_source(case: corpus.Case) -> tuple[str, str]:
    """(module text, filename): $RESHARD_JAX_MODULE, else `reshard plan ... --emit jax`."""
    path = os.environ.get("RESHARD_JAX_MODULE")
    if path:
        with open(path) as f:
            return f.read(), path
    # Bytes are what this test compares with XLA, so plan by bytes alone.
    args = ["plan"] + case.pair_args() + ["--for", "jax-cpu"] + os.environ.get("RESHARD_PLAN_FLAGS", "--bandwidth-only").split() + ["--emit", "jax"]
    r = corpus.run_cli(args)
    if r.returncode != 0:
        raise HarnessFailure("%s: the CLI failed (exit %d):\n$ %s\n%s%s" %
                             (case.name, r.returncode, corpus.shell_line(args), r.stdout[-2000:], r.stderr[-2000:]))
    return r.stdout, "<reshard plan --emit jax: %s>" % case.name


def plan_lower_bound(case: corpus.Case):
    """The plan's lower bound on bytes into one device (`reshard plan --json`), or None."""
    import json
    r = corpus.run_cli(["plan", "--json"] + case.pair_args())
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)["lower_bound"]["max_recv_bytes"]
    except (ValueError, KeyError, TypeError):
        return None


def _compile(fn, arg, out_shardings=None):
    jitted = jax.jit(fn) if out_shardings is None else jax.jit(fn, out_shardings=out_shardings)
    compiled = jitted.lower(arg).compile()
    return jitted, compiled


def run_case(case: corpus.Case, reshard_fn, record: bool = True) -> dict:
    """Runs one case; raises HarnessFailure on any mismatch; returns the summary."""
    shape = case.dims
    ndim = len(shape)
    mesh = make_mesh(case)
    src_spec = spec_of(case, case.src)
    dst_spec = spec_of(case, case.dst)
    src = NamedSharding(mesh, src_spec)
    dst = NamedSharding(mesh, dst_spec)

    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    if x.size >= 1 << 24:
        raise HarnessFailure("%s: too many elements for exact float32 tags" % case.name)

    src_k = shard_counts(mesh, src_spec, ndim)
    dst_k = shard_counts(mesh, dst_spec, ndim)
    src_pad = [(0, -(-n // k) * k - n) for n, k in zip(shape, src_k)]
    dst_pad = [(0, -(-n // k) * k - n) for n, k in zip(shape, dst_k)]
    src_even = not any(p for _, p in src_pad)
    dst_even = not any(p for _, p in dst_pad)
    crop = tuple(slice(0, n) for n in shape)

    if src_even:
        xin = jax.device_put(x, src)

        def pre(a):
            return wsc(a, src)
    else:
        xin = jax.device_put(np.pad(x, src_pad), src)

        def pre(a):
            return wsc(a[crop], src)

    if dst_even:
        def post(y):
            return y
    else:
        def post(y):
            return wsc(jnp.pad(y, dst_pad), dst)

    def ours_fn(a):
        return post(reshard_fn(pre(a), mesh))

    def xla_fn(a):
        return post(wsc(pre(a), dst))

    summary = {"name": case.name, "shape": case.shape, "mesh": case.mesh, "devices": case.devices,
               "from": case.src, "to": case.dst, "src_spec": str(src_spec), "dst_spec": str(dst_spec),
               "src_even": src_even, "dst_even": dst_even}
    if record:
        SUMMARY[case.name] = summary

    # XLA's own resharding, the baseline
    xla_jit, xla_compiled = _compile(xla_fn, xin, out_shardings=dst)
    xla_text = xla_compiled.as_text()
    summary["xla_collectives"] = hlo_bytes.collectives(xla_text)
    summary["xla_bytes"] = hlo_bytes.recv_bytes(xla_text)
    xla_out = xla_jit(xin)
    _check_result(case, "XLA", xla_out, x, dst, ndim, crop)  # the harness's own sanity check

    # ours
    try:
        ours_jit, ours_compiled = _compile(ours_fn, xin, out_shardings=None if dst_even else dst)
    except Exception as e:  # noqa: BLE001 (report any tracing/compile error as a failure)
        summary["error"] = "compile: %s: %s" % (type(e).__name__, e)
        raise HarnessFailure("%s: the emitted module does not compile: %s: %s" %
                             (case.name, type(e).__name__, e)) from e
    ours_text = ours_compiled.as_text()
    summary["ours_collectives"] = hlo_bytes.collectives(ours_text)
    summary["ours_bytes"] = hlo_bytes.recv_bytes(ours_text)
    ours_out = ours_jit(xin)
    try:
        _check_result(case, "ours", ours_out, x, dst, ndim, crop)
    except HarnessFailure as e:
        summary["error"] = str(e)
        raise
    if summary["ours_bytes"] > summary["xla_bytes"]:
        summary["error"] = "ours %s B > XLA %s B" % (summary["ours_bytes"], summary["xla_bytes"])
        raise HarnessFailure("%s: our program receives %s bytes per device, XLA's %s:\nours %s\nxla  %s" %
                             (case.name, summary["ours_bytes"], summary["xla_bytes"],
                              summary["ours_collectives"], summary["xla_collectives"]))
    summary["ok"] = True
    return summary


def _check_result(case, who, out, x, dst, ndim, crop):
    shape = x.shape
    if len(out.shape) != ndim:
        raise HarnessFailure("%s: %s returned rank %d, expected %d" % (case.name, who, len(out.shape), ndim))
    padded_shape = tuple(out.shape)
    if padded_shape == shape:
        if not out.sharding.is_equivalent_to(dst, ndim):
            raise HarnessFailure("%s: %s returned sharding %s, expected %s" %
                                 (case.name, who, out.sharding, dst))
    elif any(p < n for p, n in zip(padded_shape, shape)):
        raise HarnessFailure("%s: %s returned shape %s, expected %s" % (case.name, who, padded_shape, shape))
    got = np.asarray(out)[crop]
    if not np.array_equal(got, x):
        bad = np.argwhere(got != x)
        raise HarnessFailure("%s: %s returned wrong data at %d elements (first at %s: got %s, want %s)" %
                             (case.name, who, len(bad), tuple(bad[0]), got[tuple(bad[0])], x[tuple(bad[0])]))
    # every device's buffer: the box the target sharding gives it, with the right data
    want_index = dst.devices_indices_map(padded_shape)
    xp = np.zeros(padded_shape, np.float32)
    xp[crop] = x
    for shard in out.addressable_shards:
        idx = want_index[shard.device]
        if not np.array_equal(np.asarray(shard.data), xp[idx]):
            raise HarnessFailure("%s: %s: device %d holds the wrong block (want %s)" %
                                 (case.name, who, shard.device.id, idx))
