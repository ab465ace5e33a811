"""JAX shardings as reshard layouts: typed conversions, no text in between (re-exported by reshard.jax)."""
from __future__ import annotations

import re
from typing import Any, Optional

import numpy as np

import jax
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

import reshard as _reshard

_SAFE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")


def _axis_names(mesh) -> list[str]:
    """reshard's names for the mesh's axes: the JAX names when every one is a plain name, else
    axis0, axis1, ... (reshard's names may hold no quotes, spaces or sub-axis punctuation)."""
    names = list(mesh.axis_names)
    if all(isinstance(n, str) and _SAFE_NAME.match(n) for n in names) and len(set(names)) == len(names):
        return names
    return ["axis%d" % i for i in range(len(names))]


def _concrete_mesh(mesh, what: str):
    if isinstance(mesh, AbstractMesh) or not hasattr(mesh, "devices"):
        raise ValueError("%s: %r has no devices (an AbstractMesh); use a jax.sharding.Mesh" % (what, mesh))
    return mesh


def mesh_of(mesh, *, logical: bool = False) -> _reshard.Mesh:
    """A jax.sharding.Mesh as a reshard.Mesh: the same axes and sizes, and the devices' ids in
    row-major mesh order (logical=True: positions 0..n-1 instead, as JAX numbers devices in HLO
    shardings). Axis types do not change a layout and are ignored."""
    mesh = _concrete_mesh(mesh, "mesh")
    axes = list(zip(_axis_names(mesh), (int(s) for s in mesh.devices.shape)))
    ids = None if logical else [int(d.id) for d in np.asarray(mesh.devices).flat]
    return _reshard.Mesh(axes, ids)


def _unreduced_axes(sharding: NamedSharding) -> list[str]:
    """The spec's unreduced axes (partial sums), named as mesh_of names them; reduced axes are
    replicated and change no layout."""
    rename = dict(zip(sharding.mesh.axis_names, _axis_names(sharding.mesh)))
    return [rename.get(a, str(a)) for a in sorted(getattr(sharding.spec, "unreduced", None) or (), key=str)]


def _spec_dims(sharding: NamedSharding, ndim: Optional[int]) -> list[list[str]]:
    spec = sharding.spec
    rename = dict(zip(sharding.mesh.axis_names, _axis_names(sharding.mesh)))
    dims: list[list[str]] = []
    for entry in getattr(spec, "partitions", spec):  # its entries (iterating a spec with unreduced axes raises)
        if entry is None:
            dims.append([])
        elif entry is PartitionSpec.UNCONSTRAINED:
            raise NotImplementedError("%s: P.UNCONSTRAINED dims are not supported yet" % (spec,))
        elif isinstance(entry, (tuple, list)):
            dims.append([rename[a] if a in rename else str(a) for a in entry])
        else:
            dims.append([rename[entry] if entry in rename else str(entry)])
    if ndim is not None:
        if len(dims) > ndim:
            raise ValueError("%s has %d entries but the array has rank %d" % (spec, len(dims), ndim))
        dims += [[] for _ in range(ndim - len(dims))]
    return dims


def named_sharding_of(sharding: NamedSharding, ndim: Optional[int] = None, *,
                      logical: bool = False) -> _reshard.NamedSharding:
    """A jax.sharding.NamedSharding as a reshard.NamedSharding over mesh_of(sharding.mesh),
    its spec padded with None to `ndim` dims, unreduced axes kept (partial sums). Raises
    NotImplementedError for P.UNCONSTRAINED."""
    if not isinstance(sharding, NamedSharding):
        raise TypeError("expected jax.sharding.NamedSharding, got %s" % type(sharding).__name__)
    return _reshard.NamedSharding(mesh_of(sharding.mesh, logical=logical), _spec_dims(sharding, ndim),
                                  unreduced=_unreduced_axes(sharding))


def _plain_named(sharding) -> bool:
    return (isinstance(sharding, NamedSharding) and not isinstance(sharding.mesh, AbstractMesh)
            and getattr(sharding, "_logical_device_ids", None) is None)


def hlo_sharding_text(sharding, ndim: int) -> str:
    """The sharding's HLO text as JAX prints it (str(sharding._to_xla_hlo_sharding(ndim))): for a
    NamedSharding computed by reshard, with devices numbered by their mesh position."""
    if _plain_named(sharding):
        return named_sharding_of(sharding, ndim, logical=True).to_hlo()
    return str(sharding._to_xla_hlo_sharding(ndim))


def layout_of(sharding, shape, dtype: Any = "f32") -> _reshard.Layout:
    """Any jax.sharding.Sharding of an array of `shape` as a reshard.Layout (device id -> boxes).
    NamedShardings convert directly; other shardings through their HLO sharding."""
    shape = [int(n) for n in shape]
    dt = _reshard.dtype_name(dtype)
    if _plain_named(sharding):
        return named_sharding_of(sharding, len(shape)).to_layout(shape, dt)
    if not isinstance(sharding, jax.sharding.Sharding):
        raise TypeError("expected a jax.sharding.Sharding, got %s" % type(sharding).__name__)
    devices = list(sharding._device_assignment)
    text = str(sharding._to_xla_hlo_sharding(len(shape)))
    logical = _reshard.Mesh([("devices", len(devices))])
    return _reshard.parse(text, shape, dt, logical).layout.with_devices([int(d.id) for d in devices])


