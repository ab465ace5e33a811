"""The reshard op: a JAX primitive whose move the compiler partitions with reshard's plan.

    y = reshard_p.bind(x, sharding=target, layout=None, context_mesh=..., unconstrained_dims=frozenset(),
                       source=None)

Its parameters are with_sharding_constraint's (so reshard.jax.jit can swap one for the other
eqn by eqn) plus `source`, an optional hint checked against what the compiler chose. Its value
is x; its result has the target sharding, as with_sharding_constraint's has.

Why a primitive over jax.experimental.custom_partitioning: inside jax.jit the operand's sharding
is decided after tracing, by sharding propagation. custom_partitioning's partition callback runs
inside XLA's SPMD partitioner, where that sharding is known: it receives the operand's sharding
as propagation chose it, plans there with the C++ planner (reshard/_jax_plan.py, cached), and
returns the plan's per-device program. custom_partitioning has no differentiation or batching
rules of its own, so the primitive carries them and lowers through it:

- lowering: the custom-partitioned call, then the target as a sharding constraint (which pins
  the result's sharding for propagation, as with_sharding_constraint does). The call's Shardy
  rule gives the operand and the result separate factors, so no sharding propagates through it:
  the operand keeps its producer's sharding, as with with_sharding_constraint. Where the plan is
  not used (decision "xla"), the call asks for its operand in the target sharding and is the
  identity: XLA's own lowering does the move.
- jvp and transpose: linear, as with_sharding_constraint (the cotangent is constrained to the
  target sharding, not moved back to the source).
- vmap: the batch dim is replicated (or sharded over spmd_axis_name) in the target.
- impl (outside jit): the primitive compiled alone for its operand's sharding.

Falls back to with_sharding_constraint's own lowering, which moves the same values, for what
the partitioner cannot take: layouts, unconstrained dims, manual (shard_map) contexts, one device.
"""
from __future__ import annotations

from functools import partial

import jax
from jax._src import core, dispatch, pjit, sharding_impls
from jax._src.interpreters import ad, batching, mlir
from jax._src.stages import SourceInfo
from jax.experimental.custom_partitioning import SdyShardingRule, custom_partitioning
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from reshard import _jax_plan

__all__ = ["reshard_p", "bind"]

reshard_p = core.Primitive("reshard")


def bind(x, sharding, *, context_mesh=None, layout=None, unconstrained_dims=frozenset(), source=None):
    """reshard_p on one array; PRNG key arrays move as their key data (one more trailing dim)."""
    if context_mesh is None:
        context_mesh = _constraint_context_mesh()
    sharding, source = _on_devices(sharding), _on_devices(source)
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) and isinstance(sharding, NamedSharding):
        impl = jax.random.key_impl(x)
        data = jax.random.key_data(x)
        extra = data.ndim - x.ndim
        widen = lambda s: None if s is None else s.update(spec=_padded_spec(s.spec, x.ndim) + (None,) * extra)  # noqa: E731
        out = bind(data, widen(sharding), context_mesh=context_mesh, layout=layout,
                   unconstrained_dims=unconstrained_dims, source=widen(source))
        return jax.random.wrap_key_data(out, impl=impl)
    return reshard_p.bind(x, sharding=sharding, layout=layout, context_mesh=context_mesh,
                          unconstrained_dims=frozenset(unconstrained_dims), source=source)


def _on_devices(sharding):
    """A NamedSharding over an AbstractMesh (a PartitionSpec under jax.set_mesh) over the concrete
    context mesh of the same axes: the lowering takes the program's devices from the target."""
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh):
        from jax._src import mesh as mesh_lib
        concrete = mesh_lib.get_concrete_mesh()
        if not concrete.empty and concrete.abstract_mesh == sharding.mesh:
            return NamedSharding(concrete, sharding.spec)
    return sharding


def _padded_spec(spec, ndim):
    return tuple(spec) + (None,) * (ndim - len(spec))


def _constraint_context_mesh():
    """The context mesh with_sharding_constraint records in its equation (the abstract mesh of
    jax.set_mesh, else the legacy `with mesh:` one), for the same parameter of the op."""
    from jax._src import mesh as mesh_lib
    if not mesh_lib.get_concrete_mesh().empty or not mesh_lib.get_abstract_mesh().empty:
        return mesh_lib.get_abstract_mesh()
    return mesh_lib.thread_resources.env.physical_mesh


# ---- the custom-partitioned call

def _rule(target, source, mesh, operand_types, result_types):
    """Separate factors for the operand's dims and the result's: propagation does not pass through."""
    del target, source, mesh, result_types
    rank = len(operand_types[0].shape)
    return SdyShardingRule(operand_mappings=(tuple("i%d" % d for d in range(rank)),),
                           result_mappings=(tuple("o%d" % d for d in range(rank)),))


def _concrete(sharding, mesh, devices, ndim):
    """The target over the program's devices: a NamedSharding on an AbstractMesh takes the
    program's mesh (its axes are the same, by JAX's own check)."""
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh):
        if not mesh.empty and mesh.axis_names == sharding.mesh.axis_names:
            return NamedSharding(mesh, sharding.spec)
        return sharding_impls.GSPMDSharding(devices, sharding._to_xla_hlo_sharding(ndim))
    return sharding


def _infer(target, source, mesh, arg_shapes, result_shape):
    del source
    devices = tuple(mesh.devices.flat) if not mesh.empty else tuple(arg_shapes[0].sharding._device_assignment)
    return _concrete(target, mesh, devices, len(arg_shapes[0].shape))


def _named(sharding, meshes, ndim):
    """The operand's sharding (an HLO sharding, as the partitioner hands it) as a NamedSharding over
    the first of `meshes` that expresses it exactly: the plan's axes follow a named mesh."""
    for mesh in meshes:
        if mesh is None or mesh.empty or tuple(mesh.devices.flat) != tuple(sharding._device_assignment):
            continue
        try:
            spec = sharding_impls.parse_flatten_op_sharding(sharding._to_xla_hlo_sharding(ndim), mesh)[0]
            named = NamedSharding(mesh, spec)
        except Exception:  # noqa: BLE001 (not expressible over this mesh: try the next)
            continue
        if named.is_equivalent_to(sharding, ndim):
            return named
    return sharding


def _partition(target, source, mesh, arg_shapes, result_shape):
    arg = arg_shapes[0]
    devices = tuple(arg.sharding._device_assignment)
    ndim = len(arg.shape)
    tgt = _concrete(target, mesh, devices, ndim)
    src = _named(arg.sharding, [getattr(tgt, "mesh", None), mesh], ndim)
    if source is not None and not _concrete(source, mesh, devices, ndim).is_equivalent_to(src, ndim):
        raise ValueError("reshard: source= says the operand is %s, but the compiler chose %s for it; drop source= "
                         "(reshard.jax needs no source) or pass the right one" % (source, src))
    d = _jax_plan.decision(arg.shape, arg.dtype, src, tgt)
    if d.local is not None:
        return d.mesh, d.local, tgt, (src,)
    if d.explanation.choice == "none":
        return mesh, _identity, tgt, (src,)
    return mesh, _identity, tgt, (tgt,)  # XLA's own lowering moves the operand


def _identity(x):
    return x


def _identity_of(x, target, source):
    del target, source
    return x


# decode_shardings=False: the operand's sharding comes as the HLO sharding it is (a GSPMDSharding);
# decoding it into a PartitionSpec over one mesh fails for layouts that mesh cannot express.
_partitioned = custom_partitioning(_identity_of, static_argnums=(1, 2))
_partitioned.def_partition(partition=_partition, infer_sharding_from_operands=_infer, sharding_rule=_rule,
                           decode_shardings=False)


# ---- the primitive's rules

def _abstract_eval(x_aval, *, sharding, layout, context_mesh, unconstrained_dims, source):
    del source
    return pjit._sharding_constraint_abstract_eval(x_aval, sharding=sharding, layout=layout,
                                                   context_mesh=context_mesh,
                                                   unconstrained_dims=unconstrained_dims)


def _partitionable(ctx, x_aval, sharding, layout, unconstrained_dims) -> bool:
    if layout is not None or unconstrained_dims or jax.dtypes.issubdtype(x_aval.dtype, jax.dtypes.extended):
        return False
    if isinstance(sharding, NamedSharding):
        if any(e is PartitionSpec.UNCONSTRAINED for e in getattr(sharding.spec, "partitions", sharding.spec)):
            return False
        if getattr(sharding.spec, "unreduced", None) or getattr(sharding.spec, "reduced", None):
            return False
        if isinstance(sharding.mesh, AbstractMesh) and \
                getattr(ctx.module_context.axis_context, "device_assignment", None) is None:
            return False  # no devices to partition over: XLA's own lowering
    elif not isinstance(sharding, sharding_impls.GSPMDSharding):
        return False
    axis_ctx = ctx.module_context.axis_context
    if getattr(axis_ctx, "manual_axes", None):
        return False
    return (sharding.mesh.size if isinstance(sharding, NamedSharding) else len(sharding.device_set)) > 1


def _lowering(ctx, x, *, sharding, layout, context_mesh, unconstrained_dims, source):
    x_aval, = ctx.avals_in
    params = dict(sharding=sharding, layout=layout, context_mesh=context_mesh, unconstrained_dims=unconstrained_dims)
    if _partitionable(ctx, x_aval, sharding, layout, unconstrained_dims):
        call = mlir.lower_fun(partial(_partitioned, target=sharding, source=source), multiple_results=False)
        x, = call(_with_devices(ctx, sharding), x)
    return pjit._sharding_constraint_hlo_lowering(ctx, x, **params)


def _with_devices(ctx, sharding):
    """The lowering context with the program's devices. jax.jit lowers without them unless a
    primitive asks for them, and asking would make JAX refuse programs whose shardings use more
    than one mesh (which with_sharding_constraint allows); the target names the same devices, in
    the same order, as every sharding of the program (JAX checks it)."""
    axis_ctx = ctx.module_context.axis_context
    if not isinstance(axis_ctx, sharding_impls.ShardingContext) or axis_ctx.device_assignment is not None:
        return ctx
    devices = tuple(sharding._device_assignment)
    mesh = sharding.mesh.abstract_mesh if isinstance(sharding, NamedSharding) else None
    new = sharding_impls.ShardingContext(len(devices), devices, mesh)
    return ctx.replace(module_context=ctx.module_context.replace(axis_context=new))


def _impl(x, *, sharding, layout, context_mesh, unconstrained_dims, source):
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh):
        mesh = getattr(getattr(x, "sharding", None), "mesh", None)
        if mesh is None or isinstance(mesh, AbstractMesh) or mesh.shape_tuple != sharding.mesh.shape_tuple:
            raise ValueError("reshard: the target %s is over an AbstractMesh, and the operand's sharding gives no "
                             "devices for it" % (sharding,))
        sharding = NamedSharding(mesh, sharding.spec)
    return dispatch.apply_primitive(reshard_p, x, sharding=sharding, layout=layout, context_mesh=context_mesh,
                                    unconstrained_dims=unconstrained_dims, source=source)


def _transpose(ct, _, **params):
    return (reshard_p.bind(ct, **params),)


def _batcher(axis_data, vals_in, dims_in, *, sharding, layout, context_mesh, unconstrained_dims, source):
    x, = vals_in
    d, = dims_in
    params = dict(sharding=sharding, layout=layout, context_mesh=context_mesh, unconstrained_dims=unconstrained_dims)
    if d is None:
        return reshard_p.bind(x, source=source, **params), None
    if unconstrained_dims or layout is not None or not isinstance(sharding, NamedSharding):
        # with_sharding_constraint's own batching (its result is with_sharding_constraint).
        return pjit._sharding_constraint_batcher(axis_data, vals_in, dims_in, **params)
    batch = axis_data.spmd_name  # None: the batch dim is replicated in the target

    def widen(s):
        if s is None:
            return None
        spec = list(_padded_spec(s.spec, x.ndim - 1))
        spec.insert(d, batch)
        return NamedSharding(s.mesh, PartitionSpec(*spec))

    return reshard_p.bind(x, sharding=widen(sharding), layout=None, context_mesh=context_mesh,
                          unconstrained_dims=frozenset(), source=widen(source)), d


def _count_targets_as_program_shardings():
    """jax.jit takes a program's devices from its arguments, its outputs and the shardings a few
    primitives inside name (dispatch.get_intermediate_shardings: sharding constraints among them),
    and checks that they agree. The op's target names devices as a constraint's does; uncounted,
    a program whose used arguments carry no devices (host data, uncommitted arrays, no arguments,
    or the primal jacfwd drops) compiles for one device, where the partitioned call has no
    implementation. So the op's targets over concrete devices count as a constraint's do, and
    disagreeing devices are the same error. JAX offers no hook for this: its function is wrapped
    once, by name, in the module jax.jit calls it through."""
    original = dispatch.get_intermediate_shardings
    if getattr(original, "_counts_reshard_targets", False):
        return

    def with_targets(jaxpr):
        out = list(original(jaxpr))  # (its own recursion into sub-jaxprs comes back through here)
        for eqn in jaxpr.eqns:
            if eqn.primitive is reshard_p:
                s = eqn.params["sharding"]
                if isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh):
                    continue  # no devices named, as for a constraint
                out.append((s, SourceInfo(eqn.source_info, "sharding_constraint")))
        return out

    with_targets._counts_reshard_targets = True
    dispatch.get_intermediate_shardings = with_targets


reshard_p.def_impl(_impl)
reshard_p.def_abstract_eval(_abstract_eval)
ad.deflinear2(reshard_p, _transpose)
batching.fancy_primitive_batchers[reshard_p] = _batcher
mlir.register_lowering(reshard_p, _lowering)
_count_targets_as_program_shardings()
