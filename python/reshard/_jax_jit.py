"""reshard.jax.jit's rewrite: the traced program with every with_sharding_constraint swapped for
the reshard op, every jax.sharding.reshard on a mesh of Explicit axes made reshard.jax.reshard
(its plan where XLA's lowering receives more; for partial sums, reshard's reduction), and nothing
else changed.

The function is traced to a jaxpr (under the caller's jax.jit trace, so shapes, dtypes and
shardings are the ones jax.jit sees), then evaluated equation by equation into that trace:
each `sharding_constraint` equation binds reshard_p with the same parameters, every other
equation binds its own primitive with its own parameters. Parameters that hold jaxprs (nested
jit, scan, while and cond bodies, custom_jvp/custom_vjp primal functions, checkpoint) are
rewritten the same way first, when they contain a constraint. What the trace of `grad` puts in
the program (the transposed constraints) is rewritten like the rest; a `grad` taken outside
reshard.jax.jit differentiates the reshard op, whose transpose is the reshard op again.

Left as they are: constraints on the result of an op whose partitioning moves data along the
dims it touches (rev, pad, slice, concatenate, gather, sort, cumulative and windowed ops: see
_FOLDING_PRODUCERS), where with_sharding_constraint's target propagates back into the op and
XLA folds the change of layout into its movement; on a contraction's result (a dot, directly or
through elementwise ops: _Contraction), which XLA partitions to produce the target itself; on
values made only from smaller ones (_Expansion); shard_map bodies (their values are per-device, where a sharding constraint
means something else) and the backward functions of custom_vjp, which JAX traces only when it
differentiates (an open item in the README).
"""
from __future__ import annotations

from typing import Any

import jax
from jax._src import core, pjit, source_info_util
from jax._src import linear_util as lu
from jax._src.interpreters import partial_eval as pe

from jax.sharding import AbstractMesh, AxisType, NamedSharding

from reshard import _jax_op

__all__ = ["call_rewritten", "rewrite_closed_jaxpr"]

_SKIP = frozenset({"shard_map"})


def _contains_constraint(jaxpr: core.Jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive is pjit.sharding_constraint_p or eqn.primitive is pjit.reshard_p:
            return True
        if eqn.primitive.name in _SKIP:
            continue
        for sub in _sub_jaxprs(eqn.params):
            if _contains_constraint(sub):
                return True
    return False


def _sub_jaxprs(params):
    for v in params.values():
        for item in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(item, core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, core.Jaxpr):
                yield item


# Producers whose partitioning moves data along the dims they touch (a reversal, a
# shift, a window, a gather): with_sharding_constraint's target propagates back into
# them and XLA folds the change of layout into that movement, which a barrier after
# them cannot do. A constraint on their result stays XLA's (measured: a constraint
# after jnp.flip of a sharded dim took 1.5x-2.5x XLA's bytes as the op).
_FOLDING_PRODUCERS = frozenset({
    "rev", "pad", "slice", "dynamic_slice", "dynamic_update_slice", "concatenate", "gather", "scatter",
    "scatter-add", "scatter_add", "sort", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp",
    "reduce_window", "reduce_window_sum", "select_and_scatter_add", "conv_general_dilated",
})


_CALLS = ("jit", "pjit", "closed_call", "core_call")  # equations whose "jaxpr" is a called function


def _made_by(eqn, index: int) -> str:
    """The primitive that makes output `index` of `eqn`, looking inside calls (jnp functions are
    jitted: jnp.flip is a `jit` whose body ends in `rev`)."""
    for _ in range(16):
        inner = eqn.params.get("jaxpr") if eqn.primitive.name in _CALLS else None
        if inner is None:
            return eqn.primitive.name
        body = inner.jaxpr if isinstance(inner, core.ClosedJaxpr) else inner
        out = body.outvars[index]
        found = next(((e, e.outvars.index(out)) for e in body.eqns if out in e.outvars), None)
        if found is None:
            return eqn.primitive.name
        eqn, index = found
    return eqn.primitive.name


def _swappable(params, producer) -> bool:
    return params.get("layout") is None and producer not in _FOLDING_PRODUCERS



def _size(v):
    """The number of elements of v, or None where a dim is symbolic."""
    shape = getattr(getattr(v, "aval", None), "shape", ())
    n = 1
    for e in shape:
        if not isinstance(e, int):
            return None
        n *= e
    return n


def _broadcasts_to(v, out_shape) -> bool:
    """Whether v is an operand an elementwise op broadcasts to out_shape: each dim the result's, or 1."""
    shape = tuple(getattr(v.aval, "shape", ()))
    return len(shape) == len(out_shape) and all(a in (b, 1) for a, b in zip(shape, out_shape))


def _called(eqn, bodies: dict):
    """For a call (jit, closed_call, ...): its body, the body's producer map (var -> (equation,
    output), cached in `bodies` by the body's id), and its invars mapped to the call's operands;
    None for any other equation."""
    inner = eqn.params.get("jaxpr") if eqn.primitive.name in _CALLS else None
    if inner is None:
        return None
    body = inner.jaxpr if isinstance(inner, core.ClosedJaxpr) else inner
    producer = bodies.get(id(body))
    if producer is None:
        producer = {v: (e, i) for e in body.eqns for i, v in enumerate(e.outvars)}
        bodies[id(body)] = producer
    return body, producer, dict(zip(body.invars, eqn.invars))


class _Expansion:
    """Whether a var is made, through ops that keep every element where it is (elementwise ops on
    operands that broadcast, converts, reshapes, transposes), only from values smaller than it:
    broadcasts, tiles, iotas, constants. Then with_sharding_constraint's target propagates back
    through those ops and XLA moves the small values (or none) and expands them in place, where
    the op, a barrier after them, moves the expanded array (measured: 2.5x to 20x XLA's bytes
    after broadcast_to, tile, repeat, an outer product, iota + x).

    One per evaluated jaxpr: `producer` maps its vars to (equation, output) as they are made.
    Each var is walked once per call site (memoized: a value used as several operands is not
    walked again), and the walk stops at _MAX_DEPTH nested vars, answering False (the op is kept,
    as it is for a value from an argument)."""

    _MAX_DEPTH = 64

    def __init__(self, producer):
        self._producer = producer
        self._memo: dict = {}
        self._bodies: dict = {}  # id(body) -> its producer map
        self._depth = 0

    def __call__(self, var) -> bool:
        return self._walk(var, (), self._producer, None)

    def _walk(self, var, site, producer, outer) -> bool:
        if isinstance(var, core.Literal):
            return True
        key = (site, var)
        if key in self._memo:
            return self._memo[key]
        if self._depth >= self._MAX_DEPTH:
            return False
        self._depth += 1
        try:
            found = self._made(var, site, producer, outer)
        finally:
            self._depth -= 1
        self._memo[key] = found
        return found

    def _made(self, var, site, producer, outer) -> bool:
        found = producer.get(var)
        if found is None:  # an input of this jaxpr: its call site's operand, or not expanded
            return outer(var) if outer is not None else False
        eqn, index = found
        name = eqn.primitive.name
        called = _called(eqn, self._bodies)
        if called is not None:  # jnp's functions are jitted: look inside
            body, inner_producer, into = called
            return self._walk(body.outvars[index], site + (id(eqn),), inner_producer,
                              lambda v: v in into and self._walk(into[v], site, producer, outer))
        if name == "iota":
            return True
        sizes = {}
        for v in eqn.invars:
            if not isinstance(v, core.Literal):
                n = _size(v)
                if n is None:
                    return False  # symbolic dims: not judged
                sizes[v] = n
        out = eqn.outvars[index]
        out_size = _size(out)
        if out_size is None:
            return False
        arrays = [v for v, n in sizes.items() if n > 1]
        # An operand smaller than the result is expanded by the op itself; one as large, if its own
        # producers expand it.
        smaller_or_expanded = lambda v: sizes[v] < out_size or self._walk(v, site, producer, outer)  # noqa: E731
        if name in ("broadcast_in_dim", "tile"):
            return all(smaller_or_expanded(v) for v in arrays)
        out_shape = tuple(getattr(out.aval, "shape", ()))

        keeps = name in ("reshape", "transpose", "squeeze", "expand_dims", "convert_element_type", "copy",
                         "reduce_precision") or all(_broadcasts_to(v, out_shape) for v in arrays)
        if len(eqn.outvars) != 1 or not keeps or name in _FOLDING_PRODUCERS:
            return False
        return all(smaller_or_expanded(v) for v in arrays)


# Ops that contract operands into their result: XLA partitions them to produce the layout a
# constraint on their result asks for (the target propagates back into the op), often without
# moving the result at all; the op, a barrier after them, lets XLA partition the contraction
# from its operands first and then moves its result (measured: a constraint after an einsum
# took up to 4x XLA's bytes as the op, 27 of 45 random einsum + constraint programs more).
_CONTRACTIONS = frozenset({"dot_general", "conv_general_dilated", "ragged_dot", "ragged_dot_general"})


class _Contraction:
    """Whether a var is a contraction's result, directly or through ops that keep every element
    (elementwise ops whose operands broadcast to the result, converts, copies, transposes) and
    whose other operands as large as the result are contractions' results too, looking inside
    called functions (jnp.einsum's transposed result, a jitted layer): the constraint's target
    propagates back through those ops into the contractions. Memoized per call site and var;
    at most _MAX_DEPTH ops deep (then not: the op is kept)."""

    _MAX_DEPTH = 64

    def __init__(self, producer):
        self._producer = producer
        self._memo: dict = {}
        self._bodies: dict = {}  # id(body) -> its producer map

    def __call__(self, var) -> bool:
        return self._walk(var, (), self._producer, None, 0)

    def _walk(self, var, site, producer, outer, depth) -> bool:
        if isinstance(var, core.Literal) or depth >= self._MAX_DEPTH:
            return False
        key = (site, var)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # (a var is made before it is used: no cycle, but be safe)
        answer = self._made(var, site, producer, outer, depth)
        self._memo[key] = answer
        return answer

    def _made(self, var, site, producer, outer, depth) -> bool:
        found = producer.get(var)
        if found is None:  # an input of this jaxpr: its call site's operand, or not a contraction's
            return outer(var, depth) if outer is not None else False
        eqn, index = found
        name = eqn.primitive.name
        if name in _CONTRACTIONS:
            return True
        called = _called(eqn, self._bodies)
        if called is not None:
            body, inner_producer, into = called
            return self._walk(body.outvars[index], site + (id(eqn),), inner_producer,
                              lambda v, d: v in into and self._walk(into[v], site, producer, outer, d + 1), depth + 1)
        if len(eqn.outvars) != 1 or name in _FOLDING_PRODUCERS:
            return False
        out_shape = tuple(getattr(eqn.outvars[0].aval, "shape", ()))
        arrays = [v for v in eqn.invars if not isinstance(v, core.Literal)]

        keeps = name in ("convert_element_type", "copy", "reduce_precision", "transpose") or (
            bool(arrays) and all(_broadcasts_to(v, out_shape) for v in arrays))
        if not keeps:
            return False
        # Every operand as large as the result a contraction's too (x @ w + b, not x + y @ w: x,
        # an argument, would have to move, and XLA rematerializes it).
        size = _size(eqn.outvars[0])
        same = [v for v in arrays if size is not None and _size(v) == size]
        return bool(same) and all(self._walk(v, site, producer, outer, depth + 1) for v in same)


def _unreduced(sharding) -> bool:
    return isinstance(sharding, NamedSharding) and bool(getattr(sharding.spec, "unreduced", None))


def _reduced(sharding) -> bool:
    """Reduced axes (a cotangent of partial sums, in a transposed program): JAX's to move."""
    return isinstance(sharding, NamedSharding) and bool(getattr(sharding.spec, "reduced", None))


def _reshard(x, params):
    """A jax.sharding.reshard (reshard_p) on a mesh whose axes are all Explicit, as
    reshard.jax.reshard over the concrete mesh the program runs on (the one reshard_p names, else
    the one jax.set_mesh set): reshard's plan where XLA's lowering would receive more (XLA
    rematerializes the canonical case here too), and for partial sums (unreduced axes) reshard's
    reduction. reshard_p as it was everywhere else: a cast between meshes (auto_axes and
    explicit_axes move values in and out of their regions with reshard_p, rj.reshard among
    them), Auto or Manual axes, no concrete mesh or one other than the target's, reduced axes
    on either side or unreduced ones in the target, and values that are not traced."""
    from jax._src import mesh as mesh_lib

    from reshard import jax as rj  # reshard.jax imports this module
    dst = params["dst_sharding"]
    src = getattr(jax.typeof(x), "sharding", None)
    mesh = params.get("concrete_mesh") or mesh_lib.get_concrete_mesh()
    usable = (isinstance(x, core.Tracer) and isinstance(dst, NamedSharding) and isinstance(src, NamedSharding)
              and not _unreduced(dst) and not _reduced(dst) and not _reduced(src)
              and src.mesh == dst.mesh and dst.mesh.axis_names
              and all(t == AxisType.Explicit for t in (dst.mesh.axis_types or ()))
              and mesh is not None and not getattr(mesh, "empty", False) and not isinstance(mesh, AbstractMesh)
              and mesh.abstract_mesh == dst.mesh)
    if not usable:
        return pjit.reshard_p.bind(x, **params)
    return rj.reshard(x, NamedSharding(mesh, dst.spec))


def _eval(jaxpr: core.Jaxpr, consts, *args) -> list[Any]:
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, core.Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    producer: dict = {}  # var -> (the equation that made it, which of its outputs), in this jaxpr
    expanded = _Expansion(producer)
    contracted = _Contraction(producer)
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
        with source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack), eqn.ctx.manager:
            source = producer.get(eqn.invars[0]) if eqn.invars and not isinstance(eqn.invars[0], core.Literal) else None
            made_by = _made_by(*source) if source is not None else None
            if eqn.primitive is pjit.sharding_constraint_p and _swappable(eqn.params, made_by) and \
                    not expanded(eqn.invars[0]) and not contracted(eqn.invars[0]):
                outs = [_jax_op.bind(*invals, **eqn.params)]
            elif eqn.primitive is pjit.reshard_p:
                outs = [_reshard(invals[0], eqn.params)]
            else:
                params = _rewrite_params(eqn.primitive, eqn.params)
                ans = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(params))
                outs = ans if eqn.primitive.multiple_results else [ans]
        for v, o in zip(eqn.outvars, outs):
            if not isinstance(v, core.DropVar):
                env[v] = o
                producer[v] = (eqn, eqn.outvars.index(v))
    return [read(v) for v in jaxpr.outvars]


def _rewrite_params(primitive, params):
    if primitive.name in _SKIP:
        return params
    new = None
    for k, v in params.items():
        r = _rewrite_value(v)
        if r is not v:
            new = dict(params) if new is None else new
            new[k] = r
    return params if new is None else new


def _rewrite_value(v):
    if isinstance(v, core.ClosedJaxpr):
        return rewrite_closed_jaxpr(v) if _contains_constraint(v.jaxpr) else v
    if isinstance(v, core.Jaxpr):
        return _rewrite_open_jaxpr(v) if _contains_constraint(v) else v
    if isinstance(v, tuple) and any(isinstance(i, (core.ClosedJaxpr, core.Jaxpr)) for i in v):
        items = tuple(_rewrite_value(i) for i in v)
        return v if all(a is b for a, b in zip(items, v)) else items
    return v


def _trace(jaxpr: core.Jaxpr, consts, in_avals):
    fun = lu.wrap_init(lambda *a: _eval(jaxpr, consts, *a), debug_info=jaxpr.debug_info)
    new, _, new_consts = pe.trace_to_jaxpr_dynamic(fun, in_avals)
    return new, new_consts


def rewrite_closed_jaxpr(closed: core.ClosedJaxpr) -> core.ClosedJaxpr:
    """The closed jaxpr with each sharding constraint, at any depth, the reshard op."""
    jaxpr, consts = _trace(closed.jaxpr, closed.consts, closed.in_avals)
    return core.ClosedJaxpr(jaxpr, consts)


def _rewrite_open_jaxpr(jaxpr: core.Jaxpr) -> core.Jaxpr:
    # Open jaxprs (checkpoint's) take no constants; a rewrite that would need some (the body
    # closed over arrays) leaves the jaxpr as it was.
    if jaxpr.constvars:
        return jaxpr
    new, consts = _trace(jaxpr, [], [v.aval for v in jaxpr.invars])
    return jaxpr if consts else new


def call_rewritten(fun, args, kwargs):
    """fun(*args, **kwargs) inside a jax.jit trace, with its sharding constraints swapped for the
    reshard op. Leaves that are not tracers (static arguments) stay Python values."""
    flat, tree = jax.tree_util.tree_flatten((args, kwargs))
    dyn = [i for i, leaf in enumerate(flat) if isinstance(leaf, core.Tracer)]

    def traced(*values):
        leaves = list(flat)
        for i, v in zip(dyn, values):
            leaves[i] = v
        a, k = jax.tree_util.tree_unflatten(tree, leaves)
        return fun(*a, **k)

    # Traced once: the jaxpr is evaluated into the caller's trace, rewritten or not.
    closed, out_shape = jax.make_jaxpr(traced, return_shape=True)(*[flat[i] for i in dyn])
    outs = _eval(closed.jaxpr, closed.consts, *[flat[i] for i in dyn])
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), outs)
