"""reshard.jax.layout_of against JAX itself, on random NamedShardings: meshes of 1 to 8 devices
over 1 to 3 axes in permuted device orders, ranks 1 to 4, even and uneven shapes.

For each: reshard's device -> box map equals sharding.devices_indices_map(shape) (for an uneven
shape, JAX's map on the ceil-padded shape cropped to the array: JAX 0.10.2 refuses uneven shapes
there), and reshard's HLO text equals str(sharding._to_xla_hlo_sharding(ndim)). Every third case
also goes through a GSPMDSharding (the path for any other jax.sharding.Sharding)."""
import random

import numpy as np
import pytest

import jax
from jax._src.sharding_impls import GSPMDSharding
from jax.sharding import NamedSharding, PartitionSpec as P

import cases
import reshard.jax as rj

N = 300


def _random_sharding(i):
    rng = random.Random(cases.SEED * 1000 + i)
    ndim = rng.randint(1, 4)
    mesh = cases.random_mesh(rng)
    return NamedSharding(mesh, cases.random_spec(rng, mesh, ndim)), cases.random_shape(rng, ndim)


def _jax_map(sharding, shape):
    """device id -> ((lo, hi), ...) per JAX, cropped to `shape`; None for a device holding nothing."""
    counts = [1] * len(shape)
    if isinstance(sharding, NamedSharding):
        counts = cases.shard_counts(sharding.mesh, sharding.spec, len(shape))
    padded = tuple(-(-n // k) * k for n, k in zip(shape, counts))
    out = {}
    for dev, idx in sharding.devices_indices_map(padded).items():
        box = []
        for s, n, p in zip(idx, shape, padded):
            lo, hi, _ = s.indices(p)
            box.append((min(lo, n), min(hi, n)))
        out[dev.id] = tuple(box) if all(hi > lo for lo, hi in box) or not box else None
    return out


def _reshard_map(layout):
    out = {}
    for dev, boxes in layout.boxes().items():
        assert len(boxes) <= 1, "a named sharding gives each device one box"
        out[dev] = boxes[0] if boxes else (None if layout.rank else ())
    return out


@pytest.mark.parametrize("i", range(N))
def test_named_sharding(i):
    sharding, shape = _random_sharding(i)
    ndim = len(shape)
    layout = rj.layout_of(sharding, shape, np.float32)
    assert layout.shape == list(shape)
    assert _reshard_map(layout) == _jax_map(sharding, shape), (sharding, shape)
    assert rj.hlo_sharding_text(sharding, ndim) == str(sharding._to_xla_hlo_sharding(ndim)), (sharding, shape)
    assert sorted(layout.devices) == sorted(d.id for d in sharding.device_set)
    if i % 3 == 0:
        g = GSPMDSharding(sharding._device_assignment, sharding._to_xla_hlo_sharding(ndim))
        assert rj.layout_of(g, shape, np.float32) == layout, (sharding, shape)
        assert rj.hlo_sharding_text(g, ndim) == rj.hlo_sharding_text(sharding, ndim)


def test_counts_cover_the_space():
    """The random cases include every mesh size, 1 to 3 axes, ranks 1 to 4, uneven shapes and
    permuted device orders."""
    sizes, axes, ranks, uneven, permuted = set(), set(), set(), 0, 0
    for i in range(N):
        s, shape = _random_sharding(i)
        sizes.add(s.mesh.size)
        axes.add(len(s.mesh.axis_names))
        ranks.add(len(shape))
        counts = cases.shard_counts(s.mesh, s.spec, len(shape))
        uneven += any(n % k for n, k in zip(shape, counts))
        ids = [d.id for d in s.mesh.devices.flat]
        permuted += ids != sorted(ids)
    assert sizes == set(range(1, 9)) and axes == {1, 2, 3} and ranks == {1, 2, 3, 4}
    assert uneven >= 30 and permuted >= 100, (uneven, permuted)


def test_single_device_and_odd_axis_names():
    d = jax.devices()[5]
    layout = rj.layout_of(jax.sharding.SingleDeviceSharding(d), (4, 6))
    assert layout.boxes() == {5: [((0, 4), (0, 6))]}
    # names reshard cannot hold (spaces, non-strings) are renamed for planning; the layout is the same
    mesh = cases.make_mesh(jax.devices()[:4], (2, 2), ("my axis", 7))
    s = NamedSharding(mesh, P(7, "my axis"))
    assert rj.mesh_of(mesh).axis_names == ["axis0", "axis1"]
    assert rj.layout_of(s, (4, 4)).boxes() == {
        d.id: [tuple((sl.start, sl.stop) for sl in idx)] for d, idx in s.devices_indices_map((4, 4)).items()}
    assert rj.hlo_sharding_text(s, 2) == str(s._to_xla_hlo_sharding(2))


def test_mesh_and_named_sharding_conversions():
    devs = [jax.devices()[i] for i in (3, 1, 7, 4, 2, 0, 5, 6)]
    mesh = cases.make_mesh(devs, (4, 2), ("x", "y"))
    m = rj.mesh_of(mesh)
    assert m.axes == [("x", 4), ("y", 2)] and m.device_ids == [3, 1, 7, 4, 2, 0, 5, 6]
    assert rj.mesh_of(mesh, logical=True).is_iota
    ns = rj.named_sharding_of(NamedSharding(mesh, P("y", None, "x")), 3)
    assert ns.dims == [["y"], [], ["x"]]
    assert ns.to_text("jax") == "P('y', None, 'x')"
    assert ns.to_hlo() == "{devices=[2,1,4]3,7,2,5,1,4,0,6}"


def test_unsupported_specs_raise_not_implemented():
    mesh = cases.make_mesh(jax.devices()[:4], (2, 2), ("x", "y"))
    with pytest.raises(NotImplementedError, match="UNCONSTRAINED"):
        rj.layout_of(NamedSharding(mesh, P("x", P.UNCONSTRAINED)), (4, 4))
    with pytest.raises(ValueError, match="rank 1"):
        rj.layout_of(NamedSharding(mesh, P("x", "y")), (4,))
