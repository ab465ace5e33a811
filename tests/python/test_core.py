"""The core bindings (reshard._core through the reshard package): parse, show, convert, plan, emit,
and the error rule (ValueError with the library's message and column; NotImplementedError for
NotSupported)."""
import json

import numpy as np
import pytest

import reshard

SHAPE = (16, 16, 16)
SRC = "P('y', None, 'x')"
DST = "P(None, ('x','y'), None)"


def _canonical():
    return (reshard.parse(SRC, SHAPE, mesh="x=4,y=2"), reshard.parse("{devices=[1,8,1]<=[8]}", SHAPE))


def test_docstring_example_runs():
    import doctest
    failed, attempted = doctest.testmod(reshard)
    assert attempted >= 5 and failed == 0


def test_module_docstring_states_the_error_rule():
    doc = reshard.__doc__
    assert "ValueError" in doc and "NotImplementedError" in doc and "RuntimeError" in doc
    assert "ValueError" in reshard._core.__doc__


@pytest.mark.parametrize("text,notation", [
    ("{devices=[2,1,4]<=[4,2]T(1,0)}", "hlo"),
    ("{mesh[x=4,y=2], [{y}, {}, {x}]}", "hlo-v3"),
    (SRC, "jax"),
    ('#sdy.sharding<@mesh, [{"y"}, {}, {"x"}]>', "shardy"),
    ("[Shard(2), Shard(0)]", "dtensor"),
])
def test_every_notation_gives_the_canonical_source(text, notation):
    p = reshard.parse(text, SHAPE, mesh="x=4,y=2")
    assert p.notation == notation == reshard.detect_notation(text)
    assert p.layout == reshard.parse(SRC, SHAPE, mesh="x=4,y=2").layout
    assert hash(p.layout) == hash(reshard.parse(SRC, SHAPE, mesh="x=4,y=2").layout)


def test_show_and_layout_accessors():
    src, dst = _canonical()
    boxes = reshard.show(src)
    assert boxes[0] == [((0, 8), (0, 16), (0, 4))] and boxes[7] == [((8, 16), (0, 16), (12, 16))]
    layout = src.layout
    assert layout.shape == [16, 16, 16] and layout.dtype == "f32" and layout.devices == list(range(8))
    assert layout.local_shape(3) == [8, 16, 4] and layout.local_bytes(3) == 2048
    assert layout.dim_tiles == [2, 1, 4] and layout.num_tiles == 8 and layout.tile_of(0) >= 0
    assert "d7:[8,16)x[0,16)x[12,16)" in str(layout) and "8 devices" in repr(layout)
    uneven = reshard.parse("P('x')", (10,), mesh="x=4").layout
    assert uneven.boxes() == {0: [((0, 3),)], 1: [((3, 6),)], 2: [((6, 9),)], 3: [((9, 10),)]}
    assert uneven.with_devices([7, 6, 5, 4]).boxes()[4] == [((9, 10),)]


def test_convert():
    src, dst = _canonical()
    assert reshard.convert(src, "hlo") == "{devices=[2,1,4]<=[4,2]T(1,0)}"
    assert reshard.convert(dst, "jax", mesh="x=4,y=2") == "P(None, ('x', 'y'), None)"
    assert reshard.convert(src, "shardy") == '#sdy.sharding<@mesh, [{"y"}, {}, {"x"}]>'
    with pytest.raises(NotImplementedError):
        reshard.convert(src, "blockcyclic", mesh="x=4,y=2")


def test_mesh():
    m = reshard.Mesh([("x", 4), ("y", 2)], [7, 6, 5, 4, 3, 2, 1, 0])
    assert m.axes == [("x", 4), ("y", 2)] and m.device_ids == [7, 6, 5, 4, 3, 2, 1, 0] and not m.is_iota
    assert reshard.Mesh.parse("x=4,y=2") == reshard.Mesh([("x", 4), ("y", 2)])
    assert str(reshard.Mesh.parse("x=4,y=2")) == "x=4,y=2"
    assert reshard.Mesh.parse("x=4") != "x=4" and not (reshard.Mesh.parse("x=4") == 3)
    with pytest.raises(ValueError):
        reshard.Mesh([("x", 4), ("x", 2)])


def test_named_sharding():
    m = reshard.Mesh([("x", 4), ("y", 2)])
    s = reshard.NamedSharding(m, [["y"], [], ["x"]])
    assert s.to_hlo() == "{devices=[2,1,4]<=[4,2]T(1,0)}" and s.to_text() == "P('y', None, 'x')"
    assert s.to_layout(list(SHAPE)) == _canonical()[0].layout
    sub = reshard.NamedSharding(m, [[("x", 1, 2)], []])
    assert sub.dims == [["x:(1)2"], []]
    assert reshard.named_sharding_from_layout(s.to_layout([16, 16, 16]), m) == s
    with pytest.raises(ValueError, match="unknown mesh axis 'q'"):
        reshard.NamedSharding(m, [["q"]])


def test_plan_canonical():
    src, dst = _canonical()
    p = reshard.plan(src, dst)
    assert [(s.op, s.group, s.input_spec, s.output_spec) for s in p.steps] == [
        ("all-to-all", ["x", "y"], "[{y}, {}, {x}]", "[{}, {x, y}, {}]")]
    step = p.steps[0]
    assert step.group_size == 8 and step.num_groups == 1 and step.input_shard == [8, 16, 4]
    assert step.output_shard == [16, 2, 16] and step.max_recv_bytes == 1792 and step.is_collective
    assert [op["op"] for op in step.program] == ["reshape", "transpose", "reshape", "all-to-all", "reshape",
                                                 "transpose", "reshape"]
    assert step.program[3]["axes"] == ["x", "y"] and step.recv_bytes == [1792] * 8
    assert p.stats["max_recv_bytes"] == 1792 and p.stats["total_bytes"] == 14336
    assert p.lower_bound == {"max_recv_bytes": 1792, "total_bytes": 14336}
    base = {b["name"]: b for b in p.baselines}
    assert base["full_rematerialization"]["max_recv_bytes"] == 14336 and base["shardy"]["max_recv_bytes"] == 2560
    assert base["shardy"]["ops"] == ["all-to-all", "all-to-all"]
    assert p.modeled_time_us > 0 and p.devices == list(range(8)) and str(p.mesh) == "x=4,y=2"
    assert [d["recv_bytes"] for d in p.per_device()] == [1792] * 8
    assert p.strategy == "auto" and p.backend == "any" and p.topology.startswith("flat")


def test_plan_options():
    src, dst = _canonical()
    assert reshard.plan(src, dst, strategy="exchange").op_names == ["exchange"]
    assert reshard.plan(src, dst, backend="jax-cpu", bandwidth_only=True).op_names == ["all-to-all"]
    assert reshard.plan(src, dst, topology="nodes:4").topology.startswith("nodes:4")
    assert reshard.plan(src, dst, memory_cap="64K").memory_cap_bytes == 65536
    with pytest.raises(ValueError, match="memory cap"):
        reshard.plan(src, dst, memory_cap=100)
    with pytest.raises(ValueError, match="unknown strategy"):
        reshard.plan(src, dst, strategy="fastest")
    with pytest.raises(ValueError, match="col"):
        reshard.plan(src, dst, topology="torus:4y")
    with pytest.raises(ValueError):
        reshard.plan(src, dst, memory_cap="lots")


def _cli(*args):
    """The CLI's answer, where the build has one (the test command builds it): None otherwise."""
    import os
    import subprocess
    exe = os.environ.get("RESHARD_CLI") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "reshard")
    if not os.path.exists(exe):
        return None
    r = subprocess.run([exe, *args], capture_output=True, text=True)
    return r.returncode, r.stdout.strip(), r.stderr.strip()


def test_byte_counts_are_the_clis():
    """memory_cap= is read by the library's one parser of byte counts, the CLI's --memory-cap:
    before, Python read text through a float (9007199254740993 lost its last byte, 2^62 + 1 became
    2^62), took ints up to 2^63 - 1 (as 'no cap'), and refused '1T' that the CLI takes."""
    src, dst = _canonical()
    for text, want in [("9007199254740993", 9007199254740993), ("1T", 1 << 40), ("4TiB", 4 << 40), ("0.5K", 512),
                       ("1.5M", 3 << 19)]:
        assert reshard._core.parse_byte_count(text) == want
        if want >= 1 << 16:
            assert reshard.plan(src, dst, memory_cap=text).memory_cap_bytes == want
    assert reshard.plan(src, dst, memory_cap=np.int64(8192)).memory_cap_bytes == 8192
    for bad, why in [("4611686018427387905", "more than 2\\^62"), (" 64K", "column 1"), ("64 K", "unknown unit"),
                     (".5K", "column 1"), ("1.9999", "not a whole number"), ("0.4", "not a whole number"), ("", "empty")]:
        with pytest.raises(ValueError, match="memory_cap: .*" + why):
            reshard.plan(src, dst, memory_cap=bad)
        cli = _cli("plan", "--shape", "16,16,16", "--mesh", "x=4,y=2", "--from", SRC, "--to", DST, "--memory-cap", bad)
        if cli is not None:  # the same message after the option's name
            assert cli[0] == 2 and cli[2].split("--memory-cap: ", 1)[1] in str(
                pytest.raises(ValueError, reshard.plan, src, dst, memory_cap=bad).value), (bad, cli)
    for bad in (2 ** 62 + 1, 2 ** 63 - 1, 0, -1):
        with pytest.raises(ValueError, match="from 1 to 2\\^62"):
            reshard.plan(src, dst, memory_cap=bad)
    with pytest.raises(TypeError):
        reshard.plan(src, dst, memory_cap=1.5)


def test_arguments_of_the_wrong_type_are_type_errors():
    """Never read through int() or truth: a shape of floats was truncated (4.7 -> 4), a string
    read digit by digit ('16' -> [1, 6]), bandwidth_only='False' was true, dtype=None was f64."""
    for shape in [(4.7,), "16", (True,), None, 16]:
        with pytest.raises(TypeError):
            reshard.parse("P('x')", shape, mesh="x=4")
    with pytest.raises(ValueError, match="2\\^63"):
        reshard.parse("P('x')", (2 ** 63,), mesh="x=4")
    assert reshard.parse("P('x')", (np.int64(8),), mesh="x=4").layout.shape == [8]
    with pytest.raises(TypeError):
        reshard.parse("P('x')", (8,), dtype=None, mesh="x=4")
    src, dst = _canonical()
    for flag in ("False", 0, None):
        with pytest.raises(TypeError):
            reshard.plan(src, dst, bandwidth_only=flag)
    assert reshard.plan(src, dst, bandwidth_only=np.bool_(True), backend="jax-cpu").op_names == ["all-to-all"]
    # One mesh given as meshes= is one mesh, not a sequence of characters.
    assert reshard.plan(src, dst, meshes="x=4,y=2").op_names == reshard.plan(src, dst, meshes=["x=4,y=2"]).op_names


def test_convert_is_the_clis():
    """A parsed layout converts as `reshard convert` converts its text (ConvertLayout): size-1
    axes kept (P('w', None) on w=1,x=2 printed P(None, None)), an HLO iota stays an iota, an HLO
    text without a mesh converts over the mesh its tile assignment suggests; a layout a notation
    cannot state is NotImplementedError (it was ValueError)."""
    cases = [("P('w', None)", (4, 4), "x=2,w=1", "jax"), ("{devices=[2,3]<=[2,3]T(1,0)}", (4, 6), None, "hlo"),
             ("{devices=[2,2]0,1,2,3}", (4, 4), None, "hlo"), ("{devices=[2,3]<=[2,3]T(1,0)}", (4, 6), None, "jax"),
             ("P('x', 'y')", (4, 6), "x=2,y=3", "shardy"), ("P('x', 'y')", (4, 6), "x=2,y=3", "dtensor")]
    for text, shape, mesh, to in cases:
        got = reshard.convert(reshard.parse(text, shape, mesh=mesh), to)
        args = ["convert", "--shape", ",".join(map(str, shape)), "--sharding", text, "--to", to]
        cli = _cli(*args, *(["--mesh", mesh] if mesh else []))
        if cli is not None:
            assert cli[0] == 0 and cli[1] == got, (text, to, cli, got)
    assert reshard.convert(reshard.parse("P('w', None)", (4, 4), mesh="x=2,w=1"), "jax") == "P('w', None)"
    assert reshard.convert(reshard.parse("{devices=[2,3]<=[2,3]T(1,0)}", (4, 6)), "hlo") == "{devices=[2,3]<=[2,3]T(1,0)}"
    assert reshard.convert(reshard.parse("{devices=[2,2]0,1,2,3}", (4, 4)), "hlo") == "{devices=[2,2]0,1,2,3}"
    with pytest.raises(NotImplementedError, match="cannot state this layout in jax notation"):
        reshard.convert(reshard.parse("blockcyclic(block=[2], grid=[2])", (8,), mesh="x=2"), "jax")


def test_a_nul_in_the_text_keeps_the_whole_message():
    """The message of a text with a NUL in it went only up to the NUL (a C string), dropping the
    caret lines."""
    with pytest.raises(ValueError) as e:
        reshard.parse("P('x')\x00", (8,), mesh="x=2")
    assert "\n" in str(e.value) and "^" in str(e.value), str(e.value)


def test_emit_json_is_the_clis_text():
    """PlanResult.emit("json") is `reshard plan --json`'s text, written by one library function
    (WritePlanJson): it lacked the transfers the CLI lists for one-step exchanges of up to 64 devices."""
    src, dst = _canonical()
    for strategy in ("exchange", "auto"):
        got = reshard.plan(src, dst, strategy=strategy).emit("json")
        assert ('"transfers":[' in got) == (strategy == "exchange"), got[:200]
        cli = _cli("plan", "--json", "--shape", "16,16,16", "--mesh", "x=4,y=2", "--from", SRC, "--to",
                   "{devices=[1,8,1]<=[8]}", "--strategy", strategy)
        if cli is not None:
            assert cli[0] == 0 and cli[1] == got


def test_named_sharding_hash_agrees_with_equality():
    mesh = reshard.Mesh([("x", 4), ("y", 2)])
    a, b = reshard.NamedSharding(mesh, [["y"], [], ["x"]]), reshard.NamedSharding(mesh, [["y"], [], ["x"]])
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1


def test_emit():
    src, dst = _canonical()
    p = reshard.plan(src, dst, backend="jax-cpu")
    hlo = reshard.emit(p, "hlo")
    assert "all-to-all(" in hlo and "all-gather" not in hlo
    jax_text = p.emit("jax")
    assert "jax.lax.all_to_all(x, ('x', 'y'), 0, 0, tiled=True)" in jax_text
    j = json.loads(p.emit("json"))
    assert list(j)[-4:] == ["strategy", "topology", "for", "per_device"] and j["for"] == "jax-cpu"
    assert j["steps"][0]["group"]["replica_groups"] == "{{0,1,2,3,4,5,6,7}}"
    with pytest.raises(ValueError, match="not one of"):
        p.emit("yaml")
    ragged = reshard.plan(src, dst, strategy="exchange")
    with pytest.raises(NotImplementedError, match="ragged exchange"):
        ragged.emit("jax")


def test_errors_carry_the_parser_message_and_column():
    with pytest.raises(ValueError) as e:
        reshard.parse("P('y', None, 'q')", SHAPE, mesh="x=4,y=2")
    assert str(e.value).startswith("col 14: unknown mesh axis 'q' (mesh is x=4,y=2)")
    assert "               ^" in str(e.value)
    with pytest.raises(ValueError, match="col 19: expected '}'"):
        reshard.parse("{devices=[2]<=[2] manual}", (4,))
    with pytest.raises(ValueError, match="give a mesh"):
        reshard.parse("{replicated}", (4,))
    with pytest.raises(NotImplementedError, match="tuple shardings are not supported yet"):
        reshard.parse("{{replicated}, {replicated}}", (4,))
    with pytest.raises(NotImplementedError, match="UNCONSTRAINED"):
        reshard.parse("P('x', P.UNCONSTRAINED)", (4, 4), mesh="x=2,y=2")
    with pytest.raises(ValueError, match="unknown"):
        reshard.parse("P('x')", (4,), dtype="f33", mesh="x=2")
    with pytest.raises(TypeError):
        reshard.parse(42, (4,))


def test_dtype_names():
    assert reshard.dtype_name(np.float32) == "f32" and reshard.dtype_name("bfloat16") == "bf16"
    assert reshard.dtype_name("f32") == "f32" and reshard.dtype_name(np.dtype("complex128")) == "c128"
    assert reshard.dtype_name(bool) == "pred"
    p = reshard.parse("P('x')", (8,), dtype=np.float64, mesh="x=2")
    assert p.layout.dtype == "f64" and p.layout.local_bytes(0) == 32
    with pytest.raises(ValueError):
        reshard.dtype_name("not a dtype")


def test_mesh_groups_are_the_collective_groups():
    m = reshard.Mesh([("x", 4), ("y", 2)], [7, 6, 5, 4, 3, 2, 1, 0])
    assert m.groups(["y"]) == [[7, 6], [5, 4], [3, 2], [1, 0]]
    assert m.groups(["x"]) == [[7, 5, 3, 1], [6, 4, 2, 0]]
    assert m.groups(["y", "x"]) == [[7, 5, 3, 1, 6, 4, 2, 0]]  # member order: y major
    assert m.groups([]) == [[d] for d in m.device_ids]
    with pytest.raises(ValueError, match="unknown mesh axis 'q'"):
        m.groups(["q"])


@pytest.mark.parametrize("seed", range(40))
def test_step_exchange_parts_match_across_devices_and_the_plan(seed):
    """Every message a device sends is received by its peer with the same element count, and
    each device's parts add up to the step's planned send and receive bytes."""
    rng = np.random.default_rng(seed)
    mesh = reshard.Mesh([("a", 2), ("b", 3)])
    names = ["Replicate()", "Shard(0)", "Shard(1)", "_StridedShard(0, split_factor=2)"]
    shape = [int(rng.integers(1, 9)), int(rng.integers(1, 9))]
    pick = lambda: "[%s, %s]" % (names[rng.integers(4)], names[rng.integers(4)])  # noqa: E731
    src = reshard.parse(pick(), shape, mesh=mesh)
    dst = reshard.parse(pick(), shape, mesh=mesh)
    p = reshard.plan(src, dst, strategy="exchange")
    for step in p.steps:
        parts = {d: step.exchange(d) for d in p.devices}
        count = lambda runs: int(np.prod([sum(n for _, n in r) for r in runs]))  # noqa: E731
        for d, part in parts.items():
            i = p.devices.index(d)
            assert sum(count(r) for _, r in part["recv"]) * 4 == step.recv_bytes[i]
            for peer, runs in part["send"]:
                back = dict(parts[peer]["recv"])
                assert count(back[d]) == count(runs)


def test_partial_sums_layouts_bound_and_plans():
    """Issue 17 through the bindings: a pending reduction's op and parts, the bound, the
    plan (reduce-scatter first, priced against all-reduce first), the emitters."""
    mesh = "x=4,y=2"
    src = reshard.parse("P(None, None, unreduced={'x'})", (16, 16), mesh=mesh)
    dst = reshard.parse("P('x', None)", (16, 16), mesh=mesh)
    assert src.layout.partial and src.layout.reduce_op == "sum" and src.layout.parts == 4
    assert [src.layout.part_of(d) for d in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert not dst.layout.partial and dst.layout.reduce_op is None and dst.layout.parts == 1
    assert reshard.convert(src, "dtensor", mesh) == "[Partial(), Replicate()]"
    assert reshard.lower_bound(src, dst) == {"max_recv_bytes": 512, "total_bytes": 4096}
    p = reshard.plan(src, dst, bandwidth_only=True)
    assert [s.op for s in p.steps] == ["reduce-scatter", "all-gather"]
    assert p.stats["max_recv_bytes"] == p.lower_bound["max_recv_bytes"] == 512
    assert [b["name"] for b in p.baselines] == ["all_reduce_first", "dtensor_order"]
    assert p.baselines[0]["max_recv_bytes"] == 1536
    assert p.baselines[1]["max_recv_bytes"] == 768 and p.baselines[1]["ops"] == ["reduce-scatter"]
    rs = [op for op in p.steps[0].program if op["op"] == "reduce-scatter"]
    assert len(rs) == 1 and rs[0]["reduce"] == "sum"
    assert "reduce-scatter(" in p.emit("hlo") and "psum_scatter" in p.emit("jax")
    avg = reshard.parse('[Partial("avg"), Shard(0)]', (16, 16), mesh=mesh)
    assert avg.layout.reduce_op == "avg"
    with pytest.raises(NotImplementedError):
        reshard.convert(avg, "jax", mesh)  # unreduced axes hold sums only (the CLI's exit 1)
    # A target with a pending reduction: one reducing exchange. A plain source is routed tile by
    # tile: each x quarter of rows into the target part (x coordinate) whose devices hold it, so
    # every row stays where it is (0 B, the bound) and each device holds zeros in the other 12 of
    # 16 rows (docs/cost_model.md#partial-targets). Without a ragged exchange it is refused with
    # the bound.
    into = reshard.plan(dst, src)
    assert [s.op for s in into.steps] == ["exchange"]
    assert into.stats["max_recv_bytes"] == 0 and into.lower_bound["max_recv_bytes"] == 0
    for d in (0, 2):
        part = into.steps[0].exchange(d)
        assert part["fill"] == "sum" and part["local"] and not part["recv"]
    with pytest.raises(NotImplementedError, match="at least"):
        reshard.plan(dst, src, backend="jax-cpu")
