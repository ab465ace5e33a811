# Type stubs for reshard._core (python/src/*.cc). Generated with `python -m nanobind.stubgen -m
# reshard._core`, then the untyped containers narrowed by hand; regenerate when the bindings change.
"""
reshard's C++ library: layouts in every notation, collective plans, emitters.

Errors: ValueError for bad input (the library's message, with the column for text), NotImplementedError for valid input not supported yet, RuntimeError for internal errors.
"""

from collections.abc import Sequence
from typing import Any, Union

Box = tuple[tuple[int, int], ...]
"""One (lo, hi) per dim, half-open."""


class Mesh:
    """
    Named axes with sizes over a list of device ids (row-major). Immutable.
    """

    def __init__(self, axes: Sequence[tuple[str, int]], device_ids: Sequence[int] | None = None) -> None:
        """
        Mesh([('x', 4), ('y', 2)]) puts device 2x+y at (x, y); device_ids lists the ids row-major.
        """

    @staticmethod
    def parse(text: str) -> Mesh:
        """
        'x=4,y=2' or Shardy mesh text such as '<["x"=4, "y"=2], device_ids=[3,2,1,0]>'.
        """

    @property
    def axes(self) -> list[tuple[str, int]]: ...

    @property
    def axis_names(self) -> list[str]: ...

    @property
    def device_ids(self) -> list[int]: ...

    @property
    def num_devices(self) -> int: ...

    @property
    def is_iota(self) -> bool: ...

    def groups(self, axes: Sequence[str]) -> list[list[int]]:
        """
        every group of devices that differ only on `axes`, each as device ids in member order (row-major over `axes` as listed): the groups a collective over `axes` runs in
        """

    def __str__(self) -> str: ...

    def __repr__(self) -> str: ...

    def __eq__(self, arg: object, /) -> bool: ...

    def __hash__(self) -> int: ...

class Layout:
    """
    Which device holds which elements of an N-d array (a grid of cells over tiles; see include/reshard/layout.h). Two layouts are == when every device holds the same elements, whatever notation they came from. Immutable.
    """

    @property
    def shape(self) -> list[int]: ...

    @property
    def dtype(self) -> str: ...

    @property
    def rank(self) -> int: ...

    @property
    def num_elements(self) -> int: ...

    @property
    def element_bytes(self) -> int: ...

    @property
    def devices(self) -> list[int]:
        """the layout's devices, ascending"""

    @property
    def num_tiles(self) -> int: ...

    @property
    def dim_tiles(self) -> list[int]:
        """tiles along each dim (a dim split k ways has k)"""

    @property
    def partial(self) -> bool:
        """whether the layout carries a pending reduction (DTensor Partial, JAX/Shardy unreduced axes)"""

    @property
    def reduce_op(self) -> str | None:
        """the pending reduction's op ('sum', 'avg', 'max', 'min'), or None"""

    @property
    def parts(self) -> int:
        """how many partial values each element has (1: no pending reduction)"""

    def part_of(self, device: int) -> int:
        """the part of a pending reduction the device holds (0 if none)"""

    def tile_of(self, device: int) -> int:
        """the tile the device holds, or -1"""

    def local_shape(self, device: int) -> list[int]: ...

    def local_bytes(self, device: int) -> int: ...

    def device_boxes(self, device: int) -> list[Box]:
        """
        the boxes the device holds, in local-buffer order: [((lo, hi), ...), ...]
        """

    def boxes(self) -> dict[int, list[Box]]:
        """
        device -> its boxes (`reshard show`): {0: [((0, 8), (0, 16), (0, 4))], ...}
        """

    def with_devices(self, ids: Sequence[int]) -> Layout:
        """
        the same layout with each device d renamed ids[d] (HLO texts number devices by position)
        """

    def to_text(self, notation: str, mesh: Mesh | None = None) -> str:
        """
        the layout in a notation ('hlo', 'hlo-v3', 'jax', 'shardy', 'dtensor'); JAX, Shardy and DTensor need a mesh. Raises NotImplementedError where the notation cannot state it.
        """

    def __eq__(self, arg: object, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __str__(self) -> str: ...

    def __repr__(self) -> str: ...

class ParsedLayout:
    """A layout read from text: the layout, its notation, its mesh."""

    @property
    def layout(self) -> Layout: ...

    @property
    def notation(self) -> str: ...

    @property
    def mesh(self) -> Mesh | None:
        """the mesh the text was stated over, if any"""

    @property
    def meshes(self) -> list[Mesh]:
        """
        meshes for the planner: the text's mesh, then those an HLO tile assignment suggests
        """

    @property
    def text(self) -> str:
        """the text it was read from"""

    @property
    def given_mesh(self) -> Mesh | None:
        """the mesh given to parse(), if any"""

    def convert(self, notation: str) -> tuple[str, Mesh | None]:
        """
        (text, mesh): the text in `notation` as `reshard convert` prints it, over the mesh given to parse() (else the text's own, else one read off an HLO tile assignment), and that mesh for named output. NotImplementedError where the notation cannot state the layout.
        """

def parse(text: str, shape: Sequence[int], dtype: str = 'f32', mesh: Mesh | None = None) -> ParsedLayout:
    """
    Reads a sharding in any notation (detected from the text). Raises ValueError with the column on bad text.
    """

def detect_notation(text: str) -> str: ...

def dtype_bytes(dtype: str) -> int: ...

class NamedSharding:
    """
    A sharding over a named mesh, as JAX, Shardy and HLO V3 state it: per tensor dim the mesh axes that split it, major to minor. Immutable.
    """

    def __init__(self, mesh: Mesh, dims: Sequence[Sequence[str | tuple[str, int, int]]], replicated: Sequence[str | tuple[str, int, int]] = [], unreduced: Sequence[str | tuple[str, int, int]] = []) -> None:
        """
        NamedSharding(mesh, [['y'], [], ['x']]) is JAX's P('y', None, 'x'); a sub-axis is ('x', pre, size). unreduced: axes holding partial sums (JAX's unreduced={...}).
        """

    @property
    def mesh(self) -> Mesh: ...

    @property
    def dims(self) -> list[list[str]]: ...

    def to_layout(self, shape: Sequence[int], dtype: str = 'f32') -> Layout: ...

    def to_hlo(self) -> str:
        """
        the HLO sharding text exactly as JAX prints it for this mesh's device ids
        """

    def to_text(self, syntax: str = 'jax') -> str: ...

    def __eq__(self, arg: object, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

def named_sharding_from_layout(layout: Layout, mesh: Mesh, allow_sub_axes: bool = False) -> NamedSharding: ...

class Step:
    """One step of a plan: a collective over a group, or a local slice."""

    @property
    def op(self) -> str:
        """
        'all-to-all', 'all-gather', 'collective-permute', 'reduce-scatter', 'all-reduce', 'exchange', 'slice', 'pad' or 'copy'
        """

    @property
    def is_collective(self) -> bool: ...

    @property
    def group(self) -> list[str]:
        """
        plan-mesh axes of the group, in member order; [] for local steps and the exchange
        """

    @property
    def group_spec(self) -> str: ...

    @property
    def group_size(self) -> int: ...

    @property
    def num_groups(self) -> int: ...

    @property
    def input_spec(self) -> str:
        """'[{y}, {}, {x}]' over the plan mesh"""

    @property
    def output_spec(self) -> str: ...

    @property
    def input_shard(self) -> list[int]:
        """padded local shape before"""

    @property
    def output_shard(self) -> list[int]:
        """padded local shape after"""

    @property
    def input(self) -> Layout: ...

    @property
    def output(self) -> Layout: ...

    @property
    def program(self) -> list[dict[str, Any]]:
        """the SPMD program every device runs (docs/plan_format.md#program)"""

    @property
    def relays(self) -> list[dict]:
        """
        a relayed reducing exchange's first round (docs/plan_format.md): per relay, the donor's piece of the keeper's rows below `split` along `dim`, sent to the helper; [] elsewhere
        """

    @property
    def max_recv_bytes(self) -> int: ...

    @property
    def max_send_bytes(self) -> int: ...

    @property
    def total_bytes(self) -> int: ...

    @property
    def peak_bytes(self) -> int: ...

    @property
    def recv_bytes(self) -> list[int]:
        """per device of the plan (PlanResult.devices order)"""

    @property
    def send_bytes(self) -> list[int]: ...

    @property
    def modeled_time_us(self) -> float: ...

    def exchange(self, device: int) -> dict[str, Any]:
        """
        one device's part of the minimal exchange from this step's input to its output layout (what an 'exchange' program op moves): {'send': [(peer, runs)], 'recv': [(peer, runs)], 'local': [(src_runs, dst_runs)]}, where runs lists per dim the (offset, length) runs in the device's local buffer; a message's elements are the cross product of its runs, row-major, the same order on both sides
        """

    def __repr__(self) -> str: ...

class PlanResult:
    """
    A collective plan with its costs, lower bound and baselines. Immutable.
    """

    @property
    def steps(self) -> list[Step]: ...

    @property
    def op_names(self) -> list[str]: ...

    @property
    def source(self) -> Layout: ...

    @property
    def target(self) -> Layout: ...

    @property
    def devices(self) -> list[int]:
        """every device of either layout, ascending"""

    @property
    def mesh(self) -> Mesh | None:
        """
        the plan mesh (axes cut into pieces where needed), or None for explicit layouts
        """

    @property
    def axis_labels(self) -> list[str]: ...

    @property
    def stats(self) -> dict[str, Union[int, float]]: ...

    @property
    def modeled_time_us(self) -> float: ...

    @property
    def lower_bound(self) -> dict[str, int]: ...

    @property
    def baselines(self) -> list[dict[str, Any]]:
        """
        'full_rematerialization' (XLA's fallback) and 'shardy' (one axis move at a time), or from partial sums 'all_reduce_first', priced alike
        """

    @property
    def candidates(self) -> list[dict[str, Any]]: ...

    @property
    def memory_cap_bytes(self) -> int: ...

    @property
    def states_explored(self) -> int: ...

    @property
    def strategy(self) -> str: ...

    @property
    def topology(self) -> str: ...

    @property
    def backend(self) -> str:
        """where the plan runs ('--for')"""

    def per_device(self) -> list[dict[str, int]]:
        """per device, over all steps: send/recv bytes, messages, peak"""

    def emit(self, format: str) -> str:
        """
        the plan as 'hlo' (an HLO module), 'jax' (a module defining reshard(x, mesh)) or 'json' (docs/plan_format.md). HLO and JAX raise NotImplementedError for a plan with a ragged exchange step.
        """

    def __repr__(self) -> str: ...

def lower_bound(source: Layout, target: Layout) -> dict:
    """
    What any plan must receive, from the layouts alone: {'max_recv_bytes', 'total_bytes'}. Where a layout carries a pending reduction, the bound counts what combining partial values needs (docs/cost_model.md).
    """

def parse_byte_count(text: str) -> int:
    """
    A byte count as the CLI's --memory-cap reads it: '65536', '64K', '1.5M', '2G', '1T' (KiB..TiB too); ValueError naming the column.
    """

MAX_BYTE_COUNT: int = 4611686018427387904

def plan(source: Layout, target: Layout, strategy: str = 'auto', topology: str = 'flat', backend: str = 'any', memory_cap: int = 0, bandwidth_only: bool = False, meshes: Sequence[Mesh] = []) -> PlanResult:
    """
    The cheapest plan of collectives from source to target (PlanReshard). strategy: auto, exchange, collectives; topology: flat, nodes:K, torus:AxB[xC]; backend: any, xla, jax-cpu, jax-gpu, mpi, nccl; memory_cap: bytes per device (0: the default); bandwidth_only: price plans by received bytes alone; meshes: meshes to try first for the plan mesh.
    """
