"""reshard.jax.reshard on unreduced arrays (partial sums, issue 17), in real jax 0.10.2: the rows of
the issue, traced inside jax.jit and eager, with their gradients. Values equal
jax.sharding.reshard's, the compiled program receives the lower bound into each device, and
gradients equal those through jax.sharding.reshard (the transpose of a reduction from unreduced
axes, as JAX defines it). Where reshard has no plan (another mesh), the move is JAX's own."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import reshard.jax as rj
from reshard import hlo_bytes

# (source spec, A and B operand specs, target spec, the bound in bytes)
ROWS = [
    (P(None, None, unreduced={"x"}), P(None, "x"), P("x", None), P("x", None), 512),
    (P(None, None, unreduced={"x"}), P(None, "x"), P("x", None), P(("x", "y"), None), 384),
    (P("y", None, unreduced={"x"}), P("y", "x"), P("x", None), P(None, ("x", "y")), 448),
    (P(None, None, unreduced={"x"}), P(None, "x"), P("x", None), P(), 1280),
]


def _ring_bytes(hlo_text):
    """Bytes into a device, an all-reduce counted as a ring moves it (2(k-1)/k of its input), as
    issue 17 and reshard's cost model price it."""
    return hlo_bytes.recv_bytes(hlo_text, all_reduce="ring")


def _operands():
    """A and B of the matmul whose sum over the sharded contracting dim is the partial sums, and
    the weights of the loss whose gradient is checked."""
    a = (np.arange(16 * 32, dtype=np.float32).reshape(16, 32) % 7) / 4
    b = (np.arange(32 * 16, dtype=np.float32).reshape(32, 16) % 5) / 2
    w = np.arange(256, dtype=np.float32).reshape(16, 16) % 3
    return a, b, w


def _placed(mesh, row, a, b):
    """The row's operands placed on `mesh`, its target sharding, and the matmul that makes the
    partial sums (call under jax.set_mesh(mesh))."""
    src, a_spec, b_spec, dst, _ = row

    def partial(A, B):
        return jnp.dot(A, B, out_sharding=src)

    return (jax.device_put(a, NamedSharding(mesh, a_spec)), jax.device_put(b, NamedSharding(mesh, b_spec)),
            NamedSharding(mesh, dst), partial)


def _mesh():
    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Explicit))


@pytest.mark.parametrize("row", ROWS, ids=[str(r[3]) for r in ROWS])
def test_rows_at_the_bound_with_jax_values_and_gradients(row):
    src, a_spec, b_spec, dst, bound = row
    mesh = _mesh()
    a, b, w = _operands()
    with jax.set_mesh(mesh):
        A, B, tgt, partial = _placed(mesh, row, a, b)

        ours = jax.jit(lambda A, B: rj.reshard(partial(A, B), tgt))
        got = ours(A, B)
        np.testing.assert_allclose(np.asarray(got), a @ b, rtol=1e-6)
        assert got.sharding.is_equivalent_to(tgt, 2), got.sharding
        assert _ring_bytes(ours.lower(A, B).compile().as_text()) == bound
        eager = rj.reshard(jax.jit(partial)(A, B), tgt)
        np.testing.assert_allclose(np.asarray(eager), a @ b, rtol=1e-6)

        def loss(move):
            return jax.jit(jax.grad(lambda A, B: (move(partial(A, B)) * w).sum(), argnums=(0, 1)))

        dA, dB = loss(lambda y: rj.reshard(y, tgt))(A, B)
        wA, wB = loss(lambda y: jax.sharding.reshard(y, tgt))(A, B)
        np.testing.assert_allclose(np.asarray(dA), np.asarray(wA), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(dB), np.asarray(wB), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(dA), w @ b.T, rtol=1e-6)


def test_another_mesh_is_jaxs_own_move():
    """A target over the same devices in another order: no reshard plan, jax.sharding.reshard's
    result."""
    mesh = _mesh()
    devices = np.asarray(mesh.devices).reshape(-1)[::-1].reshape(4, 2)
    other = jax.sharding.Mesh(devices, ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    a = np.arange(16 * 32, dtype=np.float32).reshape(16, 32) % 7
    b = np.arange(32 * 16, dtype=np.float32).reshape(32, 16) % 5
    with jax.set_mesh(mesh):
        A = jax.device_put(a, NamedSharding(mesh, P(None, "x")))
        B = jax.device_put(b, NamedSharding(mesh, P("x", None)))
        tgt = NamedSharding(other, P("x", None))
        f = jax.jit(lambda A, B: rj.reshard(jnp.dot(A, B, out_sharding=P(None, None, unreduced={"x"})), tgt))
        try:
            want = np.asarray(jax.jit(lambda A, B: jax.sharding.reshard(
                jnp.dot(A, B, out_sharding=P(None, None, unreduced={"x"})), tgt))(A, B))
        except Exception as e:  # noqa: BLE001 (JAX's own refusal is the behaviour to match)
            with pytest.raises(type(e)):
                f(A, B)
            return
        np.testing.assert_array_equal(np.asarray(f(A, B)), want)


@pytest.mark.parametrize("row", ROWS, ids=[str(r[3]) for r in ROWS])
def test_jit_constraint_and_explain_take_partial_sums(row):
    """The other entry points: reshard.jax.jit makes a jax.sharding.reshard of partial sums in the
    traced program reshard's reduction, reshard.jax.with_sharding_constraint takes them as
    reshard() does, and explain() shows both programs' bytes (the bound against XLA's all-reduce
    and slice)."""
    src, a_spec, b_spec, dst, bound = row
    mesh = _mesh()
    a, b, w = _operands()
    with jax.set_mesh(mesh):
        A, B, tgt, partial = _placed(mesh, row, a, b)

        theirs = jax.jit(lambda A, B: jax.sharding.reshard(partial(A, B), tgt))
        ours = rj.jit(lambda A, B: jax.sharding.reshard(partial(A, B), tgt))
        constrained = jax.jit(lambda A, B: rj.with_sharding_constraint(partial(A, B), tgt))
        for f in (ours, constrained):
            got = f(A, B)
            np.testing.assert_allclose(np.asarray(got), a @ b, rtol=1e-6)
            assert got.sharding.is_equivalent_to(tgt, 2), got.sharding
            assert _ring_bytes(f.lower(A, B).compile().as_text()) == bound
        assert _ring_bytes(theirs.lower(A, B).compile().as_text()) > bound
        # A grad taken inside reshard.jax.jit: the same gradients as through jax.sharding.reshard.
        loss = lambda A, B: (jax.sharding.reshard(partial(A, B), tgt) * w).sum()  # noqa: E731
        dA, dB = rj.jit(jax.grad(loss, argnums=(0, 1)))(A, B)
        wA, wB = jax.jit(jax.grad(loss, argnums=(0, 1)))(A, B)
        np.testing.assert_allclose(np.asarray(dA), np.asarray(wA), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(dB), np.asarray(wB), rtol=1e-6)
        e = rj.explain(jax.jit(partial)(A, B), tgt)
        assert e.choice == "reshard" and e.reshard_bytes == bound and e.xla_bytes > bound, str(e)
        assert "XLA (jax.sharding.reshard), compiled" in str(e) and "unreduced={\"x\"}" in str(e), str(e)


@pytest.mark.parametrize("traced", [False, True])
def test_unreduced_into_other_unreduced_axes_is_refused_not_aborted(traced):
    """Unreduced over x into unreduced over y: jax 0.10.2's Shardy aborts the process on it (a
    failed CHECK), so reshard.jax raises NotImplementedError instead of handing it to jax."""
    mesh = _mesh()
    a, b, _ = _operands()
    row = (P(None, None, unreduced={"x"}), P(None, "x"), P("x", None), P(None, None, unreduced={"y"}), 0)
    with jax.set_mesh(mesh):
        A, B, dst, partial = _placed(mesh, row, a, b)
        with pytest.raises(NotImplementedError, match="aborts"):
            if traced:
                jax.jit(lambda A, B: rj.reshard(partial(A, B), dst)).lower(A, B)
            else:
                rj.reshard(partial(A, B), dst)
        # Unreduced axes kept (the target's a superset): jax's own move, no abort.
        keep = NamedSharding(mesh, P(None, None, unreduced={"x", "y"}))
        out = jax.jit(lambda A, B: rj.reshard(partial(A, B), keep))(A, B)
        assert set(out.sharding.spec.unreduced) == {"x", "y"}

