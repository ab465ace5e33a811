"""reshard.jax: JAX shardings as reshard layouts, and resharding JAX arrays with reshard's plans.

    import reshard.jax as rj
    y = jax.jit(lambda a: rj.reshard(a, dst, source=src))(x)   # or rj.reshard(x, dst) on a jax.Array
    print(rj.explain(x, dst))                                    # XLA's compiled collectives beside reshard's

Conversions (typed objects, no text in between):
    mesh_of(jax_mesh)                  -> reshard.Mesh (axis names and sizes, device ids row-major)
    named_sharding_of(sharding, ndim)  -> reshard.NamedSharding
    layout_of(sharding, shape, dtype)  -> reshard.Layout, for any jax.sharding.Sharding: a
        NamedSharding (any mesh, device order and axis types) directly; any other sharding through
        its HLO sharding (sharding._to_xla_hlo_sharding(ndim)), whose device numbers are positions
        in sharding._device_assignment.
    hlo_sharding_text(sharding, ndim)  -> the HLO sharding text exactly as JAX prints it.

reshard(x, target, *, source=None) moves x (a jax.Array, or a traced value inside jax.jit) to the
target sharding (a NamedSharding, or a PartitionSpec under jax.set_mesh). How:

1. Plan at trace time (shapes are static) with the C++ planner, once per (shape, dtype, source,
   target, platform): the plan is cached (cache_info(), clear_cache()).
2. The plan is structured collectives only, on every platform: on CPU it is made for jax-cpu
   (XLA:CPU has no ragged all-to-all); on GPU and TPU with strategy "collectives". GPU and TPU
   have a ragged all-to-all, but the JAX emitter does not write reshard's ragged exchange yet.
   Plans are priced by bytes (bandwidth-only), the quantity compared in step 4.
3. The plan is performed by the module the C++ JAX emitter writes (`reshard plan --emit jax`):
   jax.shard_map over the plan's mesh with jax.lax collectives. It is exec'd once per cached
   plan. Why exec the emitted module rather than rebuild the ops in Python from the plan: it is
   the one lowering of a plan to JAX, the same text the CLI writes and the real-JAX suite
   (tests/jax) runs over the corpus, so there is no second interpreter of the plan's program to
   drift from it; exec costs about a millisecond once per plan, and the text is made by our
   emitter from numbers and validated axis names only.
4. Never worse than XLA: for each cached plan, the program with_sharding_constraint(x, target)
   and the program with reshard's module are each compiled once, for the same shapes and
   shardings (uneven sides padded to their ceil-padded shape, as the tests do: free), and the
   bytes one device receives through their collectives are counted in the compiled HLO
   (reshard.hlo_bytes). reshard's module is used only when it receives strictly fewer bytes;
   otherwise reshard(x, target) is with_sharding_constraint(x, target), and explain() says so.
   XLA logs "Involuntary full rematerialization" while compiling its side of that comparison
   (TF_CPP_MIN_LOG_LEVEL=2 hides XLA's warnings).

Differentiable: jax.grad through reshard() works (shard_map's collectives have transposes) and
equals the gradient through with_sharding_constraint.

Limits, and what happens instead:
- Inside jax.jit, a traced value on a mesh with Auto axes carries no sharding at trace time
  (XLA decides shardings after tracing), so pass source= (a NamedSharding or a PartitionSpec).
  Without it, reshard() raises ValueError.
- Meshes with Explicit axes: reshard(x, target) is jax.sharding.reshard(x, target) (JAX refuses
  with_sharding_constraint there, and the emitted module uses it).
- One jitted program runs on one device list (JAX refuses shardings over other devices, or the
  same devices in another order, inside it): between those, outside jax.jit, reshard() is
  jax.device_put. Layouts with no common mesh move by the ragged exchange, which the JAX emitter
  does not write: with_sharding_constraint is used.
- Outside jax.jit, JAX 0.10.2 cannot hold an array whose sharding does not divide it evenly, so
  an uneven target raises ValueError there; inside jax.jit uneven shardings work.

Errors follow the package's rule (see reshard's docstring): ValueError for bad input,
NotImplementedError for what reshard does not handle yet (P.UNCONSTRAINED, unreduced axes).
"""
from __future__ import annotations

import math
import re
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

import reshard as _reshard
from reshard import hlo_bytes
from reshard.audit import audit

__all__ = [
    "mesh_of", "named_sharding_of", "layout_of", "hlo_sharding_text", "reshard", "explain",
    "Explanation", "cache_info", "clear_cache", "planning_backend", "audit",
]

_wsc = jax.lax.with_sharding_constraint
_SAFE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")


# ---- conversions

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


def _spec_dims(sharding: NamedSharding, ndim: Optional[int]) -> list[list[str]]:
    spec = sharding.spec
    if getattr(spec, "unreduced", None) or getattr(spec, "reduced", None):
        raise NotImplementedError("%s: unreduced and reduced axes are not supported yet" % (spec,))
    rename = dict(zip(sharding.mesh.axis_names, _axis_names(sharding.mesh)))
    dims: list[list[str]] = []
    for entry in spec:
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
    its spec padded with None to `ndim` dims. Raises NotImplementedError for P.UNCONSTRAINED and
    unreduced axes."""
    if not isinstance(sharding, NamedSharding):
        raise TypeError("expected jax.sharding.NamedSharding, got %s" % type(sharding).__name__)
    return _reshard.NamedSharding(mesh_of(sharding.mesh, logical=logical), _spec_dims(sharding, ndim))


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


# ---- plans, cached

def planning_backend(platform: str) -> tuple[str, str]:
    """(backend, strategy) reshard plans with on a JAX platform: structured collectives only on
    every platform (jax-cpu has no ragged all-to-all; GPU and TPU do, but the JAX emitter does
    not write reshard's ragged exchange yet)."""
    if platform == "cpu":
        return "jax-cpu", "auto"
    if platform in ("gpu", "cuda", "rocm"):
        return "jax-gpu", "collectives"
    return "xla", "collectives"


@dataclass
class Explanation:
    """What reshard.jax does for one (shape, dtype, source, target, platform), and why.

    choice is "reshard" (reshard's plan, as the emitted shard_map module), "xla"
    (with_sharding_constraint: reshard found nothing better, or cannot run its plan here),
    "none" (the layouts are equal), "jax.sharding.reshard" (Explicit mesh axes) or
    "device_put" (source and target on different device lists)."""
    shape: tuple
    dtype: str
    source: Any
    target: Any
    platform: str
    backend: str
    strategy: str
    choice: str
    reason: str
    xla_collectives: Optional[list] = None
    xla_bytes: Optional[int] = None
    reshard_collectives: Optional[list] = None
    reshard_bytes: Optional[int] = None
    plan: Optional[_reshard.PlanResult] = None
    module: Optional[str] = None

    def as_dict(self) -> dict:
        p = self.plan
        return {
            "shape": list(self.shape), "dtype": self.dtype, "source": str(self.source), "target": str(self.target),
            "platform": self.platform, "backend": self.backend, "strategy": self.strategy, "choice": self.choice,
            "reason": self.reason, "xla_collectives": self.xla_collectives, "xla_bytes": self.xla_bytes,
            "reshard_collectives": self.reshard_collectives, "reshard_bytes": self.reshard_bytes,
            "plan": None if p is None else {"steps": p.op_names, "stats": p.stats, "lower_bound": p.lower_bound,
                                            "baselines": p.baselines},
        }

    def __str__(self) -> str:
        def ops(cs):
            return "".join("\n    %s %s B (group of %s)" % (c["op"], c["bytes"], c["group_size"]) for c in cs) or \
                "\n    no collectives"
        shape = "%s[%s]" % (self.dtype, ",".join(map(str, self.shape)))
        lines = ["reshard.jax: %s on %s" % (shape, self.platform),
                 "  from %s" % _sharding_text(self.source, len(self.shape)),
                 "  to   %s" % _sharding_text(self.target, len(self.shape))]
        if self.xla_bytes is not None:
            lines.append("XLA (with_sharding_constraint), compiled: %s B into each device%s" %
                         (self.xla_bytes, ops(self.xla_collectives)))
        if self.plan is not None:
            p = self.plan
            lines.append("reshard plan (for %s, strategy %s, priced by bytes; structured collectives only: the JAX "
                         "emitter does not write the ragged exchange yet):" % (self.backend, self.strategy))
            for i, s in enumerate(p.steps, 1):
                group = " over %s" % s.group_spec if s.group_spec else ""
                spec = ": %s -> %s" % (s.input_spec, s.output_spec) if s.input_spec else ""
                lines.append("    %d. %s%s%s, %d B into the busiest device" % (i, s.op, group, spec, s.max_recv_bytes))
            if not p.steps:
                lines.append("    (nothing to do)")
            base = {b["name"]: b["max_recv_bytes"] for b in p.baselines}
            lines.append("  modeled: %d B into the busiest device; lower bound %d B; full rematerialization %s B; "
                         "Shardy-style %s B" % (p.stats["max_recv_bytes"], p.lower_bound["max_recv_bytes"],
                                                base.get("full_rematerialization", "?"), base.get("shardy", "?")))
        if self.reshard_bytes is not None:
            lines.append("reshard (emitted shard_map module), compiled: %s B into each device%s" %
                         (self.reshard_bytes, ops(self.reshard_collectives)))
        lines.append("choice: %s: %s" % ({"reshard": "reshard's plan", "xla": "with_sharding_constraint",
                                           "none": "nothing to move", "device_put": "jax.device_put",
                                           "jax.sharding.reshard": "jax.sharding.reshard"}[self.choice], self.reason))
        return "\n".join(lines)


def _sharding_text(s, ndim: int) -> str:
    try:
        hlo = hlo_sharding_text(s, ndim)
    except Exception:  # noqa: BLE001 (only for display)
        hlo = "?"
    if isinstance(s, NamedSharding):
        return "%s over mesh %s = %s" % (s.spec, dict(s.mesh.shape), hlo)
    return "%s = %s" % (type(s).__name__, hlo)


def _padded(shape, tiles):
    return tuple(-(-n // k) * k if k > 1 else n for n, k in zip(shape, tiles))


def _measure(fn, shape, dtype, source, target, src_tiles, dst_tiles):
    """(collectives, bytes into one device) of fn between the two shardings, compiled. Uneven
    sides are carried padded to their ceil-padded shape, which moves nothing (XLA stores shards
    padded); both programs compared get the same treatment."""
    padded_src, padded_dst = _padded(shape, src_tiles), _padded(shape, dst_tiles)
    crop = tuple(slice(0, n) for n in shape)

    def program(a):
        if padded_src != tuple(shape):
            a = a[crop]
        y = fn(_wsc(a, source))
        if padded_dst != tuple(shape):
            y = _wsc(jnp.pad(y, [(0, p - n) for p, n in zip(padded_dst, shape)]), target)
        return y

    arg = jax.ShapeDtypeStruct(padded_src, dtype, sharding=source)
    with jax.sharding.use_abstract_mesh(AbstractMesh((), ())):
        text = jax.jit(program, out_shardings=target).lower(arg).compile().as_text()
    return hlo_bytes.collectives(text), hlo_bytes.recv_bytes(text)


class _Entry:
    """One cached decision: the plan, the exec'd module and the byte comparison."""

    def __init__(self, shape, dtype, source, target, platform):
        self.shape, self.dtype, self.source, self.target, self.platform = shape, dtype, source, target, platform
        self.backend, self.strategy = planning_backend(platform)
        self.fn = None
        self.plan_mesh = None
        self.lookup = None
        self.uneven_target = False
        self._jitted = None
        self.explanation = self._decide()

    def _explain(self, choice, reason, **kw) -> Explanation:
        return Explanation(tuple(self.shape), _reshard.dtype_name(self.dtype), self.source, self.target,
                           self.platform, self.backend, self.strategy, choice, reason, **kw)

    def _decide(self) -> Explanation:
        if _explicit(self.source) or _explicit(self.target):
            return self._explain("jax.sharding.reshard", "the mesh has Explicit axes, where JAX refuses "
                                 "with_sharding_constraint; reshard.jax plans only for Auto axes")
        if tuple(self.source._device_assignment) != tuple(self.target._device_assignment):
            return self._explain("device_put", "the source and target list other devices, or the same in another "
                                 "order: one jitted program runs on one device list, so this is jax.device_put "
                                 "outside jax.jit (JAX refuses it inside)")
        dt = _reshard.dtype_name(self.dtype)
        src = layout_of(self.source, self.shape, dt)
        dst = layout_of(self.target, self.shape, dt)
        self.src_tiles, self.dst_tiles = src.dim_tiles, dst.dim_tiles
        self.uneven_target = _padded(self.shape, self.dst_tiles) != tuple(self.shape)
        if src == dst:
            return self._explain("none", "the layouts are equal: every device already holds its target block")
        try:
            xla_ops, xla_bytes = _measure(lambda a: _wsc(a, self.target), self.shape, self.dtype, self.source,
                                          self.target, self.src_tiles, self.dst_tiles)
        except Exception as e:  # noqa: BLE001 (nothing to compare with: JAX's own path, and its own error)
            return self._explain("xla", "XLA's with_sharding_constraint program did not compile for the comparison "
                                 "(%s: %s)" % (type(e).__name__, e))
        meshes = [mesh_of(s.mesh) for s in (self.source, self.target) if _plain_named(s)]
        try:
            plan = _reshard.plan(src, dst, strategy=self.strategy, backend=self.backend, bandwidth_only=True,
                                 meshes=meshes)
        except (ValueError, NotImplementedError) as e:
            return self._explain("xla", "reshard has no plan here (%s)" % e, xla_collectives=xla_ops,
                                 xla_bytes=xla_bytes)
        try:
            module = plan.emit("jax")
        except NotImplementedError as e:
            return self._explain("xla", "reshard's plan cannot run in JAX yet (%s)" % e, xla_collectives=xla_ops,
                                 xla_bytes=xla_bytes, plan=plan)
        namespace: dict = {"__name__": "reshard_plan"}
        exec(compile(module, "<reshard plan %s[%s]>" % (dt, ",".join(map(str, self.shape))), "exec"),  # noqa: S102
             namespace)
        devices = {d.id: d for s in (self.source, self.target) for d in s._device_assignment}
        self.lookup = types.SimpleNamespace(devices=np.array(list(devices.values()), dtype=object))
        self.plan_mesh = namespace["plan_mesh"](self.lookup)
        self.fn = namespace["reshard"]
        try:
            ours_ops, ours_bytes = _measure(self._run_plan, self.shape, self.dtype, self.source, self.target,
                                            self.src_tiles, self.dst_tiles)
        except Exception as e:  # noqa: BLE001 (any failure to compile ours means XLA's is used)
            self.fn = None
            return self._explain("xla", "reshard's module did not compile here (%s: %s)" % (type(e).__name__, e),
                                 xla_collectives=xla_ops, xla_bytes=xla_bytes, plan=plan, module=module)
        kw = dict(xla_collectives=xla_ops, xla_bytes=xla_bytes, reshard_collectives=ours_ops,
                  reshard_bytes=ours_bytes, plan=plan, module=module)
        if ours_bytes < xla_bytes:
            return self._explain("reshard", "%s B < %s B into each device (%.1fx less)" %
                                 (ours_bytes, xla_bytes, xla_bytes / ours_bytes if ours_bytes else math.inf), **kw)
        self.fn = None
        return self._explain("xla", "reshard found nothing better than XLA's own lowering (%s B vs %s B into each "
                             "device)" % (ours_bytes, xla_bytes), **kw)

    def _run_plan(self, x):
        # The plan's shard_map runs over its own mesh; a context mesh (jax.set_mesh) with other
        # axes would make shard_map refuse it, so the plan's mesh is the context while it runs.
        with jax.sharding.use_abstract_mesh(self.plan_mesh.abstract_mesh):
            return self.fn(x, self.lookup)

    def apply(self, x):
        """The move, on a traced value (inside jit) or a jax.Array (eagerly)."""
        choice = self.explanation.choice
        if choice == "reshard":
            return self._run_plan(x)
        if choice == "jax.sharding.reshard":
            return jax.sharding.reshard(x, self.target)
        if choice == "device_put" and not _is_tracer(x):
            return jax.device_put(x, self.target)
        return _wsc(x, self.target)

    def jitted(self):
        if self.explanation.choice == "device_put":
            return self.apply
        if self._jitted is None:
            self._jitted = jax.jit(self.apply, out_shardings=self.target)
        return self._jitted


_CACHE: dict = {}
_LOCK = threading.Lock()
_STATS = {"hits": 0, "misses": 0}


def cache_info() -> dict:
    """{"hits", "misses", "size"} of the plan cache."""
    with _LOCK:
        return dict(_STATS, size=len(_CACHE))


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
        _STATS.update(hits=0, misses=0)


def _entry(shape, dtype, source, target) -> _Entry:
    platform = _platform(target)
    key = (tuple(int(n) for n in shape), np.dtype(dtype).name, source, target, platform)
    with _LOCK:
        e = _CACHE.get(key)
        if e is not None:
            _STATS["hits"] += 1
            return e
        _STATS["misses"] += 1
        e = _Entry(key[0], np.dtype(dtype), source, target, platform)
        _CACHE[key] = e
        return e


# ---- the public entry points

def _platform(sharding) -> str:
    return next(iter(sharding.device_set)).platform


def _explicit(sharding) -> bool:
    mesh = getattr(sharding, "mesh", None)
    types_ = getattr(mesh, "axis_types", ()) or ()
    return any(t == AxisType.Explicit for t in types_)


def _context_mesh():
    """The concrete mesh of jax.set_mesh, or None. Inside jax.jit the public get_mesh() refuses,
    so the concrete mesh comes from JAX's internal context there (JAX 0.10: jax._src.mesh)."""
    m = None
    try:
        m = jax.sharding.get_mesh()
    except ValueError:  # inside jax.jit
        try:
            from jax._src import mesh as _mesh_lib
            m = _mesh_lib.get_concrete_mesh()
        except (ImportError, AttributeError):
            m = None
    return None if m is None or getattr(m, "empty", True) else m


def _as_sharding(s, what: str, mesh_hint=None):
    if isinstance(s, jax.sharding.Sharding):
        return s
    if isinstance(s, PartitionSpec):
        mesh = _context_mesh() or mesh_hint
        if mesh is None:
            raise ValueError("%s: a PartitionSpec needs a mesh: call under jax.set_mesh(mesh), or pass a "
                             "NamedSharding" % what)
        return NamedSharding(mesh, s)
    raise TypeError("%s: expected a jax.sharding.Sharding or PartitionSpec, got %s" % (what, type(s).__name__))


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _resolve(x, target, source):
    hint = getattr(source, "mesh", None) if isinstance(source, jax.sharding.Sharding) else None
    tgt = _as_sharding(target, "target", hint)
    if source is not None:
        src = _as_sharding(source, "source", getattr(tgt, "mesh", None))
    elif isinstance(x, jax.Array) and not _is_tracer(x):
        src = x.sharding
    elif _is_tracer(x) and _explicit(getattr(jax.typeof(x), "sharding", None)):
        src = None  # Explicit axes: the type carries the sharding, and jax.sharding.reshard moves it
    elif _is_tracer(x):
        raise ValueError("reshard: inside jax.jit a traced value on a mesh with Auto axes carries no sharding at "
                         "trace time; pass source= (the NamedSharding or PartitionSpec x has)")
    elif hasattr(x, "sharding") and isinstance(x.sharding, jax.sharding.Sharding):
        src = x.sharding  # jax.ShapeDtypeStruct
    else:
        raise ValueError("reshard: %s has no sharding; pass source=" % type(x).__name__)
    return src, tgt


def reshard(x, target, *, source=None):
    """x (a jax.Array, or a traced value inside jax.jit) moved to the `target` sharding (a
    jax.sharding.Sharding, or a PartitionSpec under jax.set_mesh) by reshard's plan, or by
    with_sharding_constraint where that receives no more bytes (see the module docstring).
    source: x's sharding; required for traced values on meshes with Auto axes."""
    if not _is_tracer(x) and not isinstance(x, jax.Array):
        return jax.device_put(x, _as_sharding(target, "target"))  # host data: nothing to reshard
    src, tgt = _resolve(x, target, source)
    if src is None:
        return jax.sharding.reshard(x, tgt)
    e = _entry(x.shape, x.dtype, src, tgt)
    if _is_tracer(x):
        return e.apply(x)
    if e.explanation.choice == "none" and x.sharding.is_equivalent_to(tgt, x.ndim):
        return x
    if e.uneven_target:
        raise ValueError("reshard: %s does not divide an array of shape %s evenly; JAX 0.10.2 holds such arrays "
                         "only inside jax.jit (call reshard there)" % (tgt, tuple(x.shape)))
    return e.jitted()(x)


def explain(x, target, *, source=None) -> Explanation:
    """What XLA's with_sharding_constraint compiles to (its collectives and the bytes one device
    receives, from the compiled HLO) beside reshard's plan for the same case, and which one
    reshard(x, target) uses. x: a jax.Array, a traced value (with source=), or a
    jax.ShapeDtypeStruct with a sharding. print() it, or read its fields."""
    src, tgt = _resolve(x, target, source)
    if src is None:
        src = jax.typeof(x).sharding
    return _entry(x.shape, x.dtype, src, tgt).explanation
