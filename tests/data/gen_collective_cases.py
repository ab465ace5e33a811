#!/usr/bin/env python3
"""Writes collective_cases.tsv: resharding cases for the plan emitters and the real-JAX tests.

Run:  python3 tests/data/gen_collective_cases.py            (rewrites the .tsv next to this file)

Columns (tab separated, one case a line, '#' lines are comments):
  name     unique id, [a-z0-9_]
  shape    array extents, comma separated (16,16,16)
  mesh     axis=size,... in mesh order (x=4,y=2); empty when both texts carry their
           own devices (HLO tile assignments with device lists, Shardy inline meshes)
  devices  the mesh's device ids in row-major order (3,1,7,4,...); empty for iota.
           With an empty mesh, --devices alone makes a one-axis mesh 'devices'.
  from     source layout, in any notation `reshard` reads (see docs/notations/)
  to       target layout
  jax      1 when the case is on ONE named mesh of at most 8 devices and both sides
           can be stated as JAX PartitionSpecs over it (tests/jax/test_emitted_jax.py
           runs those in real JAX); else 0. tests/jax/test_corpus.py checks this flag
           against `reshard convert --to jax`.
  origin   where the case comes from

Each row must pass `reshard verify --shape S [--mesh M] [--devices D] --from F --to T`
(checked by tests/jax/test_corpus.py).

Cases from Shardy's reshard_to_collectives.mlir and XLA's spmd_partitioner_test.cc are
restated here as layouts (mostly JAX specs over the test's mesh); the test files only
inspired the layout pairs, nothing else is taken from them. Where a test's mesh has
more than 16 devices the mesh is shrunk and the origin says "adapted".
"""
import os
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "collective_cases.tsv")

SDY = "Shardy reshard_to_collectives.mlir @"
SDY_ADAPT = "adapted from Shardy reshard_to_collectives.mlir @"
XLA = "XLA spmd_partitioner_test.cc SpmdPartitioningTest."


def inline(axes, dims, ids=None):
    """Shardy text with an inline mesh: axes [('x',4),...], dims ['{"x"}', '{}', ...]."""
    mesh = ", ".join('"%s"=%d' % a for a in axes)
    if ids is not None:
        mesh += "], device_ids=[" + ",".join(map(str, ids))
    return "#sdy.sharding<mesh<[%s]>, [%s]>" % (mesh, ", ".join(dims))


# name, shape, mesh, devices, from, to, jax, origin
CASES = [
    # ---- the canonical case, in every notation, and its relatives
    ("canonical", "16,16,16", "x=4,y=2", "", "P('y', None, 'x')", "P(None, ('x', 'y'), None)", 1,
     "README canonical case (XLA logs 'Involuntary full rematerialization')"),
    ("canonical_hlo", "16,16,16", "", "", "{devices=[2,1,4]<=[4,2]T(1,0)}", "{devices=[1,8,1]<=[8]}", 0,
     "README canonical case as HLO V2 text"),
    ("canonical_hlo_on_mesh", "16,16,16", "x=4,y=2", "", "{devices=[2,1,4]<=[4,2]T(1,0)}",
     "{devices=[1,8,1]<=[8]}", 1, "README canonical case as HLO V2 text over its mesh"),
    ("canonical_v3", "16,16,16", "", "", "{mesh[x=4,y=2], [{y}, {}, {x}]}", "{mesh[x=4,y=2], [{}, {x,y}, {}]}", 0,
     "README canonical case as HLO V3 (named) text"),
    ("canonical_shardy", "16,16,16", "x=4,y=2", "", '[{"y"}, {}, {"x"}]', '[{}, {"x", "y"}, {}]', 1,
     "README canonical case as Shardy text"),
    ("canonical_dtensor", "16,16,16", "x=4,y=2", "", "[Shard(2), Shard(0)]", "[Shard(1), Shard(1)]", 1,
     "README canonical case as DTensor placements"),
    ("canonical_reverse", "16,16,16", "x=4,y=2", "", "P(None, ('x', 'y'), None)", "P('y', None, 'x')", 1,
     "README canonical case, backwards"),
    ("canonical_yx_target", "16,16,16", "x=4,y=2", "", "P('y', None, 'x')", "P(None, ('y', 'x'), None)", 1,
     "README canonical case with the target's axes swapped (jax.md corpus row 3)"),
    ("canonical_permuted_devices", "16,16,16", "x=4,y=2", "3,1,7,4,2,0,5,6", "P('y', None, 'x')",
     "P(None, ('x', 'y'), None)", 1, "canonical case on jax_hlo_corpus.tsv's shuffled device order"),
    ("canonical_f32_small", "8,8,8", "x=4,y=2", "", "P('y', None, 'x')", "P(None, ('x', 'y'), None)", 1,
     "canonical pattern at 8x8x8 (each all-to-all piece is one row)"),

    # ---- Shardy reshard_to_collectives.mlir, restated as JAX specs
    ("sdy_redundant_reshard", "16,8", "x=2,y=2", "", "P('x', 'y')", "P('x', 'y')", 1,
     SDY + "redundant_reshard (no-op)"),
    ("sdy_all_gather_single_axis", "16,8", "x=2,y=2", "", "P('y', 'x')", "P('y', None)", 1,
     SDY + "all_gather_single_axis"),
    ("sdy_all_gather_multiple_axes", "16,8", "x=2,y=2,z=2", "", "P(('x', 'y', 'z'), None)", "P('x', None)", 1,
     SDY + "all_gather_multiple_axes"),
    ("sdy_all_gather_multiple_dims", "16,8", "x=2,y=2,z=2", "", "P(('y', 'z'), 'x')", "P('y', 'x')", 1,
     SDY + "all_gather_multiple_dims"),
    ("sdy_all_gather_with_subaxis", "16,8", "x=2,y=8", "", '[{"y"}, {"x"}]', '[{"y":(1)4}, {"x"}]', 0,
     SDY + "all_gather_with_subaxis (16 devices, sub-axis)"),
    ("sdy_all_slice_multiple_axes", "16,8", "x=2,y=2,z=2", "", "P()", "P('x', ('y', 'z'))", 1,
     SDY + "all_slice_multiple_axes"),
    ("sdy_all_slice_minor_axis", "16,8", "x=2,y=2,z=2", "", "P('x', 'y')", "P('x', ('y', 'z'))", 1,
     SDY + "all_slice_minor_axis"),
    ("sdy_all_slice_with_subaxis", "16,8", "x=4,z=4", "", '[{"x":(1)2}, {}]', '[{"x"}, {"z":(1)2}]', 0,
     SDY_ADAPT + "all_slice_with_subaxis (mesh 4x2x4 shrunk to x=4,z=4)"),
    ("sdy_all_to_all_single_axis", "16,8,8", "x=2,y=2,z=2", "", "P('x', 'y', None)", "P(None, 'y', 'x')", 1,
     SDY + "all_to_all_single_axis"),
    ("sdy_all_to_all_multiple_axes", "16,8,8", "x=2,y=2,z=2", "", "P('x', None, ('y', 'z'))",
     "P('x', ('y', 'z'), None)", 1, SDY + "all_to_all_multiple_axes"),
    ("sdy_two_all_to_alls_reverse_order", "16,8,8", "x=2,y=2,z=2", "", "P('y', 'x', None)",
     "P(None, None, ('x', 'y'))", 1, SDY + "two_all_to_alls_same_tgt_dim_reverse_order"),
    ("sdy_two_all_to_alls_non_contiguous", "16,8,8", "x=2,y=2,z=2", "", "P('y', ('x', 'z'), None)",
     "P(None, None, ('x', 'y', 'z'))", 1, SDY + "two_all_to_alls_same_tgt_dim_non_contiguous"),
    ("sdy_two_all_to_alls_diff_tgt_dims", "16,8,8", "x=4,y=2", "", "P(None, ('y', 'x'), None)",
     "P('x', None, 'y')", 1, SDY_ADAPT + "two_all_to_alls_different_tgt_dims (mesh 4x2x4 -> x=4,y=2)"),
    ("sdy_slice_src_dim_then_all_to_all_multi", "16,8,8", "x=2,y=2,z=2", "", "P(None, 'x', None)",
     "P(None, None, ('x', 'y', 'z'))", 1, SDY + "slice_on_src_dim_then_all_to_all_multiple_axes"),
    ("sdy_slice_src_dim_then_two_all_to_alls", "16,8,8", "x=2,y=2,z=2", "", "P('z', 'x', None)",
     "P(None, None, ('x', 'y', 'z'))", 1, SDY + "slice_on_src_dim_then_two_all_to_alls"),
    ("sdy_slice_src_dim_then_two_all_to_alls_2", "16,8,8", "x=2,y=2,z=2", "", "P('y', 'x', None)",
     "P(None, None, ('x', 'y', 'z'))", 1, SDY + "slice_on_src_dim_then_two_all_to_alls_2"),
    ("sdy_slice_src_dim_two_all_to_alls_diff_tgts", "16,8,8", "x=2,y=2,z=2", "", "P(None, ('x', 'y'), None)",
     "P('x', None, ('y', 'z'))", 1, SDY + "slice_on_src_dim_then_two_all_to_alls_diff_tgts"),
    ("sdy_cannot_slice_output_sharded", "16,8", "x=2,y=2,z=2", "", "P(None, 'x')", "P(('x', 'y'), 'z')", 1,
     SDY + "cannot_slice_on_src_dim_output_sharded"),
    ("sdy_cannot_slice_tgt_dim_sharded", "16,8,8", "x=2,y=2,z=2", "", "P(None, 'x', 'z')",
     "P(None, None, ('x', 'y', 'z'))", 1, SDY + "cannot_slice_on_src_dim_tgt_dim_sharded"),
    ("sdy_cannot_slice_axes_out_of_order_uneven", "4,10", "x=2,y=2,z=2", "", "P(None, ('x', 'z'))",
     "P(('x', 'y', 'z'), None)", 1, SDY + "cannot_slice_on_src_dim_axes_out_of_order (4 rows over 8: uneven)"),
    ("sdy_cannot_slice_axes_non_contiguous", "4,10", "x=2,y=2,z=2,w=2", "", "P(None, ('z', 'w', 'y'))",
     "P(('x', 'y', 'z'), None)", 0, SDY + "cannot_slice_on_src_dim_axes_non_contiguous (16 devices, uneven)"),
    ("sdy_cannot_slice_size_too_small", "16,4", "x=2,y=2,z=2", "", "P(None, 'x')", "P(('x', 'y', 'z'), None)", 1,
     SDY + "cannot_slice_on_src_dim_size_too_small"),
    ("sdy_cannot_slice_size_too_small_2", "16,4,8", "x=2,y=2,z=2", "", "P(None, ('x', 'y'), None)",
     "P('x', None, ('y', 'z'))", 1, SDY + "cannot_slice_on_src_dim_size_too_small_2"),
    ("sdy_cannot_slice_size_non_divisible", "4,10", "x=2,y=2", "", "P(None, 'x')", "P(('x', 'y'), None)", 1,
     SDY + "cannot_slice_on_src_dim_size_non_divisible"),
    ("sdy_replace_same_size_axes_same_dim", "16,8", "x=2,y=2,z=2", "", "P('z', 'y')", "P('z', 'x')", 1,
     SDY + "replace_same_size_axes_same_dim (permute only)"),
    ("sdy_replace_smaller_with_bigger_same_dim", "16,8", "x=4,y=2", "", "P(None, 'y')", "P(None, 'x')", 1,
     SDY_ADAPT + "replace_smaller_axis_with_bigger_same_dim (mesh 4x2x4 -> x=4,y=2)"),
    ("sdy_replace_bigger_with_smaller_same_dim", "16,8", "x=4,y=2", "", "P(None, 'x')", "P(None, 'y')", 1,
     SDY_ADAPT + "replace_bigger_axis_with_smaller_same_dim (mesh 4x2x4 -> x=4,y=2)"),
    ("sdy_replace_major_most_axis_in_dim", "16,8", "x=2,y=2,z=2,w=2", "", "P(('x', 'y', 'z'), None)",
     "P(('w', 'y', 'z'), None)", 0, SDY + "replace_major_most_axis_in_dim (16 devices)"),
    ("sdy_replace_same_size_axes_diff_dims", "16,8", "x=2,y=2", "", "P('x', None)", "P(None, 'y')", 1,
     SDY + "replace_same_size_axes_diff_dims"),
    ("sdy_replace_bigger_with_smaller_diff_dims", "16,8", "x=4,y=2", "", "P('x', None)", "P(None, 'y')", 1,
     SDY + "replace_bigger_axis_with_smaller_diff_dims"),
    ("sdy_replace_multiple_axes_diff_dims", "8,8,8,8", "x=2,y=2,z=2,w=2", "", "P('x', 'y', None, None)",
     "P(None, None, 'z', 'w')", 0, SDY_ADAPT + "replace_multiple_axes_diff_dims (6-axis mesh -> 4 axes)"),
    ("sdy_replace_smaller_with_bigger_diff_dims", "16,8", "x=4,y=2", "", "P('y', None)", "P(None, 'x')", 1,
     SDY + "replace_smaller_axis_with_bigger_diff_dims"),
    ("sdy_swap_same_size_axes_between_dims", "16,8", "x=2,y=2", "", "P('x', 'y')", "P('y', 'x')", 1,
     SDY + "swap_same_size_axes_between_dims (permute only)"),
    ("sdy_swap_diff_size_axes_between_dims", "16,8", "x=4,y=2", "", "P('x', 'y')", "P('y', 'x')", 1,
     SDY + "swap_diff_size_axes_between_dims"),
    ("sdy_slice_and_swap_axes_between_dims", "16,8", "x=2,y=2,z=2", "", "P('x', 'y')", "P(('x', 'y'), 'z')", 1,
     SDY + "slice_and_swap_axes_between_dims"),
    ("sdy_swap_axes_then_all_to_all", "8,8,8", "x=2,y=2", "", "P('x', 'y', None)", "P(None, 'x', 'y')", 1,
     SDY + "swap_axes_between_dims_then_all_to_all"),
    ("sdy_swap_sub_axes_then_all_to_all_gather", "16,8", "x=4,y=2,z=2", "", "P(('z', 'y'), 'x')",
     "P(('x', 'z'), None)", 0, SDY_ADAPT + "swap_sub_axes_then_all_to_all_and_all_gather (z=4 -> z=2; 16 devices)"),
    ("sdy_reorder_axes_single_dim", "16,8", "x=4,y=2", "", "P(('x', 'y'), None)", "P(('y', 'x'), None)", 1,
     SDY_ADAPT + "reorder_axes_single_dim (mesh 4x2x4 -> x=4,y=2; permute only)"),
    ("sdy_slice_then_reorder_axes", "16,8,8", "x=2,y=2", "", "P('y', None, None)", "P(('x', 'y'), None, None)", 1,
     SDY + "slice_then_reorder_axes"),
    ("sdy_reorder_axes_for_all_gather", "16,8", "x=2,y=2,z=2", "", "P(('y', 'x', 'z'), None)", "P('z', None)", 1,
     SDY + "reorder_axes_for_all_gather"),
    ("sdy_reorder_for_all_to_all_then_gather_1", "16,8", "x=2,y=2,z=2", "", "P(('y', 'x', 'z'), None)",
     "P('z', 'y')", 1, SDY + "reorder_axes_for_all_to_all_then_all_gather_single_axis"),
    ("sdy_reorder_for_all_to_all_then_gather_2", "16,8", "x=2,y=2,z=2", "", "P(('z', 'y', 'x'), None)",
     "P(None, 'y')", 1, SDY + "reorder_axes_for_all_to_all_then_all_gather_remaining_axes"),
    ("sdy_all_to_all_axes_src_out_of_order", "16,8,8", "x=2,y=2", "", "P(None, ('y', 'x'), None)",
     "P(('x', 'y'), None, None)", 1, SDY + "all_to_all_axes_at_src_out_of_order"),
    ("sdy_reorder_sub_axes", "16,8", "y=2,z=2,w=4", "", '[{"y", "w":(1)2, "z", "w":(2)2}, {}]',
     '[{"y"}, {"w"}]', 0, SDY_ADAPT + "reorder_sub_axes (x dropped: 16 devices)"),
    ("sdy_replace_sub_axes", "16,8", "y=2,z=2,w=4", "", '[{"y", "z", "w":(2)2}, {}]', '[{"y"}, {"w"}]', 0,
     SDY_ADAPT + "replace_sub_axes (x dropped: 16 devices)"),
    ("sdy_reorder_device_ids", "16,8", "", "",
     inline([("x", 2), ("y", 2)], ['{"x"}', '{"y"}']),
     inline([("x", 2), ("y", 2)], ['{"x"}', '{"y"}'], [3, 2, 1, 0]), 0, SDY + "reorder_device_ids"),
    ("sdy_reorder_axes_and_device_ids", "16,8", "", "",
     inline([("x", 2), ("y", 2)], ['{"x", "y"}', '{}']),
     inline([("x", 2), ("y", 2)], ['{"y", "x"}', '{}'], [3, 2, 1, 0]), 0, SDY + "reorder_axes_and_device_ids"),
    ("sdy_reorder_device_ids_then_all_gather", "16,8", "", "",
     inline([("x", 2), ("y", 2)], ['{"x"}', '{"y"}']),
     inline([("x", 2), ("y", 2)], ['{"x"}', '{}'], [3, 2, 1, 0]), 0, SDY + "reorder_device_ids_then_all_gather"),
    ("sdy_slice_reorder_ids_then_all_to_all", "16,8", "", "",
     inline([("x", 2), ("y", 2)], ['{"x"}', '{}'], [3, 2, 1, 0]),
     inline([("x", 2), ("y", 2)], ['{}', '{"x", "y"}'], [3, 1, 2, 0]), 0,
     SDY + "slice_then_reorder_device_ids_then_all_to_all"),
    ("sdy_reshard_on_while_block_arg", "32,96", "x=2,y=2", "", "P('x', None)", "P(None, 'x')", 1,
     SDY + "reshard_on_while_block_arg (all-to-all only)"),
    ("sdy_opt_barrier_different_meshes_uneven", "210", "", "",
     inline([("x", 4), ("y", 2)], ['{"x"}']), inline([("x", 2), ("t", 4)], ['{"x"}']), 0,
     "Shardy insert_explicit_reshards/meshes.mlir @optimization_barrier_different_meshes (210 over 4: uneven)"),
    ("sdy_opt_barrier_device_order", "210", "", "",
     inline([("x", 3), ("y", 2)], ['{"x"}']), inline([("x", 3), ("y", 2)], ['{"x"}'], [5, 4, 3, 2, 1, 0]), 0,
     "Shardy insert_explicit_reshards/meshes.mlir @optimization_barrier_meshes_different_device_order"),

    # ---- XLA spmd_partitioner_test.cc
    ("xla_tiled_to_tiled_even", "8,2", "", "", "{devices=[2,1]0,1}", "{devices=[1,2]0,1}", 0,
     XLA + "TiledToTiledEven"),
    ("xla_tiled_to_tiled_even_jax", "8,2", "x=2", "", "P('x', None)", "P(None, 'x')", 1,
     XLA + "TiledToTiledEven as JAX specs"),
    ("xla_tiled_to_tiled_uneven", "7,31,128", "", "", "{devices=[1,2,1]0,1}", "{devices=[2,1,1]0,1}", 0,
     XLA + "TiledToTiledUneven"),
    ("xla_tiled_to_tiled_uneven_jax", "7,31,128", "x=2", "", "P(None, 'x', None)", "P('x', None, None)", 1,
     XLA + "TiledToTiledUneven as JAX specs"),
    ("xla_tiled_to_replicated", "2,3", "", "", "{devices=[2,1]0,1}", "{replicated}", 0, XLA + "TiledToReplicated"),
    ("xla_tiled_to_replicated_jax", "2,3", "x=2", "", "P('x', None)", "P()", 1,
     XLA + "TiledToReplicated as JAX specs"),
    ("xla_single_device_to_replicated", "2,3", "", "0,1", "{maximal device=0}", "{replicated}", 0,
     XLA + "SingleDeviceToReplicated"),
    ("xla_single_device_to_single_device", "2,3", "", "0,1", "{maximal device=0}", "{maximal device=1}", 0,
     XLA + "SingleDeviceToSingleDevice"),
    ("xla_single_device_to_tiled", "2,3", "", "0,1", "{maximal device=0}", "{devices=[2,1]1,0}", 0,
     XLA + "SingleDeviceToTiled"),
    ("xla_tiled_to_single_device", "2,3", "", "0,1", "{devices=[2,1]0,1}", "{maximal device=0}", 0,
     XLA + "TiledToSingleDevice"),

    # ---- JAX documentation
    ("jaxdoc_xy_to_replicated", "8,4", "X=4,Y=2", "", "P('X', 'Y')", "P()", 1,
     "JAX docs 'Distributed arrays and automatic parallelization': arange(32).reshape(8,4), P('X','Y'); all-gather only"),
    ("jaxdoc_xy_to_x", "8,4", "X=4,Y=2", "", "P('X', 'Y')", "P('X', None)", 1,
     "JAX docs sharding tutorial array, gather Y only"),
    ("jaxdoc_xy_transpose_specs", "8,4", "X=4,Y=2", "", "P('X', 'Y')", "P('Y', 'X')", 1,
     "JAX docs sharding tutorial array, axes swapped between dims"),
    ("jaxdoc_tpu_device_order", "16,16", "x=4,y=2", "0,1,2,3,6,7,4,5", "P('x', 'y')", "P('y', 'x')", 1,
     "JAX docs (older notebook): mesh_utils device order 0,1,2,3,6,7,4,5 for a 4x2 TPU mesh"),
    ("jaxdoc_tpu_device_order_gather", "16,16", "x=4,y=2", "0,1,2,3,6,7,4,5", "P('x', 'y')", "P(None, 'y')", 1,
     "JAX docs (older notebook) device order; all-gather over x"),
    ("jaxdoc_shard_map_in_out", "8,16", "x=4,y=2", "", "P('x', 'y')", "P(None, ('x', 'y'))", 1,
     "JAX shard_map docs mesh (4,2) ('x','y'): block matrix to column shards"),

    # ---- uneven shapes
    ("uneven_10x6_rows_to_cols", "10,6", "x=4", "", "P('x', None)", "P(None, 'x')", 1,
     "uneven: 10 and 6 over 4 devices"),
    ("uneven_10x6_gather", "10,6", "x=4", "", "P('x', None)", "P()", 1, "uneven all-gather (last shard short)"),
    ("uneven_10x6_slice", "10,6", "x=4", "", "P()", "P('x', None)", 1, "uneven slice only"),
    ("uneven_7x5_swap", "7,5", "x=2,y=2", "", "P('x', 'y')", "P('y', 'x')", 1, "uneven swap of axes between dims"),
    ("uneven_empty_shards", "3,16", "x=8", "", "P('x', None)", "P(None, 'x')", 1,
     "3 rows over 8 devices: five shards empty"),
    ("uneven_9x9x9_canonical", "9,9,9", "x=4,y=2", "", "P('y', None, 'x')", "P(None, ('x', 'y'), None)", 1,
     "canonical pattern on an uneven 9x9x9 array"),
    ("uneven_odd_mesh", "10,7", "a=3,b=2", "", "P('a', 'b')", "P(('b', 'a'), None)", 1,
     "uneven over a 3x2 mesh"),
    ("uneven_dtensor_nested", "10", "a=2,b=3", "", "[Shard(0), Shard(0)]", "P(('a', 'b'))", 0,
     "docs/notations/dtensor.md: torch.chunk nesting differs from XLA's split (10 over 2x3)"),
    ("uneven_dtensor_nested_2d", "10,9", "a=2,b=3", "", "[Shard(0), Shard(1)]", "[Shard(1), Shard(0)]", 1,
     "DTensor uneven chunks on both dims, mesh dims swapped (torch.chunk agrees with XLA here)"),

    # ---- DTensor
    ("dtensor_shard0_to_replicate", "16,8", "d=4", "", "[Shard(0)]", "[Replicate()]", 1,
     "PyTorch DTensor docs: distribute_tensor Shard(0) then redistribute to Replicate() on 4 ranks"),
    ("dtensor_nested_even", "12", "a=2,b=3", "", "[Shard(0), Shard(0)]", "[Replicate(), Shard(0)]", 1,
     "DTensor nesting [Shard(0), Shard(0)], even (12 over 2x3)"),
    ("dtensor_2d_transpose", "8,8", "a=2,b=2", "", "[Shard(0), Shard(1)]", "[Shard(1), Shard(0)]", 1,
     "DTensor 2-D mesh: placements swapped"),
    ("dtensor_neg_dim", "4,8,6", "a=2,b=2", "", "[Shard(-1), Replicate()]", "[Shard(0), Shard(1)]", 1,
     "DTensor Shard(-1) (last dim)"),

    # ---- replicated sources and targets, unused axes
    ("replicated_to_sharded", "16,16", "x=4,y=2", "", "P()", "P('x', 'y')", 1, "slice only: replicated source"),
    ("sharded_to_replicated", "16,16", "x=4,y=2", "", "P(('x', 'y'), None)", "P()", 1, "all-gather only"),
    ("partial_replicated_swap_axis", "16,16", "x=4,y=2", "", "P(None, 'x')", "P('y', None)", 1,
     "both sides leave an axis unused (replicated over it)"),
    ("partial_x_to_partial_y", "16,16", "x=4,y=2", "", "P('x')", "P('y')", 1,
     "same dim, replicated over the other axis on each side"),
    ("replicated_hlo_to_tiled_hlo", "16,16", "x=4,y=2", "", "{replicated}", "{devices=[4,1,2]<=[8] last_tile_dim_replicate}",
     1, "HLO {replicated} to partial replication (last_tile_dim_replicate)"),
    ("partial_repl_hlo_list", "16,16", "", "", "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
     "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}", 0, "HLO V1 lists with replica groups"),

    # ---- sub-axes
    ("subaxes_split_one_axis", "8,8", "x=4", "", '[{"x":(1)2}, {"x":(2)2}]', '[{"x"}, {}]', 0,
     "docs/notations/shardy.md sub-axes on an axis of size 4"),
    ("subaxes_to_other_mesh", "8,8", "", "", inline([("x", 4), ("y", 2)], ['{"x"}', '{"y"}']),
     inline([("d", 8)], ['{"d":(1)4}', '{"d":(4)2}']), 0,
     "docs/notations/shardy.md: same layout over mesh x=4,y=2 and d=8 (no data moves)"),
    ("subaxes_v3_swap", "8,8", "", "", "{mesh[x=4], [{x:(2)2}, {x:(1)2}]}", "{mesh[x=4], [{x:(1)2}, {x:(2)2}]}", 0,
     "docs/notations/hlo.md V3 sub-axes, swapped"),
    ("subaxes_16dev", "16,16", "x=16", "", '[{"x":(1)4}, {"x":(4)4}]', '[{"x":(4)4}, {"x":(1)4}]', 0,
     "sub-axes of a 16-device axis swapped between dims"),

    # ---- device reorders and different device sets
    ("devices_reversed_iota_to_list", "16,8", "", "", "{devices=[2,2]<=[4]}", "{devices=[2,2]3,2,1,0}", 0,
     "device reorder: same tiles, reversed device list (permute only)"),
    ("devices_disjoint_sets", "16", "", "", "{devices=[4]0,1,2,3}", "{devices=[4]4,5,6,7}", 0,
     "different device sets: source on 0-3, target on 4-7"),
    ("devices_disjoint_2d", "8,8", "", "", "{devices=[2,2]0,1,2,3}", "{devices=[4,1]4,5,6,7}", 0,
     "different device sets and tilings"),
    ("devices_replicated_0_3_to_tiled_4_7", "8,8", "", "", "{devices=[1,1,4]0,1,2,3 last_tile_dim_replicate}",
     "{devices=[4,1]4,5,6,7}", 0, "replicated on 0-3 to tiled on 4-7"),
    ("devices_overlap_half", "16,4", "", "", "{devices=[4,1]0,1,2,3}", "{devices=[4,1]2,3,4,5}", 0,
     "device sets overlapping in two devices"),
    ("devices_mesh_permuted_swap", "8,8", "x=2,y=2", "3,2,1,0", "P('x', 'y')", "P('y', 'x')", 1,
     "mesh over devices 3,2,1,0 (as Shardy mesh2d_non_iota)"),
    ("devices_mesh_permuted_8", "16,16", "x=2,y=4", "7,6,5,4,3,2,1,0", "P('y', 'x')", "P(('x', 'y'), None)", 1,
     "mesh over reversed devices"),
    ("devices_mesh_3_1_7", "16,16,16", "x=4,y=2", "3,1,7,4,2,0,5,6", "P('x')", "P(None, None, 'y')", 1,
     "jax_hlo_corpus.tsv shuffled device order; partial replication both sides"),
    ("devices_upper_half", "8,8", "x=2,y=2", "4,5,6,7", "P('x', 'y')", "P(None, ('x', 'y'))", 1,
     "mesh on devices 4-7 only"),

    # ---- single-pattern cases
    ("only_all_gather_dim1", "8,16", "x=4,y=2", "", "P('x', ('y',))", "P('x', None)", 1, "all-gather only (one axis)"),
    ("only_slice_dim2", "4,4,16", "x=4,y=2", "", "P('y', None, None)", "P('y', None, 'x')", 1, "slice only"),
    ("only_permute_swap_tuple", "16,4", "x=2,y=2", "", "P(('x', 'y'), None)", "P(('y', 'x'), None)", 1,
     "permute only: axes reordered in one dim"),
    ("only_permute_3axes", "16,4", "a=2,b=2,c=2", "", "P(('a', 'b', 'c'), None)", "P(('c', 'b', 'a'), None)", 1,
     "permute only: three axes reversed (bit-reversal of blocks)"),
    ("only_all_to_all_1d", "16,16", "x=8", "", "P('x', None)", "P(None, 'x')", 1, "all-to-all only, 8 devices"),
    ("only_all_to_all_2axes", "16,16", "x=4,y=2", "", "P(('x', 'y'), None)", "P(None, ('x', 'y'))", 1,
     "all-to-all only over both axes"),
    ("only_all_to_all_inner", "8,8,8", "x=4,y=2", "", "P('x', 'y', None)", "P('x', None, 'y')", 1,
     "all-to-all within groups of 2"),
    ("identity_noop", "16,16", "x=4,y=2", "", "P('x', 'y')", "P('x', 'y')", 1, "no data moves"),
    ("scalar_replicated", "", "x=4,y=2", "", "P()", "P()", 1, "rank-0 array: no data moves"),
    ("rank1_reverse_axes", "64", "x=4,y=2", "", "P(('x', 'y'))", "P(('y', 'x'))", 1, "rank 1, axes reordered"),

    # ---- 3- and 4-axis meshes
    ("mesh3_rotate_axes", "8,8,8", "a=2,b=2,c=2", "", "P('a', 'b', 'c')", "P('b', 'c', 'a')", 1,
     "3-axis mesh: axes rotated across dims"),
    ("mesh3_with_size1", "8,16", "a=2,one=1,c=4", "", "P(('a', 'one'), 'c')", "P('c', ('one', 'a'))", 1,
     "3-axis mesh with a size-1 axis (jax_hlo_corpus.tsv style)"),
    ("mesh3_16dev", "16,16,4", "x=2,y=2,z=4", "", "P('z', ('x', 'y'), None)", "P(None, 'z', ('y', 'x'))", 0,
     "3-axis mesh, 16 devices"),
    ("mesh4_8dev", "8,8,4", "a=2,b=2,c=2,d=1", "", "P(('a', 'b'), 'c', 'd')", "P('d', None, ('c', 'b', 'a'))", 1,
     "4-axis mesh of 8 devices (one axis of size 1)"),
    ("mesh4_16dev", "8,8,8,8", "a=2,b=2,c=2,d=2", "", "P(None, ('d', 'b'), 'c')", "P(('a', 'b'), None, None, ('c', 'd'))", 0,
     "4-axis mesh of 16 devices (jax_hlo_corpus.tsv mesh)"),
    ("mesh4_16dev_gather", "16,16", "a=2,b=2,c=2,d=2", "", "P(('c', 'a'), ('b', 'd'))", "P('c', None)", 0,
     "4-axis mesh of 16 devices: gather most axes"),
    ("mesh2_16dev_canonical", "16,16,16", "x=8,y=2", "", "P('y', None, 'x')", "P(None, ('x', 'y'), None)", 0,
     "canonical pattern on 16 devices"),
]


def main():
    names = set()
    rows = []
    for c in CASES:
        assert len(c) == 8, c
        name, shape, mesh, devices, src, dst, jax_flag, origin = c
        assert name not in names, name
        names.add(name)
        row = [name, shape, mesh, devices, src, dst, str(jax_flag), origin]
        assert all("\t" not in x and "\n" not in x for x in row), row
        rows.append(row)
    with open(OUT, "w") as f:
        f.write("# resharding cases; made by gen_collective_cases.py (edit that, then rerun it). columns:\n")
        f.write("#name\tshape\tmesh\tdevices\tfrom\tto\tjax\torigin\n")
        for r in rows:
            f.write("\t".join(r) + "\n")
    print("wrote %d cases to %s" % (len(rows), OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
