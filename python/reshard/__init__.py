"""reshard: plans how to move a distributed N-d array between shardings as real collectives.

The Python face of the C++ library (built with nanobind). It mirrors the C++
API: read a sharding in any notation, show a layout (device -> boxes), plan
the move (steps, stats, lower bound, baselines, modeled time), and emit the
plan as XLA HLO, a JAX module or JSON. ``reshard.jax`` applies plans to JAX
arrays.

Error rule (every function here, stated once as leveldb's c.h states its own):

    ValueError           bad input. The message is the library's (the C++
                         Status message), with the column and a caret for text:
                         "col 14: unknown mesh axis 'q' (mesh is x=4,y=2)".
    NotImplementedError  valid input reshard does not handle yet (Status
                         NotSupported): HLO manual/tuple shardings, targets
                         with a pending reduction (partial sums), emitting a
                         plan with a ragged exchange.
    RuntimeError         an internal error (a bug: please report it).
    TypeError            an argument of the wrong Python type.

Example, the canonical case::

    >>> import reshard
    >>> src = reshard.parse("P('y', None, 'x')", (16, 16, 16), mesh="x=4,y=2")
    >>> dst = reshard.parse("{devices=[1,8,1]<=[8]}", (16, 16, 16))
    >>> reshard.show(src)[1]
    [((8, 16), (0, 16), (0, 4))]
    >>> p = reshard.plan(src, dst)
    >>> [(s.op, s.group) for s in p.steps], p.stats["max_recv_bytes"], p.lower_bound["max_recv_bytes"]
    ([('all-to-all', ['x', 'y'])], 1792, 1792)
    >>> hlo = p.emit("hlo")    # also "jax" and "json"
"""
from __future__ import annotations

import operator
from typing import Iterable, Optional, Sequence, Union

from . import _core
from ._core import (  # noqa: F401  (re-exported)
    Layout,
    Mesh,
    NamedSharding,
    ParsedLayout,
    PlanResult,
    Step,
    detect_notation,
    named_sharding_from_layout,
)

__all__ = [
    "Layout", "Mesh", "NamedSharding", "ParsedLayout", "PlanResult", "Step",
    "parse", "parse_mesh", "show", "convert", "plan", "emit", "lower_bound", "detect_notation",
    "named_sharding_from_layout", "dtype_name", "NOTATIONS", "STRATEGIES", "BACKENDS", "EMIT_FORMATS",
]
__version__ = "0.1.0"

NOTATIONS = ("hlo", "hlo-v3", "jax", "shardy", "dtensor", "blockcyclic")
STRATEGIES = ("auto", "exchange", "collectives")
BACKENDS = ("any", "xla", "jax-cpu", "jax-gpu", "mpi", "nccl")
EMIT_FORMATS = ("hlo", "jax", "json")

MeshLike = Union[Mesh, str, None]
LayoutLike = Union[Layout, ParsedLayout]

_XLA_NAMES = {
    "bool": "pred", "int8": "s8", "uint8": "u8", "int16": "s16", "uint16": "u16", "float16": "f16",
    "bfloat16": "bf16", "int32": "s32", "uint32": "u32", "float32": "f32", "int64": "s64", "uint64": "u64",
    "float64": "f64", "complex64": "c64", "complex128": "c128",
}
_XLA_VALUES = frozenset(_XLA_NAMES.values())
_BY_SIZE = {1: "u8", 2: "u16", 4: "u32", 8: "u64", 16: "c128"}


def dtype_name(dtype) -> str:
    """The XLA element type name for `dtype`: an XLA name ("f32", "bf16"), a numpy or JAX dtype,
    or a type such as numpy.float32. Other types of 1, 2, 4, 8 or 16 bytes (float8, int4 as JAX
    stores them) plan as the unsigned type of that size: only byte counts matter to a plan."""
    if dtype is None:  # (numpy reads None as float64)
        raise TypeError("dtype: expected an element type, got None")
    if isinstance(dtype, str) and dtype in _XLA_VALUES:
        return dtype
    if isinstance(dtype, str) and dtype in _XLA_NAMES:  # "bfloat16" reads without ml_dtypes loaded
        return _XLA_NAMES[dtype]
    import numpy as np
    try:
        dt = np.dtype(dtype)
    except TypeError:
        if isinstance(dtype, str):
            _core.dtype_bytes(dtype)  # raises ValueError with the library's list of names
        raise ValueError("dtype: %r is not an element type" % (dtype,)) from None
    name = _XLA_NAMES.get(dt.name)
    if name is not None:
        return name
    if dt.itemsize in _BY_SIZE:
        return _BY_SIZE[dt.itemsize]
    raise ValueError("dtype: %r (%d bytes per element) has no XLA element type" % (dt.name, dt.itemsize))


def parse_mesh(mesh: MeshLike) -> Optional[Mesh]:
    """A Mesh from a Mesh, mesh text ("x=4,y=2", Shardy mesh text) or None."""
    if mesh is None or isinstance(mesh, Mesh):
        return mesh
    if isinstance(mesh, str):
        return Mesh.parse(mesh)
    raise TypeError("mesh: expected reshard.Mesh, mesh text or None, got %s" % type(mesh).__name__)


def parse(text: str, shape: Sequence[int], dtype="f32", mesh: MeshLike = None) -> ParsedLayout:
    """Reads a sharding in any notation (detected from the text; see NOTATIONS) for an array of
    `shape`. `mesh` supplies the axes for JAX and DTensor text, the devices for {replicated}, and
    the device order for block-cyclic layouts. Raises ValueError with the column on bad text."""
    return _core.parse(text, _shape(shape), dtype_name(dtype), parse_mesh(mesh))


def _shape(shape) -> list[int]:
    """A shape as a list of ints: a sequence of ints (numpy integers too), never a string, a bool or
    a float (TypeError: int() would read '16' as [1, 6] and 4.7 as 4); dims past int64 are
    ValueError, as the library's own overflow checks are."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise TypeError("shape: expected a sequence of ints, got %s" % type(shape).__name__)
    out = []
    for n in shape:
        if isinstance(n, bool):
            raise TypeError("shape: expected ints, got bool")
        try:
            n = operator.index(n)
        except TypeError:
            raise TypeError("shape: expected ints, got %s" % type(n).__name__) from None
        if not 0 <= n < 1 << 63:
            raise ValueError("shape: %d is not a dim size from 0 to 2^63-1" % n)
        out.append(n)
    return out


def _layout(x: LayoutLike, what: str) -> Layout:
    if isinstance(x, ParsedLayout):
        return x.layout
    if isinstance(x, Layout):
        return x
    raise TypeError("%s: expected reshard.Layout or ParsedLayout, got %s" % (what, type(x).__name__))


def show(layout: LayoutLike) -> dict:
    """device -> the boxes it holds, each a tuple of (lo, hi) per dim (half-open), in its local
    buffer's order: what `reshard show` prints."""
    return _layout(layout, "layout").boxes()


def convert(layout: LayoutLike, notation: str, mesh: MeshLike = None) -> str:
    """The layout as text in `notation` ("hlo", "hlo-v3", "jax", "shardy", "dtensor"). A
    ParsedLayout converts as `reshard convert` converts its text (the library's ConvertLayout): over
    the mesh given to parse() (or the same one here), else the text's own, else one read off an HLO
    tile assignment; named texts keep their axes as written (size-1 axes too), HLO text its form.
    A Layout, or a ParsedLayout over another mesh given here, prints over that mesh (JAX, Shardy
    and DTensor need one). Raises NotImplementedError when the notation cannot state the layout."""
    m = parse_mesh(mesh)
    if isinstance(layout, ParsedLayout) and (m is None or m == layout.given_mesh):
        return layout.convert(notation)[0]
    if m is None and isinstance(layout, ParsedLayout):
        m = layout.mesh
    return _layout(layout, "layout").to_text(notation, m)



def _bytes(value) -> int:
    """memory_cap= as a byte count: None (the default), an int, or text read by the library's one
    parser of byte counts (the CLI's --memory-cap)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError("memory_cap: expected bytes (int or text such as '64K'), got bool")
    if isinstance(value, str):
        try:
            return _core.parse_byte_count(value)
        except ValueError as e:
            raise ValueError("memory_cap: %s" % e) from None
    try:
        n = operator.index(value)  # an int, a numpy integer
    except TypeError:
        raise TypeError("memory_cap: expected bytes (int or text such as '64K'), got %s"
                        % type(value).__name__) from None
    if not 1 <= n <= _core.MAX_BYTE_COUNT:
        raise ValueError("memory_cap: %d is not a byte count from 1 to 2^62" % n)
    return n


def plan(source: LayoutLike, target: LayoutLike, *, strategy: str = "auto", topology: str = "flat",
         backend: str = "any", memory_cap=None, bandwidth_only: bool = False,
         meshes: Iterable[MeshLike] = ()) -> PlanResult:
    """The cheapest plan of collectives from `source` to `target` (the C++ PlanReshard).

    strategy:       "auto" (cheapest under the cost model), "exchange" (one ragged all-to-all-v),
                    "collectives" (structured collectives only)
    topology:       "flat", "nodes:K" or "torus:AxB[xC]" (docs/cost_model.md)
    backend:        where the plan runs, which decides the collectives it may use: "any", "xla",
                    "jax-cpu" (no ragged exchange), "jax-gpu", "mpi", "nccl" (the CLI's --for)
    memory_cap:     most bytes a device may hold during a step: an int or "64K", "1.5M", "2G";
                    None: twice the largest source and target shards together
    bandwidth_only: zero every latency, so plans are priced by received bytes alone
    meshes:         meshes to try first for the plan mesh; the meshes ParsedLayouts were stated
                    over (and those an HLO tile assignment suggests) are tried after them

    Returns a PlanResult: .steps (each with .op, .group, .input_spec, .output_spec, .program, ...),
    .stats, .lower_bound, .baselines, .modeled_time_us, .emit("hlo" | "jax" | "json").
    Raises ValueError for mismatched layouts or a cap no plan fits, NotImplementedError when the
    backend lacks every collective that could move the data."""
    if isinstance(meshes, (str, Mesh)):  # one mesh, not a sequence of its characters
        meshes = [meshes]
    ms = [parse_mesh(m) for m in meshes]
    for side in (source, target):
        if isinstance(side, ParsedLayout):
            ms.extend(side.meshes)
    return _core.plan(_layout(source, "source"), _layout(target, "target"), strategy=strategy,
                      topology=topology, backend=backend, memory_cap=_bytes(memory_cap),
                      bandwidth_only=_flag(bandwidth_only, "bandwidth_only"), meshes=[m for m in ms if m is not None])


def _flag(value, what: str) -> bool:
    """A bool (a numpy bool too); not any value's truth ('False' is true)."""
    if type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    raise TypeError("%s: expected a bool, got %s" % (what, type(value).__name__))


def lower_bound(source: LayoutLike, target: LayoutLike) -> dict:
    """What any plan from `source` to `target` must receive, from the layouts alone:
    {"max_recv_bytes": into the busiest device, "total_bytes": into all devices}. Where a layout
    carries a pending reduction (DTensor Partial, JAX unreduced axes) it counts what combining the
    partial values needs (docs/cost_model.md#partial-sums)."""
    return _core.lower_bound(_layout(source, "source"), _layout(target, "target"))


def emit(p: PlanResult, format: str) -> str:  # noqa: A002 (the CLI's name)
    """The plan as "hlo" (an HLO module, one device's program), "jax" (a Python module defining
    reshard(x, mesh) over jax.shard_map) or "json" (docs/plan_format.md). HLO and JAX raise
    NotImplementedError for a plan with a ragged exchange step: plan with backend="jax-cpu" or
    strategy="collectives"."""
    return p.emit(format)
