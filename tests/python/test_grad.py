"""jax.grad through a function that reshards in the middle equals the same function with
with_sharding_constraint: the canonical case, and 20 random pairs (half even, half uneven) that
rearrange every axis of a 2- or 3-axis mesh, so that most use reshard's plan."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import cases
import reshard.jax as rj
from test_canonical import _canonical

wsc = jax.lax.with_sharding_constraint
PAIRS = cases.rich_pairs(20, seed=cases.SEED + 7)


def _weights(shape):
    return jnp.asarray(np.random.RandomState(0).uniform(-1, 1, shape).astype(np.float32))


def test_canonical_grad():
    mesh, src, dst, x = _canonical()
    c = _weights(x.shape)

    def ours(a):
        return jnp.sum(jnp.sin(rj.reshard(a * 2.0, dst)) * c)

    def xla(a):
        return jnp.sum(jnp.sin(wsc(a * 2.0, dst)) * c)

    g_xla = jax.jit(jax.grad(xla))(x)
    g_ours = jax.jit(jax.grad(ours))(x)
    np.testing.assert_array_equal(np.asarray(g_ours), np.asarray(g_xla))
    np.testing.assert_array_equal(np.asarray(jax.grad(ours)(x)), np.asarray(g_xla))  # eager grad too
    assert rj.explain(x, dst).choice == "reshard"


@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_random_grad(pair):
    assert len(PAIRS) == 20
    x, xin, pre, post, crop = cases.boundaries(pair)
    c = _weights(pair.shape)

    def ours(a):
        return jnp.sum(jnp.sin(rj.reshard(pre(a) * 2.0, pair.dst)) * c)

    def xla(a):
        return jnp.sum(jnp.sin(wsc(pre(a) * 2.0, pair.dst)) * c)

    g_ours = jax.jit(jax.grad(ours))(xin)
    g_xla = jax.jit(jax.grad(xla))(xin)
    # the cotangent goes where with_sharding_constraint's goes: never more bytes
    _, ours_bytes = cases.compiled_bytes(jax.jit(jax.grad(ours)), xin)
    _, xla_bytes = cases.compiled_bytes(jax.jit(jax.grad(xla)), xin)
    assert ours_bytes <= xla_bytes, pair.describe()
    np.testing.assert_array_equal(np.asarray(g_ours), np.asarray(g_xla), err_msg=pair.describe())
    want = np.zeros(xin.shape, np.float32)
    want[crop] = 2.0 * np.cos(2.0 * x) * np.asarray(c)
    np.testing.assert_allclose(np.asarray(g_ours), want, rtol=1e-5, atol=1e-5, err_msg=pair.describe())


def test_random_grads_use_reshards_plan():
    """The random pairs are not all with_sharding_constraint in disguise."""
    choices = [rj.explain(jax.ShapeDtypeStruct(p.shape, np.float32), p.dst, source=p.src).choice for p in PAIRS]
    assert choices.count("reshard") >= 5, choices
