"""reshard.jax.jit's program-level choice: the rewritten program (every with_sharding_constraint
reshard's op, _jax_jit) or jax.jit's own, whichever receives fewer bytes once compiled.

Why: each op is never worse than XLA on its own move (_jax_plan), but an op is a barrier to
sharding propagation. With with_sharding_constraint, the target propagates back into the
computation that makes the value: x * y is computed in the target layout, each operand moved
there. Behind the op, that computation gets the layout its operands' propagation picks, and
where the operands disagree XLA may gather one whole before the op moves the result (x on
P(('a','b')), y on P(('b','a')): 3584 B against jax.jit's 256 B). Only the compiled program says
which way is cheaper, so both are compiled, once per call signature, and the one whose devices
receive fewer bytes through their collectives (reshard.hlo_bytes; an all-reduce as a ring moves
it, 2(k-1)/k of its input, as reshard's cost model counts it) runs; a tie keeps reshard's.

XLA logs what it rematerializes while compiling jax's program; that log is shown only where
jax's program is the one chosen. Jax's program is traced with the same function under a flag (jax_only()) that makes
reshard.jax.reshard and with_sharding_constraint bind JAX's own constraint or reshard, so a
function written with the drop-in compiles to exactly what jax.jit of
jax.lax.with_sharding_constraint would.

Called with traced values (inside another jit, grad, vmap), there are no shardings to compare:
the rewritten program is traced into the caller's, as the caller's own choice decides above
(jax's when the caller is tracing jax's program).
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
from typing import Any, Callable

import jax
import numpy as np
from jax._src import core

from reshard import hlo_bytes
from reshard.audit import _compile_capturing_stderr

__all__ = ["Jitted", "jax_only"]

_state = threading.local()


def jax_only() -> bool:
    """Whether the program being traced is jax.jit's own, for the comparison."""
    return getattr(_state, "jax_only", 0) > 0


class _JaxOnly:
    def __enter__(self):
        _state.jax_only = getattr(_state, "jax_only", 0) + 1

    def __exit__(self, *exc):
        _state.jax_only -= 1


def _normalized(nums, n: int) -> set[int]:
    if nums is None:
        return set()
    nums = (nums,) if isinstance(nums, int) else tuple(nums)
    return {i + n if i < 0 else i for i in nums}


class Jitted:
    """What reshard.jax.jit returns: called, lowered or traced like jax.jit's result."""

    def __init__(self, fun: Callable, rewritten: Callable, kwargs: dict[str, Any]):
        functools.update_wrapper(self, fun)
        self._fun = fun

        @functools.wraps(fun)
        def plain(*args, **kw):
            with _JaxOnly():
                return fun(*args, **kw)

        self._ours = jax.jit(rewritten, **kwargs)
        self._jax = jax.jit(plain, **kwargs)
        self._choice: dict = {}
        self._lock = threading.Lock()
        # Static arguments are keyed by value, as jax.jit keys them; the others by type,
        # shape, dtype and sharding (a Python scalar's value does not change the program).
        try:
            params = list(inspect.signature(fun).parameters)
        except (TypeError, ValueError):
            params = []
        names = kwargs.get("static_argnames")
        names = set() if names is None else {names} if isinstance(names, str) else set(names)
        self._static_nums = _normalized(kwargs.get("static_argnums"), len(params))
        self._static_nums |= {i for i, p in enumerate(params) if p in names}
        self._static_names = names | {params[i] for i in self._static_nums if i < len(params)}

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def _pick(self, args, kwargs):
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        if any(isinstance(leaf, core.Tracer) for leaf in leaves):
            return self._jax if jax_only() else self._ours
        key = self._key(args, kwargs)
        try:
            hash(key)
        except TypeError:  # an unhashable static argument: jax.jit's own error follows
            return self._ours
        with self._lock:
            chosen = self._choice.get(key)
        if chosen is None:
            chosen = self._compare(args, kwargs)
            with self._lock:
                self._choice[key] = chosen
        return chosen

    def _compare(self, args, kwargs):
        ours = hlo_bytes.recv_bytes(self._ours.lower(*args, **kwargs).compile().as_text(), all_reduce="ring")
        if ours == 0:
            return self._ours  # nothing received: no program receives less
        # XLA's log of compiling jax's program ("Involuntary full rematerialization ...") is
        # shown only where that program is the one that runs.
        try:
            compiled, log = _compile_capturing_stderr(self._jax.lower(*args, **kwargs), emit=False)
        except Exception:  # noqa: BLE001 (jax's own program failing where ours compiles: ours it is)
            return self._ours
        if hlo_bytes.recv_bytes(compiled.as_text(), all_reduce="ring") >= ours:
            return self._ours
        if log:
            sys.stderr.write(log)
            sys.stderr.flush()
        return self._jax

    def _key(self, args, kwargs):
        def leaf_key(leaf):
            if isinstance(leaf, jax.Array):
                return ("a", leaf.shape, leaf.dtype, leaf.sharding, bool(getattr(leaf, "weak_type", False)))
            if isinstance(leaf, jax.ShapeDtypeStruct):
                return ("s", leaf.shape, leaf.dtype, leaf.sharding, bool(getattr(leaf, "weak_type", False)))
            if isinstance(leaf, (np.ndarray, np.generic)):
                return ("n", leaf.shape, leaf.dtype)
            return ("p", type(leaf))  # a Python scalar or other leaf jax.jit traces

        def arg_key(static, a):
            if static:
                return ("static", a)
            leaves, tree = jax.tree_util.tree_flatten(a)
            return (tree, tuple(leaf_key(leaf) for leaf in leaves))

        return (tuple(arg_key(i in self._static_nums, a) for i, a in enumerate(args)),
                tuple(sorted((k, arg_key(k in self._static_names, v)) for k, v in kwargs.items())))

    def __call__(self, *args, **kwargs):
        return self._pick(args, kwargs)(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self._pick(args, kwargs).lower(*args, **kwargs)

    def trace(self, *args, **kwargs):
        return self._pick(args, kwargs).trace(*args, **kwargs)

    def eval_shape(self, *args, **kwargs):
        return self._ours.eval_shape(*args, **kwargs)

    def clear_cache(self):
        with self._lock:
            self._choice.clear()
        self._ours.clear_cache()
        self._jax.clear_cache()

    def __repr__(self):
        return "reshard.jax.jit(%r)" % (self._fun,)
