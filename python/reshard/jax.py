"""reshard.jax: resharding JAX arrays with reshard's plans, the compiler supplying the source.

    import reshard.jax as rj
    f = rj.jit(f, in_shardings=...)        # jax.jit, with every with_sharding_constraint as reshard's op
    y = rj.with_sharding_constraint(x, s)  # drop-in for jax.lax.with_sharding_constraint
    y = rj.reshard(x, target)              # one array, eager or traced; no source= needed
    print(rj.explain(x, target))           # XLA's compiled collectives beside reshard's plan

How it works (docs/python.md): reshard(x, target) binds the reshard op (reshard/_jax_op.py), a
primitive that XLA's SPMD partitioner hands, through jax.experimental.custom_partitioning, the
operand's sharding as sharding propagation chose it. There the C++ planner plans the move
(cached per shape, dtype, source, target and platform; reshard/_jax_plan.py) and the op lowers
to the plan's per-device program, which the C++ JAX emitter writes (`reshard plan --emit
jax`): one lowering of a plan, the same text the CLI writes and the real-JAX suite runs. The
op is never worse than XLA: a plan at the lower bound on an even shape is used without
comparing (no lowering can receive fewer bytes); otherwise both are compiled once and reshard's
plan is used only when it receives strictly fewer bytes, else the op hands the move back to
XLA's own lowering.

Conversions (typed objects, no text in between):
    mesh_of(jax_mesh)                  -> reshard.Mesh (axis names and sizes, device ids row-major)
    named_sharding_of(sharding, ndim)  -> reshard.NamedSharding
    layout_of(sharding, shape, dtype)  -> reshard.Layout, for any jax.sharding.Sharding
    hlo_sharding_text(sharding, ndim)  -> the HLO sharding text exactly as JAX prints it

Errors follow the package's rule (see reshard's docstring): TypeError for a Python list or
other non-array, ValueError for bad input (a wrong source= hint included: inside jax.jit it
surfaces when the program compiles, as JAX's error carrying reshard's message),
NotImplementedError for what reshard does not handle yet.

Partial sums (issue 17): an array whose sharding has unreduced axes (JAX 0.10.2 makes them on
Explicit mesh axes, e.g. jnp.dot(..., out_sharding=P(..., unreduced={'x'}))) carries its
sharding in its type, so reshard(x, target) plans from it directly: a reduce-scatter over the
unreduced axes, shared among the replicas of the partial values where they have some, then
the move; XLA's own jax.sharding.reshard (an all-reduce, then a slice) where reshard has no
plan (uneven shapes, partial targets, another device order), except a target unreduced over
axes the source is not while the source is over axes the target is not: jax 0.10.2 aborts the
process on that pair, so it raises NotImplementedError. with_sharding_constraint takes
them as reshard does, explain shows both programs, and under jit a jax.sharding.reshard of
partial sums in the traced program is reshard's reduction.
"""
from __future__ import annotations

import functools

import jax
from jax._src.sharding_impls import UnspecifiedValue
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

from reshard import _jax_jit, _jax_jitted, _jax_op, _jax_plan
from reshard._jax_convert import hlo_sharding_text, layout_of, mesh_of, named_sharding_of
from reshard._jax_plan import Explanation, cache_info, clear_cache, planning_backend, set_cache_size
from reshard.audit import audit

__all__ = [
    "mesh_of", "named_sharding_of", "layout_of", "hlo_sharding_text", "reshard", "with_sharding_constraint",
    "jit", "explain", "Explanation", "cache_info", "clear_cache", "set_cache_size", "planning_backend", "audit",
]


def _explicit(sharding) -> bool:
    mesh = getattr(sharding, "mesh", None)
    return any(t == AxisType.Explicit for t in (getattr(mesh, "axis_types", ()) or ()))


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


def _fits(sharding, x, what: str):
    """A ValueError, as with_sharding_constraint's, where `sharding` has more dims than x."""
    if sharding is not None and hasattr(sharding, "check_compatible_aval"):
        try:
            sharding.check_compatible_aval(tuple(x.shape))
        except ValueError as e:
            raise ValueError("%s: %s" % (what, e)) from None
    return sharding


def _in_manual_region() -> bool:
    """Whether tracing is inside a shard_map body (some axis of the context mesh is Manual)."""
    from jax._src import mesh as mesh_lib
    return AxisType.Manual in tuple(getattr(mesh_lib.get_abstract_mesh(), "axis_types", ()) or ())


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _check_array(x, what="reshard"):
    if isinstance(x, (list, tuple, dict, str, bytes)) or x is None:
        # (with_sharding_constraint takes pytrees: this is one of its leaves.)
        hint = "" if what == "with_sharding_constraint" else \
            ", or use reshard.jax.with_sharding_constraint for a pytree of arrays"
        raise TypeError("%s: %s a Python %s, not an array; pass a jax.Array (jnp.asarray(x))%s"
                        % (what, "a leaf of x is" if hint == "" else "x is", type(x).__name__, hint))


def _mesh_hint(source):
    """A PartitionSpec target takes the context mesh (jax.set_mesh), else a NamedSharding source's."""
    mesh = getattr(source, "mesh", None)
    return None if mesh is None or isinstance(mesh, AbstractMesh) else mesh


def _auto(sharding):
    """The same sharding over the mesh with every axis Auto (the reshard op plans for Auto axes)."""
    if isinstance(sharding, NamedSharding) and _explicit(sharding):
        mesh = sharding.mesh
        return NamedSharding(mesh.update(axis_types=(AxisType.Auto,) * len(mesh.axis_names)), sharding.spec)
    return sharding


@functools.lru_cache(maxsize=256)
def _eager(target):
    return jax.jit(lambda a: reshard(a, target), out_shardings=target)


def reshard(x, target, *, source=None):
    """x (a jax.Array, or a traced value inside jax.jit) moved to the `target` sharding (a
    jax.sharding.Sharding, or a PartitionSpec under jax.set_mesh) by reshard's plan, or by XLA's own
    lowering where that receives no more bytes. The source is x's sharding, wherever it is decided;
    source= is an optional hint, and a wrong one is a ValueError."""
    _check_array(x)
    if not _is_tracer(x) and not isinstance(x, jax.Array):
        return jax.device_put(x, _as_sharding(target, "target"))  # host data: nothing to reshard
    if _is_tracer(x) and _in_manual_region():
        # A shard_map body: values are per device there, and the constraint is XLA's, over
        # shard_map's own mesh and axis types.
        return jax.lax.with_sharding_constraint(x, target)
    if _is_tracer(x) and _jax_jitted.jax_only():
        # reshard.jax.jit tracing jax.jit's own program, to compare: JAX's constraint or reshard.
        tgt = _as_sharding(target, "target", _mesh_hint(source))
        aval = getattr(jax.typeof(x), "sharding", None)
        if _explicit(aval) or _explicit(tgt) or _unreduced(aval):
            return jax.sharding.reshard(x, tgt)
        return jax.lax.with_sharding_constraint(x, tgt)
    hint = _mesh_hint(source)
    tgt = _fits(_as_sharding(target, "target", hint), x, "reshard: the target")
    if _unreduced(jax.typeof(x).sharding if _is_tracer(x) else getattr(x, "sharding", None)):
        return _reshard_partial_sums(x, tgt)
    src = None if source is None else _fits(_as_sharding(source, "source", getattr(tgt, "mesh", None)), x,
                                            "reshard: source=")
    if _is_tracer(x):
        aval_sharding = getattr(jax.typeof(x), "sharding", None)
        if _explicit(aval_sharding) or _explicit(tgt):
            return _reshard_explicit(x, tgt, src)
        return _jax_op.bind(x, tgt, source=src)
    if src is not None and not x.sharding.is_equivalent_to(src, x.ndim):
        raise ValueError("reshard: source= says %s, but x has %s" % (src, x.sharding))
    if tuple(x.sharding._device_assignment) != tuple(tgt._device_assignment):
        return jax.device_put(x, tgt)  # one jitted program runs on one device list
    if x.sharding.is_equivalent_to(tgt, x.ndim):
        return x
    if x.size == 0:  # no element moves; jax.jit's out_shardings gives empty arrays unreadable shards
        return jax.device_put(x, tgt)
    if _jax_plan._padded(x.shape, layout_of(tgt, x.shape).dim_tiles) != tuple(x.shape):
        raise ValueError("reshard: %s does not divide an array of shape %s evenly; JAX 0.10.2 holds such arrays "
                         "only inside jax.jit (call reshard there)" % (tgt, tuple(x.shape)))
    return _eager(tgt)(x)


def _unreduced(sharding) -> bool:
    return isinstance(sharding, NamedSharding) and bool(getattr(sharding.spec, "unreduced", None))


def _same_devices(src, tgt) -> bool:
    """Whether x's mesh is the target's: the same axes and, where x's mesh is concrete (eager) or
    a concrete mesh is set (jax.set_mesh), the same devices in the same order."""
    m = src.mesh
    if tuple(m.axis_names) != tuple(tgt.mesh.axis_names) or tuple(m.axis_sizes) != tuple(tgt.mesh.axis_sizes):
        return False
    if isinstance(m, AbstractMesh):
        from jax._src import mesh as mesh_lib  # the mesh jax.set_mesh set, also inside jax.jit
        m = mesh_lib.get_concrete_mesh()
        if m is None or getattr(m, "empty", False) or isinstance(m, AbstractMesh) or not m.axis_names:
            return False
    return [d.id for d in m.devices.flat] == [d.id for d in tgt.mesh.devices.flat]


def _reshard_partial_sums(x, tgt):
    """x holds partial sums: reduced and moved by reshard's plan, else by jax.sharding.reshard."""
    src = jax.typeof(x).sharding if _is_tracer(x) else x.sharding
    if _unreduced(tgt):
        only_in_source = set(src.spec.unreduced) - set(tgt.spec.unreduced)
        only_in_target = set(tgt.spec.unreduced) - set(src.spec.unreduced)
        if only_in_source and only_in_target:
            # jax 0.10.2's Shardy aborts the process on this pair (a failed CHECK in
            # explicit_reshards_util.cc; bench/jax_unreduced_targets.py): refuse it instead.
            raise NotImplementedError(
                "reshard: partial sums over %s into unreduced axes %s: jax 0.10.2 aborts on such a pair, and "
                "reshard.jax has no program into unreduced targets yet (`reshard plan` plans it: reduce, "
                "then route)" % (sorted(src.spec.unreduced), sorted(tgt.spec.unreduced)))
    program = None
    if isinstance(tgt, NamedSharding) and not _unreduced(tgt) and not isinstance(tgt.mesh, AbstractMesh) and \
            _same_devices(src, tgt):
        program, _ = _jax_plan.partial_sums_program(tuple(x.shape), x.dtype, src, tgt)
    if program is None:
        return jax.sharding.reshard(x, tgt)
    move, eager = _partial_sums_move(program, tgt)
    return move(x) if _is_tracer(x) else eager(x)


@functools.lru_cache(maxsize=128)
def _partial_sums_move(program, tgt):
    """The plan's program as a differentiable function, and it jitted for eager arrays. Its derivative is jax.sharding.reshard's
    (the transpose of a reduction from unreduced axes, as JAX defines it): shard_map's own
    transpose of the emitted program, with its checks off, would scale the cotangent by the
    unreduced axes' size."""
    @jax.custom_vjp
    def move(a):
        return program(a, tgt.mesh)

    def fwd(a):
        return move(a), a

    def bwd(a, g):
        _, vjp = jax.vjp(lambda b: jax.sharding.reshard(b, tgt), a)
        return vjp(g)

    move.defvjp(fwd, bwd)
    return move, jax.jit(move)


def _reshard_explicit(x, tgt, src):
    """Explicit mesh axes: the array's type carries its sharding. The op runs with the axes Auto
    (jax.sharding.auto_axes), and the result's type gets the target sharding."""
    auto_tgt = _auto(tgt)
    auto_src = None if src is None else _auto(src)
    if _explicit(tgt):
        return jax.sharding.auto_axes(lambda a: _jax_op.bind(a, auto_tgt, source=auto_src),
                                      out_sharding=tgt)(x)
    # An Explicit source, an Auto target: leave Explicit mode, then move.
    y = jax.sharding.auto_axes(lambda a: a, out_sharding=jax.typeof(x).sharding)(x)
    return _jax_op.bind(y, auto_tgt, source=auto_src)


def with_sharding_constraint(x, shardings):
    """jax.lax.with_sharding_constraint's signature and pytree rules (`shardings` is a Sharding,
    a PartitionSpec under jax.set_mesh, or a pytree prefix of x's structure of them), each leaf
    moved by reshard's op. Inside reshard.jax.jit a plain jax.lax.with_sharding_constraint does
    the same."""
    is_spec = lambda s: s is None or isinstance(s, (jax.sharding.Sharding, PartitionSpec))  # noqa: E731
    if is_spec(shardings):
        return jax.tree_util.tree_map(lambda leaf: _constrain(leaf, shardings), x)
    return jax.tree_util.tree_map(lambda s, sub: jax.tree_util.tree_map(lambda leaf: _constrain(leaf, s), sub),
                                  shardings, x, is_leaf=is_spec)


def _constrain(leaf, sharding):
    if sharding is None:
        return leaf
    _check_array(leaf, "with_sharding_constraint")
    entries = lambda spec: getattr(spec, "partitions", spec)  # noqa: E731 (a spec with unreduced axes raises when iterated)
    if isinstance(sharding, NamedSharding) and any(e is PartitionSpec.UNCONSTRAINED for e in entries(sharding.spec)):
        return jax.lax.with_sharding_constraint(leaf, sharding)  # a free dim: XLA's to choose
    if isinstance(sharding, PartitionSpec) and any(e is PartitionSpec.UNCONSTRAINED for e in entries(sharding)):
        return jax.lax.with_sharding_constraint(leaf, sharding)
    if isinstance(leaf, jax.Array) and not _is_tracer(leaf) and isinstance(sharding, jax.sharding.Sharding) and \
            set(leaf.sharding.device_set) != set(sharding.device_set):
        # As jax.lax.with_sharding_constraint: a constraint does not move an array to other devices
        # (reshard() does, as device_put).
        raise ValueError("with_sharding_constraint: received incompatible devices: the array is on %s, the "
                         "sharding on %s; use reshard.jax.reshard or jax.device_put to move it"
                         % (sorted(d.id for d in leaf.sharding.device_set),
                            sorted(d.id for d in sharding.device_set)))
    return reshard(leaf, sharding)


def jit(fun=None, /, **kwargs):
    """jax.jit(fun, **kwargs), with every with_sharding_constraint in the traced program (nested jit,
    scan/while/cond bodies, custom_jvp/custom_vjp primal functions, checkpoint, and the transposed
    program of a grad taken inside) made reshard's op, every jax.sharding.reshard on a mesh of
    Explicit axes made reshard.jax.reshard (its plan; for partial sums, its reduction), and the
    final move to out_shardings made by the op too. On the first call of each signature it
    compiles that program and jax.jit's own and runs the one that receives fewer bytes (the op is
    a barrier to sharding propagation, which can cost more elsewhere: _jax_jitted). Returns an
    object that behaves as jax.jit's (calls, .lower(), .trace(), .eval_shape(), .clear_cache());
    every argument of jax.jit behaves as there. Usable as a decorator, with or without arguments."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    if not callable(fun):  # as jax.jit does, when wrapping (not at the first call)
        raise TypeError("reshard.jax.jit: expected a function, got %s" % type(fun).__name__)
    out_shardings = kwargs.get("out_shardings", None)

    @functools.wraps(fun)
    def rewritten(*args, **kw):
        out = _jax_jit.call_rewritten(fun, args, kw)
        if out_shardings is not None and not isinstance(out_shardings, UnspecifiedValue):
            out = with_sharding_constraint(out, out_shardings)
        return out

    return _jax_jitted.Jitted(fun, rewritten, kwargs)


def explain(x, target, *, source=None) -> Explanation:
    """What XLA's with_sharding_constraint compiles to (its collectives and the bytes one device
    receives, from the compiled HLO) beside reshard's plan for the same case, and which one the
    reshard op uses. Both sides are compiled for the display even where the op's choice needed
    no comparison (proved=True). x: a jax.Array or a jax.ShapeDtypeStruct with a sharding (or any array-like
    with source=). print() it, or read its fields."""
    _check_array(x, "explain")
    tgt = _fits(_as_sharding(target, "target", _mesh_hint(source)), x, "explain: the target")
    if source is not None:
        src = _fits(_as_sharding(source, "source", getattr(tgt, "mesh", None)), x, "explain: source=")
    elif isinstance(getattr(x, "sharding", None), jax.sharding.Sharding) and not _is_tracer(x):
        src = x.sharding
    else:
        raise ValueError("explain: %s carries no sharding here; pass source=, or a jax.Array or "
                         "jax.ShapeDtypeStruct with a sharding" % type(x).__name__)
    if _unreduced(src):  # partial sums: reshard's reduction beside jax.sharding.reshard's
        if _unreduced(tgt) or not isinstance(tgt, NamedSharding):
            raise NotImplementedError("explain: partial sums into %s: reshard.jax moves partial sums only to a "
                                      "NamedSharding with no unreduced axes" % (tgt,))
        return _jax_plan.partial_sums_explanation(tuple(x.shape), x.dtype, src, tgt, _same_devices(src, tgt))
    return _jax_plan.decision(x.shape, x.dtype, _auto(src), _auto(tgt)).explain_both()

