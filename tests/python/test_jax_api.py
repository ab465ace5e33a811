"""reshard.jax's entry points beyond the canonical case: sources, fallbacks, caching, errors."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax._src.sharding_impls import GSPMDSharding
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

import cases
import reshard.jax as rj

wsc = jax.lax.with_sharding_constraint


def _mesh(ids=range(8), shape=(4, 2), names=("x", "y")):
    return cases.make_mesh([jax.devices()[i] for i in ids], shape, names)


def _x(shape, sharding):
    return jax.device_put(np.arange(np.prod(shape), dtype=np.float32).reshape(shape), sharding)


def test_traced_value_needs_no_source():
    mesh = _mesh()
    x = _x((8, 8), NamedSharding(mesh, P("x")))
    y = jax.jit(lambda a: rj.reshard(a, NamedSharding(mesh, P(None, "x"))))(x)
    assert np.array_equal(np.asarray(y), np.asarray(x)) and y.sharding.spec == P(None, "x")


def test_a_wrong_source_is_an_error():
    mesh = _mesh()
    x = _x((8, 8), NamedSharding(mesh, P("x")))
    wrong = NamedSharding(mesh, P("y"))
    with pytest.raises(Exception, match="source= says"):  # inside jit: raised while XLA compiles
        jax.jit(lambda a: rj.reshard(a, NamedSharding(mesh, P(None, "x")), source=wrong))(x)
    with pytest.raises(ValueError, match="source= says"):
        rj.reshard(x, NamedSharding(mesh, P(None, "x")), source=wrong)
    right = jax.jit(lambda a: rj.reshard(a, NamedSharding(mesh, P(None, "x")), source=x.sharding))(x)
    assert np.array_equal(np.asarray(right), np.asarray(x))


def test_a_python_list_is_named():
    mesh = _mesh()
    with pytest.raises(TypeError, match="Python list"):
        rj.reshard([1.0, 2.0], NamedSharding(mesh, P()))
    with pytest.raises(TypeError, match="Python list"):
        rj.explain([1.0, 2.0], NamedSharding(mesh, P()))


def test_the_cache_is_bounded_least_recently_used_out():
    rj.clear_cache()
    mesh = _mesh()
    try:
        rj.set_cache_size(2)
        xs = [_x((8, n), NamedSharding(mesh, P("x"))) for n in (2, 4, 6)]
        dst = NamedSharding(mesh, P(None, "y"))
        for x in xs:
            rj.explain(x, dst)
        info = rj.cache_info()
        assert info["size"] == 2 and info["maxsize"] == 2 and info["misses"] == 3
        rj.explain(xs[2], dst)  # still there
        assert rj.cache_info()["hits"] == 1
        rj.explain(xs[0], dst)  # dropped first
        assert rj.cache_info()["misses"] == 4
        with pytest.raises(ValueError):
            rj.set_cache_size(0)
        with pytest.raises(TypeError):
            rj.set_cache_size(True)
        with pytest.raises(TypeError):
            rj.set_cache_size(2.0)
    finally:
        rj.set_cache_size(512)


def test_a_sharding_of_higher_rank_than_the_array_is_a_value_error():
    """As with_sharding_constraint's: a ValueError, eager, inside jax.jit and in explain, for the
    target and for source=."""
    mesh = _mesh()
    x = _x((16, 16), NamedSharding(mesh, P("x")))
    bad = NamedSharding(mesh, P("x", None, "y"))
    with pytest.raises(ValueError, match="rank"):
        rj.reshard(x, bad)
    with pytest.raises(ValueError, match="rank"):
        jax.jit(lambda a: rj.reshard(a, bad))(x)
    with pytest.raises(ValueError, match="rank"):
        jax.jit(lambda a: rj.with_sharding_constraint(a, bad))(x)
    with pytest.raises(ValueError, match="rank"):
        rj.explain(x, bad)
    with pytest.raises(ValueError, match="rank"):
        rj.reshard(x, NamedSharding(mesh, P(None, "x")), source=bad)


def test_partition_spec_needs_a_mesh():
    x = _x((8, 8), NamedSharding(_mesh(), P("x")))
    with pytest.raises(ValueError, match="needs a mesh"):
        rj.reshard(x, P(None, "x"))
    with pytest.raises(TypeError):
        rj.reshard(x, "P(None, 'x')")


def test_an_empty_array_is_placed():
    """No element moves: the array is device_put (through jax.jit with out_shardings, JAX 0.10.2
    gives it shards of the wrong shape, and reading it raised a numpy broadcasting error)."""
    mesh = _mesh()
    z = jax.device_put(np.zeros((0, 8), np.float32), NamedSharding(mesh, P(None, "x")))
    tgt = NamedSharding(mesh, P(None, ("x", "y")))
    out = rj.reshard(z, tgt)
    assert out.sharding == tgt and np.asarray(out).shape == (0, 8)


def test_jit_of_a_non_function_is_a_type_error_when_wrapping():
    """As jax.jit(3) does: at the call that wraps it, not at the first call of the result."""
    with pytest.raises(TypeError, match="expected a function, got int"):
        rj.jit(3)
    with pytest.raises(TypeError):
        rj.jit(donate_argnums=0)("not a function")


def test_cache_and_a_plan_at_the_bound():
    """P('x', None) -> P(None, None): one all-gather either way. The plan meets the lower bound, so the op
    uses it without compiling XLA's; explain() still compiles and reports both sides."""
    rj.clear_cache()
    mesh = _mesh()
    src, dst = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P(None, None))
    x = _x((8, 4), src)
    f = jax.jit(lambda a: rj.reshard(a, dst))
    y = f(x)
    assert np.array_equal(np.asarray(y), np.asarray(x))
    e = rj.explain(x, dst)
    assert e.choice == "reshard" and e.proved and "lower bound" in e.reason
    assert e.xla_bytes == e.reshard_bytes == 96 and e.xla_collectives and e.reshard_collectives
    info = rj.cache_info()
    assert info["size"] == 1 and info["misses"] == 1 and info["hits"] >= 1


def test_nothing_better_than_xla_hands_the_move_back():
    """An uneven pair where the plan misses the bound: the comparison decides, and where XLA's lowering
    receives no more bytes the op hands the move back to it."""
    mesh = _mesh(range(4), (4,), ("x",))
    src, dst = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P(None, None))
    u = jax.ShapeDtypeStruct((6, 3), np.float32, sharding=src)
    e = rj.explain(u, dst)
    assert not e.proved and e.choice == "xla" and "nothing better" in e.reason, str(e)
    assert e.reshard_bytes >= e.xla_bytes and "choice: XLA's own lowering" in str(e)
    x = jax.device_put(np.arange(18, dtype=np.float32).reshape(6, 3), NamedSharding(mesh, P()))
    f = jax.jit(lambda a: rj.reshard(wsc(a, src), dst))
    ops, recv = cases.compiled_bytes(f, x)
    assert recv == e.xla_bytes
    assert np.array_equal(np.asarray(f(x)), np.asarray(x))


def test_equal_layouts_move_nothing():
    mesh = _mesh()
    s = NamedSharding(mesh, P("x", "y"))
    x = _x((8, 4), s)
    # the same layout stated another way: a size-1 axis changes nothing
    other = NamedSharding(_mesh(shape=(4, 2, 1), names=("x", "y", "z")), P("x", ("y", "z")))
    assert rj.explain(x, other).choice == "none"
    assert rj.reshard(x, other) is x
    assert np.array_equal(np.asarray(jax.jit(lambda a: rj.reshard(a, other, source=s))(x)), np.asarray(x))


def test_other_devices_use_device_put():
    """Source on devices 0-3, target on 4-7: no jitted program spans both; jax.device_put moves it."""
    src = NamedSharding(_mesh(range(4), (4,), ("x",)), P("x"))
    dst = NamedSharding(_mesh(range(4, 8), (2, 2), ("a", "b")), P(("b", "a")))
    x = _x((8,), src)
    e = rj.explain(x, dst)
    assert e.choice == "device_put", str(e)
    y = rj.reshard(x, dst)
    assert np.array_equal(np.asarray(y), np.asarray(x)) and y.sharding.is_equivalent_to(dst, 1)
    # The drop-in is with_sharding_constraint's: it does not move an array to other devices (it
    # copied it, where JAX raises).
    with pytest.raises(ValueError, match="incompatible devices"):
        jax.lax.with_sharding_constraint(x, dst)
    with pytest.raises(ValueError, match="incompatible devices"):
        rj.with_sharding_constraint(x, dst)


def test_other_device_order_uses_device_put():
    """The same devices in another order: JAX runs no jitted program over both."""
    src = NamedSharding(_mesh(range(8), (8,), ("x",)), P("x"))
    dst = NamedSharding(_mesh((3, 1, 7, 4, 2, 0, 5, 6), (8,), ("x",)), P("x"))
    x = _x((16,), src)
    assert rj.explain(x, dst).choice == "device_put"
    y = rj.reshard(x, dst)
    assert np.array_equal(np.asarray(y), np.asarray(x)) and y.sharding.is_equivalent_to(dst, 1)


def test_other_mesh_same_devices_inside_jit():
    """Another mesh over the same device list (8 devices as x=8 and as a=2,b=4) plans over one mesh."""
    src = NamedSharding(_mesh(range(8), (8,), ("x",)), P(None, "x"))
    dst = NamedSharding(_mesh(range(8), (2, 4), ("a", "b")), P(("b", "a"), None))
    x = _x((16, 16), src)
    e = rj.explain(x, dst)
    assert e.choice == "reshard" and e.reshard_bytes < e.xla_bytes, str(e)
    y = jax.jit(lambda a: rj.reshard(a, dst))(x)
    assert np.array_equal(np.asarray(y), np.asarray(x)) and y.sharding.is_equivalent_to(dst, 2)


def test_other_sharding_types():
    mesh = _mesh()
    src = NamedSharding(mesh, P("y", None, "x"))
    dst = NamedSharding(mesh, P(None, ("x", "y"), None))
    g = GSPMDSharding(dst._device_assignment, dst._to_xla_hlo_sharding(3))
    x = _x((16, 16, 16), src)
    e = rj.explain(x, g)
    assert e.choice == "reshard" and e.reshard_bytes == 1792, str(e)
    y = jax.jit(lambda a: rj.reshard(a, g))(x)
    assert np.array_equal(np.asarray(y), np.asarray(x)) and y.sharding.is_equivalent_to(dst, 3)


def test_uneven_inside_jit_and_refused_outside():
    mesh = _mesh(range(4), (4,), ("x",))
    src, dst = NamedSharding(mesh, P(None, "x")), NamedSharding(mesh, P("x", None))
    x6 = _x((6, 8), src)  # 8 columns split 4 ways: even; 6 rows split 4 ways: not
    with pytest.raises(ValueError, match="evenly"):
        rj.reshard(x6, dst)
    y = jax.jit(lambda a: wsc(jnp.pad(rj.reshard(a, dst), [(0, 2), (0, 0)]), dst),
                out_shardings=dst)(x6)
    assert np.array_equal(np.asarray(y)[:6], np.asarray(x6))


def test_explicit_axes_move_by_reshards_plan():
    """Explicit axes: the canonical case is one all-to-all (jax.sharding.reshard gathers 14336 B)."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    src, dst = NamedSharding(mesh, P("y", None, "x")), NamedSharding(mesh, P(None, ("x", "y"), None))
    x = _x((16, 16, 16), src)
    f = jax.jit(lambda a: rj.reshard(a, dst))  # the type carries the source
    ops, recv = cases.compiled_bytes(f, x)
    assert [c["op"] for c in ops] == ["all-to-all"] and recv == 1792
    y = f(x)
    assert np.array_equal(np.asarray(y), np.asarray(x)) and y.sharding.is_equivalent_to(dst, 3)
    assert jax.typeof(y).sharding.spec == dst.spec
    assert rj.explain(x, dst).choice == "reshard"
    y2 = rj.reshard(x, dst)
    assert np.array_equal(np.asarray(y2), np.asarray(x)) and y2.sharding.is_equivalent_to(dst, 3)
    _, jax_recv = cases.compiled_bytes(jax.jit(lambda a: jax.sharding.reshard(a, dst)), x)
    assert jax_recv == 14336


def test_explicit_source_auto_target():
    emesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    amesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    x = _x((16, 16, 16), NamedSharding(emesh, P("y", None, "x")))
    dst = NamedSharding(amesh, P(None, ("x", "y"), None))
    f = jax.jit(lambda a: rj.reshard(a, dst))
    ops, recv = cases.compiled_bytes(f, x)
    assert [c["op"] for c in ops] == ["all-to-all"] and recv == 1792
    y = f(x)
    assert np.array_equal(np.asarray(y), np.asarray(x)) and y.sharding.is_equivalent_to(dst, 3)


def test_host_data_is_placed():
    dst = NamedSharding(_mesh(), P("x"))
    y = rj.reshard(np.ones((8, 2), np.float32), dst)
    assert y.sharding.is_equivalent_to(dst, 2) and float(y.sum()) == 16.0


def test_context_mesh_with_other_axis_names():
    """The plan's shard_map runs over its own mesh even under jax.set_mesh of another mesh."""
    mesh = _mesh()
    src, dst = NamedSharding(mesh, P("y", None, "x")), NamedSharding(mesh, P(None, ("x", "y"), None))
    x = _x((16, 16, 16), src)
    with jax.set_mesh(_mesh(names=("a", "b"))):
        y = jax.jit(lambda a: rj.reshard(a, dst, source=src))(x)
    assert np.array_equal(np.asarray(y), np.asarray(x))
