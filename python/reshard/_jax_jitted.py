"""reshard.jax.jit's program-level choice: the rewritten program (every with_sharding_constraint
reshard's op, _jax_jit) or jax.jit's own, whichever receives fewer bytes once compiled.

Why: each op is never worse than XLA on its own move (_jax_plan), but an op is a barrier to
sharding propagation. With with_sharding_constraint, the target propagates back into the
computation that makes the value: x * y is computed in the target layout, each operand moved
there. Behind the op, that computation gets the layout its operands' propagation picks, and
where the operands disagree XLA may gather one whole before the op moves the result (x on
P(('a','b')), y on P(('b','a')): 3584 B against jax.jit's 256 B). Only the compiled program says
which way is cheaper, so both are compiled, once per call signature, and the one whose devices
receive fewer bytes through their collectives (reshard.hlo_bytes) runs; a tie keeps reshard's.

XLA logs what it rematerializes while compiling jax's program; those lines are shown only where
jax's program is the one chosen. Jax's program is traced with the same function under a flag
(jax_only(), a JAX config state, so part of JAX's trace context and jit cache key: jitted helpers
are traced again under it) that makes reshard.jax.reshard and with_sharding_constraint bind JAX's
own constraint or reshard, so a function written with the drop-in compiles to what jax.jit of
jax.lax.with_sharding_constraint would. An all-reduce counts as a ring moves it (hlo_bytes'
all_reduce="ring", reshard's cost model).

Called with traced values (inside another jit, grad, vmap), there are no shardings to compare:
the rewritten program is traced into the caller's, as the caller's own choice decides above
(jax's when the caller is tracing jax's program).
"""
from __future__ import annotations

import collections
import functools
import inspect
import sys
import threading
from typing import Any, Callable

import jax
import numpy as np
from jax._src import api_util, config, core

from reshard import hlo_bytes
from reshard.audit import _compile_capturing_stderr

__all__ = ["Jitted", "jax_only"]

# A JAX config state, part of JAX's trace context and jit cache key: a jitted helper the function
# calls is traced again for jax's program, not taken from the cache with reshard's op inside (a
# thread-local flag of our own would be invisible to those caches).
_JAX_ONLY = config.bool_state(
    name="reshard_jit_tracing_jax_program", default=False,
    help="reshard.jax.jit is tracing jax.jit's own program, for its comparison (internal)",
    include_in_jit_key=True, include_in_trace_context=True)


_MAX_CHOICES = 1024


def jax_only() -> bool:
    """Whether the program being traced is jax.jit's own, for the comparison."""
    return bool(_JAX_ONLY.value)


class Jitted:
    """What reshard.jax.jit returns: called, lowered or traced like jax.jit's result."""

    def __init__(self, fun: Callable, rewritten: Callable, kwargs: dict[str, Any]):
        functools.update_wrapper(self, fun)
        self._fun = fun

        @functools.wraps(fun)
        def plain(*args, **kw):
            with _JAX_ONLY(True):
                return fun(*args, **kw)

        self._ours = jax.jit(rewritten, **kwargs)
        self._jax = jax.jit(plain, **kwargs)
        # Per call signature, the least recently used out past _MAX_CHOICES (a choice holds its
        # static arguments and shardings).
        self._choice: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        # Static arguments are keyed by value, as jax.jit keys them (their positions and names
        # resolved by JAX's own rule); the others by type, shape, dtype and sharding (a Python
        # scalar's value does not change the program).
        nums, names = kwargs.get("static_argnums"), kwargs.get("static_argnames")
        try:
            nums, names = api_util.infer_argnums_and_argnames(inspect.signature(fun), nums, names)
        except (TypeError, ValueError):
            nums = () if nums is None else (nums,) if isinstance(nums, int) else tuple(nums)
            names = () if names is None else (names,) if isinstance(names, str) else tuple(names)
        self._static_nums, self._static_names = tuple(int(i) for i in nums), frozenset(names)

    def __get__(self, obj, objtype=None):
        return self if obj is None else _Bound(self, obj)

    def _pick(self, args, kwargs):
        key = self._key(args, kwargs)
        if key is None:  # traced values: the caller's choice
            return self._jax if jax_only() else self._ours
        try:
            hash(key)
        except TypeError:  # an unhashable static argument: jax.jit's own error follows
            return self._ours
        with self._lock:
            chosen = self._choice.get(key)
            if chosen is not None:
                self._choice.move_to_end(key)
        if chosen is None:
            chosen = self._compare(args, kwargs)
            with self._lock:
                self._choice[key] = chosen
                while len(self._choice) > _MAX_CHOICES:
                    self._choice.popitem(last=False)
        return chosen

    def _compare(self, args, kwargs):
        # An all-reduce counted as a ring moves it, 2(k-1)/k of its input (reshard's cost model):
        # counted as its input alone, a reduce-scatter and all-gather at the bound would lose to
        # the all-reduce and slice that moves more.
        def received(text):
            return hlo_bytes.recv_bytes(text, all_reduce="ring")

        ours = received(self._ours.lower(*args, **kwargs).compile().as_text())
        if ours == 0:
            return self._ours  # nothing received: no program receives less
        # XLA's log of compiling jax's program ("Involuntary full rematerialization ...") is
        # shown only where that program is the one that runs; its other lines (and anything
        # other threads wrote meanwhile) are shown either way.
        try:
            compiled, log = _compile_capturing_stderr(self._jax.lower(*args, **kwargs), emit=False)
        except Exception:  # noqa: BLE001 (jax's own program failing where ours compiles: ours it is)
            return self._ours
        theirs = received(compiled.as_text())
        chosen = self._ours if ours <= theirs else self._jax
        if chosen is self._ours:
            log = "".join(line for line in log.splitlines(keepends=True)
                          if "Involuntary full rematerialization" not in line)
        if log:
            sys.stderr.write(log)
            sys.stderr.flush()
        return chosen

    def _key(self, args, kwargs):
        """The call's signature, or None where a value is traced (no shardings to compare)."""
        traced = False

        def leaf_key(leaf):
            nonlocal traced
            if isinstance(leaf, core.Tracer):
                traced = True
                return None
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

        n = len(args)
        static = {i + n if i < 0 else i for i in self._static_nums}
        key = (tuple(arg_key(i in static, a) for i, a in enumerate(args)),
               tuple(sorted((k, arg_key(k in self._static_names, v)) for k, v in kwargs.items())))
        return None if traced else key

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


class _Bound:
    """A Jitted used as a method: called, lowered and traced with its object first, as jax.jit's
    bound methods are."""

    def __init__(self, jitted: Jitted, obj):
        self._jitted, self._obj = jitted, obj
        functools.update_wrapper(self, jitted._fun)

    def __call__(self, *args, **kwargs):
        return self._jitted(self._obj, *args, **kwargs)

    def lower(self, *args, **kwargs):
        return self._jitted.lower(self._obj, *args, **kwargs)

    def trace(self, *args, **kwargs):
        return self._jitted.trace(self._obj, *args, **kwargs)

    def eval_shape(self, *args, **kwargs):
        return self._jitted.eval_shape(self._obj, *args, **kwargs)
