"""Partial sums in real jax 0.10.2 (issue 17): an unreduced array (a matmul whose
contracting dim is sharded, out_sharding=P(..., unreduced={'x'}) on Explicit axes)
moved by the module `reshard plan --emit jax` writes, against jax.sharding.reshard.

For each row of the issue: the values equal jax.sharding.reshard's (and numpy's), and
the compiled program's bytes into each device (python/reshard/hlo_bytes.py) equal the
plan's and the lower bound, below XLA's all-reduce + slice on every row.

Environment: RESHARD_CLI (default build/reshard).
"""
import importlib.util
import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import corpus
import hlo_bytes

MESH_TEXT = "x=4,y=2"
# (source spec text, its A and B operand specs, target spec text, bound by bytes)
ROWS = [
    ("P(None, None, unreduced={'x'})", P(None, "x"), P("x", None), "P('x', None)", 512),
    ("P(None, None, unreduced={'x'})", P(None, "x"), P("x", None), "P(('x', 'y'), None)", 384),
    ("P('y', None, unreduced={'x'})", P("y", "x"), P("x", None), "P(None, ('x', 'y'))", 448),
    ("P(None, None, unreduced={'x'})", P(None, "x"), P("x", None), "P()", 1280),
]


def _operands():
    """The mesh (Explicit axes) and the numpy operands of every row's matmul."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    a = np.arange(16 * 32, dtype=np.float32).reshape(16, 32) % 7
    b = np.arange(32 * 16, dtype=np.float32).reshape(32, 16) % 5
    return mesh, a, b


def _partial_product(mesh, a, b, a_spec, b_spec, source):
    """The operands placed, and the matmul whose output is unreduced as `source` says (inside jax.set_mesh)."""
    A = jax.device_put(a, NamedSharding(mesh, a_spec))
    B = jax.device_put(b, NamedSharding(mesh, b_spec))

    def partial(A, B):
        return jnp.dot(A, B, out_sharding=_spec(source))

    return A, B, partial


def _ring_bytes(hlo_text):
    """Bytes into a device, an all-reduce counted as a ring moves it (2(k-1)/k of its input), as
    issue 17 and reshard's cost model price it."""
    return hlo_bytes.recv_bytes(hlo_text, all_reduce="ring")


def _spec(text):
    return eval(text, {"P": P})  # noqa: S307 (our own literal texts)


def _module(source, target, tmp_path, model=("--bandwidth-only",)):
    args = ["plan", "--shape", "16,16", "--mesh", MESH_TEXT, "--from", source, "--to", target,
            "--emit", "jax", "--for", "jax-cpu", *model]
    r = corpus.run_cli(args)
    assert r.returncode == 0, r.stderr
    path = tmp_path / "plan.py"
    path.write_text(r.stdout)
    spec = importlib.util.spec_from_file_location("plan_" + re.sub(r"\W", "_", source + target), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _plan_json(source, target, model=("--bandwidth-only",)):
    r = corpus.run_cli(["plan", "--shape", "16,16", "--mesh", MESH_TEXT, "--from", source, "--to", target,
                        "--for", "jax-cpu", *model, "--json"])
    assert r.returncode == 0, r.stderr
    import json
    return json.loads(r.stdout)


def _bound(source, target):
    j = _plan_json(source, target)
    return j["stats"]["max_recv_bytes"], j["lower_bound"]["max_recv_bytes"]


@pytest.mark.parametrize("row", ROWS, ids=["%s->%s" % (r[0], r[3]) for r in ROWS])
def test_unreduced_rows_match_jax_at_the_bound(row, tmp_path):
    source, a_spec, b_spec, target, bound = row
    mesh, a, b = _operands()
    mod = _module(source, target, tmp_path)
    with jax.set_mesh(mesh):
        A, B, partial = _partial_product(mesh, a, b, a_spec, b_spec, source)

        ours = jax.jit(lambda A, B: mod.reshard(partial(A, B), mesh))
        theirs = jax.jit(lambda A, B: jax.sharding.reshard(partial(A, B), _spec(target)))
        got, want = ours(A, B), theirs(A, B)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        np.testing.assert_array_equal(np.asarray(got), a @ b)
        assert got.sharding.is_equivalent_to(NamedSharding(mesh, _spec(target)), 2), got.sharding
        ours_bytes = _ring_bytes(ours.lower(A, B).compile().as_text())
        xla_bytes = _ring_bytes(theirs.lower(A, B).compile().as_text())
    planned, lower = _bound(source, target)
    assert lower == bound
    assert ours_bytes == planned == bound, (ours_bytes, planned, bound)
    assert xla_bytes > ours_bytes, (xla_bytes, ours_bytes)
    print("%s -> %s: reshard %d B, XLA %d B, bound %d B" % (source, target, ours_bytes, xla_bytes, bound))


def test_reduction_kept_pending_between_steps_runs_in_jax(tmp_path):
    """DTensor's order taken as the plan (the default model prices it fastest here): y's shards
    gathered while the sum over x is still pending, then one reduce-scatter over x. The emitted
    module's values equal jax.sharding.reshard's, and it compiles to the plan's bytes."""
    source, target = "P('y', None, unreduced={'x'})", "P('x', None)"
    j = _plan_json(source, target, model=())
    assert [s["op"] for s in j["steps"]] == ["all-gather", "reduce-scatter"], j["steps"]
    mesh, a, b = _operands()
    mod = _module(source, target, tmp_path, model=())
    with jax.set_mesh(mesh):
        A, B, partial = _partial_product(mesh, a, b, P("y", "x"), P("x", None), source)

        ours = jax.jit(lambda A, B: mod.reshard(partial(A, B), mesh))
        theirs = jax.jit(lambda A, B: jax.sharding.reshard(partial(A, B), _spec(target)))
        got = ours(A, B)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(theirs(A, B)))
        np.testing.assert_array_equal(np.asarray(got), a @ b)
        ours_bytes = _ring_bytes(ours.lower(A, B).compile().as_text())
    assert ours_bytes == j["stats"]["max_recv_bytes"], (ours_bytes, j["stats"])


@pytest.mark.parametrize("op", ["", '"avg"', '"max"', '"min"'])
@pytest.mark.parametrize("target", ["[Shard(0), Shard(0)]", "[Replicate(), Replicate()]", "[Shard(1), Replicate()]"])
def test_emitted_reductions_parse(op, target):
    """`--emit hlo` of plans with every reduce op: XLA's parser accepts them, and the byte
    counter reads a reduce-scatter or all-reduce where the plan has one."""
    from jaxlib import xla_client
    source = "[Partial(%s), Shard(0)]" % op
    args = ["plan", "--shape", "16,16", "--mesh", MESH_TEXT, "--from", source, "--to", target, "--emit", "hlo",
            "--strategy", "collectives"]
    r = corpus.run_cli(args)
    assert r.returncode == 0, r.stderr
    xla_client.hlo.hlo_module_from_text(r.stdout)
    ops = [c["op"] for c in hlo_bytes.collectives(r.stdout)]
    assert any(o in ("reduce-scatter", "all-reduce") for o in ops), ops



def _unreduced_to_unreduced_runs(tmp_path, source, target, operand_specs, reduced, ops, bound):
    """Plans `source` to `target` (both unreduced) with no ragged exchange (--for jax-cpu),
    checks the plan's steps are `ops`, runs the emitted module on a matmul made unreduced as
    `source` says (operands placed by `operand_specs`), and checks: its result reduced onto
    `reduced` equals numpy's and jax.sharding.reshard's; it compiles to the plan's bytes, at the
    bound `bound`, and to no more than XLA's reshard between the two."""
    j = _plan_json(source, target, model=())
    assert [s["op"] for s in j["steps"]] == ops, j["steps"]
    mesh, a, b = _operands()
    mod = _module(source, target, tmp_path, model=())
    with jax.set_mesh(mesh):
        A, B, partial = _partial_product(mesh, a, b, *operand_specs, source)

        ours = jax.jit(lambda A, B: mod.reshard(partial(A, B), mesh))
        theirs = jax.jit(lambda A, B: jax.sharding.reshard(partial(A, B), _spec(target)))
        got = jax.jit(lambda A, B: jax.sharding.reshard(mod.reshard(partial(A, B), mesh), reduced))(A, B)
        want = jax.jit(lambda A, B: jax.sharding.reshard(theirs(A, B), reduced))(A, B)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        np.testing.assert_array_equal(np.asarray(got), a @ b)
        ours_bytes = _ring_bytes(ours.lower(A, B).compile().as_text())
        xla_bytes = _ring_bytes(theirs.lower(A, B).compile().as_text())
    assert ours_bytes == j["stats"]["max_recv_bytes"] == j["lower_bound"]["max_recv_bytes"] == bound, (ours_bytes, j["stats"])
    assert xla_bytes >= ours_bytes, (xla_bytes, ours_bytes)
    print("%s -> %s: reshard %d B, XLA %d B" % (source, target, ours_bytes, xla_bytes))


def test_parts_moved_alike_run_in_jax(tmp_path):
    """Unreduced into unreduced over the same axes, with no ragged exchange (--for jax-cpu): the
    parts moved alike, one all-to-all over y within each x part, at the bound (256 B), its values
    and bytes checked against jax's (_unreduced_to_unreduced_runs)."""
    _unreduced_to_unreduced_runs(tmp_path, "P('y', None, unreduced={'x'})", "P(None, 'y', unreduced={'x'})",
                                 (P("y", "x"), P("x", None)), P(None, "y"), ["all-to-all"], 256)


def test_fewer_unreduced_axes_run_in_jax(tmp_path):
    """Unreduced over x and y into unreduced over y alone, sharded over x, with no ragged
    exchange (--for jax-cpu): one reduce-scatter over x, y's sum still pending, at the bound
    (768 B), its values and bytes checked against jax's (_unreduced_to_unreduced_runs)."""
    _unreduced_to_unreduced_runs(tmp_path, "P(None, None, unreduced={'x', 'y'})", "P('x', None, unreduced={'y'})",
                                 (P(None, ("x", "y")), P(("x", "y"), None)), P("x", None), ["reduce-scatter"], 768)
