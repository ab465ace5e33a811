"""reshard.jax's decisions: the plan for one (shape, dtype, source, target, platform), how it
runs inside a compiled program, and whether it is used or the move is handed back to XLA.

A decision is made where the source is known: in the compiler's partition callback of the
reshard op (reshard/_jax_op.py), or for a jax.Array that knows its sharding (explain()). It is
cached, least recently used first out (cache_info(), clear_cache(), set_cache_size()).

The rule "never worse than XLA" (docs/python.md):
1. The layouts are equal: nothing moves ("none").
2. The plan's busiest device receives the lower bound and neither layout pads the shape: no
   lowering of this move, XLA's included, can receive fewer bytes, so reshard's plan is used
   with no comparison compile ("reshard", proved=True). Plans are priced by bytes.
3. Otherwise XLA's with_sharding_constraint program and reshard's plan are each compiled once
   for the same shapes and shardings and the bytes one device receives through their
   collectives are counted in the compiled HLO (reshard.hlo_bytes); reshard's plan is used only
   when it receives strictly fewer ("reshard"), else XLA's lowering ("xla").
"""
from __future__ import annotations

import collections
import functools
import math
import threading
import types
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import AbstractMesh, Mesh, NamedSharding

import reshard as _reshard
from reshard import hlo_bytes
from reshard._jax_convert import _plain_named, hlo_sharding_text, layout_of, mesh_of

_wsc = jax.lax.with_sharding_constraint


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

    choice is "reshard" (reshard's plan: the compiler partitions the op into the plan's
    collectives), "xla" (the op hands the move back to XLA's own lowering: reshard found nothing
    better, or cannot run its plan here), "none" (the layouts are equal) or "device_put" (source
    and target on different device lists, outside jax.jit). proved is True where the choice
    needed no comparison compile: the plan meets the lower bound on an even shape, so no
    lowering can receive fewer bytes."""
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
    proved: bool = False

    def as_dict(self) -> dict:
        p = self.plan
        return {
            "shape": list(self.shape), "dtype": self.dtype, "source": str(self.source), "target": str(self.target),
            "platform": self.platform, "backend": self.backend, "strategy": self.strategy, "choice": self.choice,
            "reason": self.reason, "xla_collectives": self.xla_collectives, "xla_bytes": self.xla_bytes,
            "reshard_collectives": self.reshard_collectives, "reshard_bytes": self.reshard_bytes,
            "proved": self.proved,
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
        partial = _has_unreduced(self.source)
        if self.xla_bytes is not None:
            lines.append("XLA (%s), compiled: %s B into each device%s" %
                         ("jax.sharding.reshard" if partial else "with_sharding_constraint", self.xla_bytes,
                          ops(self.xla_collectives)))
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
            if partial:
                lines.append("  modeled: %d B into the busiest device; lower bound %d B; all-reduce first (Shardy's "
                             "order) %s B" % (p.stats["max_recv_bytes"], p.lower_bound["max_recv_bytes"],
                                              base.get("all_reduce_first", "?")))
            else:
                lines.append("  modeled: %d B into the busiest device; lower bound %d B; full rematerialization %s B; "
                             "Shardy-style %s B" % (p.stats["max_recv_bytes"], p.lower_bound["max_recv_bytes"],
                                                    base.get("full_rematerialization", "?"), base.get("shardy", "?")))
        if self.reshard_bytes is not None:
            lines.append("reshard (its plan as the compiler runs it), compiled: %s B into each device%s" %
                         (self.reshard_bytes, ops(self.reshard_collectives)))
        lines.append("choice: %s: %s" % ({"reshard": "reshard's plan", "xla": "XLA's own lowering",
                                           "none": "nothing to move", "device_put": "jax.device_put"}[self.choice],
                                          self.reason))
        return "\n".join(lines)


def _has_unreduced(s) -> bool:
    return isinstance(s, NamedSharding) and bool(getattr(s.spec, "unreduced", None))


def _sharding_text(s, ndim: int) -> str:
    try:
        hlo = hlo_sharding_text(s, ndim)
    except Exception:  # noqa: BLE001 (only for display)
        hlo = "?"
    if hlo == "?" and _has_unreduced(s):  # HLO states no pending reduction: reshard's Shardy text does
        try:
            hlo = _reshard.convert(layout_of(s, (1,) * ndim, "f32"), "shardy", mesh_of(s.mesh))
        except Exception:  # noqa: BLE001 (only for display)
            pass
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
    # A module that only compares, never runs: named so (the audit and people reading XLA's
    # dumps and logs can tell it from the user's modules).
    program.__name__ = program.__qualname__ = "reshard_comparison_only"
    with jax.sharding.use_abstract_mesh(AbstractMesh((), ())):
        text = jax.jit(program, out_shardings=target).lower(arg).compile().as_text()
    return hlo_bytes.collectives(text), hlo_bytes.recv_bytes(text)


class Decision:
    """One cached decision: the plan, the per-device program the compiler runs, and the choice.

    source and target are concrete shardings over one device list, in one order (the program's
    device assignment). Where the choice is "reshard", local(x) is the plan's per-device program
    (the C++ JAX emitter's `_local`: one lowering of a plan, not a second interpreter of it) and
    mesh is the plan's mesh over the same devices in the same order, whose axis names it uses."""

    def __init__(self, shape, dtype, source, target, platform):
        self.shape, self.dtype, self.source, self.target, self.platform = shape, dtype, source, target, platform
        self.backend, self.strategy = planning_backend(platform)
        self.local = None
        self.mesh = None
        self.uneven_target = False
        self._namespace = None
        self.explanation = self._decide()

    def _explain(self, choice, reason, **kw) -> Explanation:
        return Explanation(tuple(self.shape), _reshard.dtype_name(self.dtype), self.source, self.target,
                           self.platform, self.backend, self.strategy, choice, reason, **kw)

    def _decide(self) -> Explanation:
        devices = tuple(self.source._device_assignment)
        if devices != tuple(self.target._device_assignment):
            return self._explain("device_put", "the source and target list other devices, or the same in another "
                                 "order: one jitted program runs on one device list, so this is jax.device_put "
                                 "outside jax.jit (JAX refuses it inside)")
        dt = _reshard.dtype_name(self.dtype)
        src = layout_of(self.source, self.shape, dt)
        dst = layout_of(self.target, self.shape, dt)
        self.src_tiles, self.dst_tiles = src.dim_tiles, dst.dim_tiles
        even = (_padded(self.shape, self.src_tiles) == tuple(self.shape) and
                _padded(self.shape, self.dst_tiles) == tuple(self.shape))
        self.uneven_target = _padded(self.shape, self.dst_tiles) != tuple(self.shape)
        if src == dst:
            return self._explain("none", "the layouts are equal: every device already holds its target block")
        meshes = [mesh_of(s.mesh) for s in (self.source, self.target) if _plain_named(s)]
        try:
            plan = _reshard.plan(src, dst, strategy=self.strategy, backend=self.backend, bandwidth_only=True,
                                 meshes=meshes)
        except (ValueError, NotImplementedError) as e:
            return self._xla("reshard has no plan here (%s)" % e)
        try:
            module = plan.emit("jax")
        except NotImplementedError as e:
            return self._xla("reshard's plan cannot run in JAX yet (%s)" % e, plan=plan)
        namespace: dict = {"__name__": "reshard_plan"}
        exec(compile(module, "<reshard plan %s[%s]>" % (dt, ",".join(map(str, self.shape))), "exec"),  # noqa: S102
             namespace)
        ids = tuple(int(d.id) for d in devices)
        if tuple(namespace["DEVICE_IDS"]) != ids:
            # Collectives inside the compiled program name devices by their position in its
            # device list: the plan's mesh must list them in that order.
            return self._xla("reshard's plan is over a mesh that orders the devices %s, not as the program does "
                             "(%s)" % (tuple(namespace["DEVICE_IDS"]), ids), plan=plan, module=module)
        if (tuple(namespace["SOURCE_PADDED"]) != _padded(self.shape, self.src_tiles) or
                tuple(namespace["TARGET_PADDED"]) != _padded(self.shape, self.dst_tiles)):
            return self._xla("reshard's plan pads the shards other than XLA does", plan=plan, module=module)
        self._namespace = namespace
        self.mesh = Mesh(np.array(devices, dtype=object).reshape(namespace["AXIS_SIZES"]), namespace["AXES"])
        self.local = namespace["_local"]
        busiest, bound = plan.stats["max_recv_bytes"], plan.lower_bound["max_recv_bytes"]
        if busiest <= bound and even:
            return self._explain("reshard", "the plan meets the lower bound (%d B into the busiest device) on an even "
                                 "shape: no lowering receives fewer bytes, so the op uses it without a comparison compile"
                                 % bound, plan=plan, module=module, proved=True)
        try:
            xla_ops, xla_bytes = self._compiled(lambda a: _wsc(a, self.target))
        except Exception as e:  # noqa: BLE001 (nothing to compare with: XLA's own lowering, and its own error)
            return self._xla("XLA's with_sharding_constraint program did not compile for the comparison (%s: %s)"
                             % (type(e).__name__, e), plan=plan, module=module)
        try:
            ours_ops, ours_bytes = self._compiled(self.run_as_shard_map)
        except Exception as e:  # noqa: BLE001 (any failure to compile ours means XLA's is used)
            return self._xla("reshard's program did not compile here (%s: %s)" % (type(e).__name__, e),
                             xla_collectives=xla_ops, xla_bytes=xla_bytes, plan=plan, module=module)
        kw = dict(xla_collectives=xla_ops, xla_bytes=xla_bytes, reshard_collectives=ours_ops,
                  reshard_bytes=ours_bytes, plan=plan, module=module)
        if ours_bytes < xla_bytes:
            return self._explain("reshard", "%s B < %s B into each device (%.1fx less)" %
                                 (ours_bytes, xla_bytes, xla_bytes / ours_bytes if ours_bytes else math.inf), **kw)
        return self._xla("reshard found nothing better than XLA's own lowering (%s B vs %s B into each device)"
                         % (ours_bytes, xla_bytes), **kw)

    def explain_both(self) -> Explanation:
        """The explanation with both sides compiled and counted, also where the choice needed no
        comparison (a proved plan): what explain() shows. Computed once."""
        e = self.explanation
        if e.proved and e.xla_bytes is None:
            with _LOCK:
                try:
                    e.xla_collectives, e.xla_bytes = self._compiled(lambda a: _wsc(a, self.target))
                    e.reshard_collectives, e.reshard_bytes = self._compiled(self.run_as_shard_map)
                except Exception as err:  # noqa: BLE001 (display only: the choice stands)
                    e.reason += " (the comparison for display did not compile: %s)" % err
        return e

    def _compiled(self, fn):
        """(collectives, bytes into one device) of fn moving this decision's array, compiled."""
        return _measure(fn, self.shape, self.dtype, self.source, self.target, self.src_tiles, self.dst_tiles)

    def _xla(self, reason, **kw) -> Explanation:
        self.local = self.mesh = None
        return self._explain("xla", reason, **kw)

    def run_as_shard_map(self, x):
        """The plan as the emitted module runs it (jax.shard_map over the plan's mesh): what the
        comparison compiles, the same per-device program the partitioned op runs."""
        lookup = types.SimpleNamespace(devices=np.array(list(self.source._device_assignment), dtype=object))
        with jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh):
            return self._namespace["reshard"](x, lookup)


_CACHE: "collections.OrderedDict" = collections.OrderedDict()
_LOCK = threading.RLock()
_STATS = {"hits": 0, "misses": 0, "maxsize": 512}


def cache_info() -> dict:
    """{"hits", "misses", "size", "maxsize"} of the decision cache (least recently used out first)."""
    with _LOCK:
        return dict(_STATS, size=len(_CACHE))


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
        _STATS.update(hits=0, misses=0)


def set_cache_size(maxsize: int) -> None:
    """Bounds the decision cache to `maxsize` entries (at least 1), dropping the least recently used."""
    if not isinstance(maxsize, int) or isinstance(maxsize, bool):
        raise TypeError("set_cache_size: maxsize must be an int, got %s" % type(maxsize).__name__)
    if maxsize < 1:
        raise ValueError("set_cache_size: maxsize must be at least 1, got %d" % maxsize)
    with _LOCK:
        _STATS["maxsize"] = maxsize
        while len(_CACHE) > maxsize:
            _CACHE.popitem(last=False)


def platform_of(sharding) -> str:
    return next(iter(sharding.device_set)).platform


def _mesh_key(sharding):
    mesh = sharding.mesh
    return (tuple(mesh.axis_names), tuple(int(n) for n in mesh.devices.shape),
            tuple(int(d.id) for d in mesh.devices.flat))


def decision(shape, dtype, source, target) -> Decision:
    """The cached decision for moving an array of (shape, dtype) from source to target. The key is
    what the plan depends on: the layouts (HLO shardings over the device list), the named meshes
    that hint the plan's axes, the platform; not the Python types the shardings come in."""
    platform = platform_of(target)
    ndim = len(shape)
    hints = tuple(sorted({_mesh_key(s) for s in (source, target) if _plain_named(s)}))
    key = (tuple(int(n) for n in shape), np.dtype(dtype).name, str(source._to_xla_hlo_sharding(ndim)),
           str(target._to_xla_hlo_sharding(ndim)), tuple(int(d.id) for d in source._device_assignment),
           tuple(int(d.id) for d in target._device_assignment), hints, platform)
    with _LOCK:
        d = _CACHE.get(key)
        if d is not None:
            _STATS["hits"] += 1
            _CACHE.move_to_end(key)
            return d
        _STATS["misses"] += 1
    d = Decision(key[0], np.dtype(dtype), source, target, platform)
    with _LOCK:
        _CACHE[key] = d
        while len(_CACHE) > _STATS["maxsize"]:
            _CACHE.popitem(last=False)
    return d


@functools.lru_cache(maxsize=128)
def partial_sums_program(shape, dtype, source, target):
    """(reshard(x, mesh) of the emitted module, None) moving an array of partial sums (source: a
    NamedSharding with unreduced axes, on Explicit mesh axes) to `target` by reshard's plan
    priced by bytes (a reduce-scatter whose replicas share the reduction, where one exists), or
    (None, why not) where reshard has no such plan here. The module is the C++ JAX emitter's
    text, the same `reshard plan --emit jax` writes."""
    dt = _reshard.dtype_name(dtype)
    mesh = target.mesh
    try:
        src = layout_of(NamedSharding(mesh, source.spec), shape, dt)
        dst = layout_of(target, shape, dt)
        plan = _reshard.plan(src, dst, strategy="collectives", backend="jax-cpu", bandwidth_only=True,
                             meshes=[mesh_of(mesh)])
        module = plan.emit("jax")
    except (ValueError, NotImplementedError) as e:
        return None, str(e)
    namespace: dict = {"__name__": "reshard_partial_sums"}
    exec(compile(module, "<reshard plan from partial sums>", "exec"), namespace)  # noqa: S102
    # The emitted shard_map runs over the plan's mesh: it must be the target's mesh itself (a plan
    # mesh that drops size-1 axes or cuts an axis into pieces would hand back another mesh).
    if (tuple(namespace["AXES"]) != tuple(mesh.axis_names) or tuple(namespace["AXIS_SIZES"]) != tuple(mesh.axis_sizes)
            or tuple(namespace["DEVICE_IDS"]) != tuple(int(d.id) for d in np.asarray(mesh.devices).flat)):
        return None, "the plan's mesh is not the target's mesh"
    return namespace["reshard"], None


def partial_sums_explanation(shape, dtype, source, target, same_devices=True) -> Explanation:
    """explain() for an array of partial sums (source: a NamedSharding with unreduced axes, on
    Explicit mesh axes): jax.sharding.reshard's compiled program (an all-reduce, then a slice)
    beside reshard's (partial_sums_program), bytes into one device with an all-reduce counted as
    a ring moves it; the choice is reshard's plan where there is one and the target's mesh is
    the source's devices in the same order (same_devices), as reshard() makes it."""
    program, why = (partial_sums_program(tuple(shape), np.dtype(dtype), source, target) if same_devices else
                    (None, "the target's mesh orders or names the devices otherwise"))
    dt = _reshard.dtype_name(dtype)
    mesh = target.mesh
    plan = None
    try:
        plan = _reshard.plan(layout_of(NamedSharding(mesh, source.spec), shape, dt), layout_of(target, shape, dt),
                             strategy="collectives", backend="jax-cpu", bandwidth_only=True, meshes=[mesh_of(mesh)])
    except (ValueError, NotImplementedError):
        pass
    arg = jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=source)

    def compiled(fn):
        fn.__name__ = fn.__qualname__ = "reshard_comparison_only"
        with jax.set_mesh(source.mesh):
            text = jax.jit(fn).lower(arg).compile().as_text()
        return hlo_bytes.collectives(text), hlo_bytes.recv_bytes(text, all_reduce="ring")

    xla_ops, xla_bytes = compiled(lambda a: jax.sharding.reshard(a, target))
    e = Explanation(tuple(shape), np.dtype(dtype).name, source, target, platform_of(target), "jax-cpu", "collectives",
                    "xla", "", xla_collectives=xla_ops, xla_bytes=xla_bytes, plan=plan)
    if program is None:
        e.reason = "reshard has no plan for these partial sums here (%s): jax.sharding.reshard moves them" % why
        return e
    e.reshard_collectives, e.reshard_bytes = compiled(lambda a: program(a, mesh))
    e.choice = "reshard"
    e.reason = ("partial sums: reshard's reduction (%s B into each device, the lower bound %s B) where "
                "jax.sharding.reshard all-reduces and slices (%s B)" % (
                    e.reshard_bytes, plan.lower_bound["max_recv_bytes"] if plan is not None else "?", xla_bytes))
    return e
