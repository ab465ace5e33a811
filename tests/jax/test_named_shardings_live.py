"""Random NamedShardings against live JAX 0.10.2: boxes, HLO text and Shardy text.

For 2,000 random NamedShardings over 8 CPU devices (meshes of 1 to 4 axes with
size-1 axes, permuted device orders, ranks 0 to 3, tuples and unused axes),
JAX says which device holds which box (Sharding.devices_indices_map), its HLO
text (_to_xla_hlo_sharding; with _logical_device_ids where the devices are
permuted) and its Shardy text (_to_sdy_sharding, the attribute a lowered
module carries: checked on a sample by lowering a jitted identity). The CLI
must agree: `show --json` boxes (read from the spec, or from JAX's own Shardy
text with its inline mesh), `convert --to hlo` and `convert --to shardy`.

A third of the cases go through Shardy sub-axes: JAX states them over a mesh
with the axis split into its factors (x=4 -> x_0=2,x_1=2), and reshard reads
and prints them as sub-axes of the unsplit axis ("x":(1)2, "x":(2)2), which
is the same sharding (Shardy's docs: [{"x"}, {"y"}] on x=4,y=2 is
[{"d":(1)4}, {"d":(4)2}] on d=8).

Also: 600 random HLO texts (V1 lists and V2 iotas, with replication) through
`convert --to hlo` against jaxlib's HloSharding.from_string, then str.

Shapes split evenly, since JAX 0.10.2 refuses uneven ones in
devices_indices_map. The CLI calls run on a few threads; the whole file takes
about a minute on 2 cores.
"""
import concurrent.futures
import json
import math
import os
import random
import re

import numpy as np
import pytest

import corpus

jax = pytest.importorskip("jax")
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402
from jax._src.interpreters import mlir  # noqa: E402
from jaxlib import xla_client  # noqa: E402

N_NAMED = 2000
N_HLO = 600
NAMES = ["x", "y", "z", "data", "model", "one", "e"]
WORKERS = 4


def _devices():
    devs = jax.devices()
    if len(devs) < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return devs[:8]


def _fmt_entry(e):
    if e is None:
        return "None"
    if isinstance(e, tuple):
        return "(" + ", ".join("'%s'" % a for a in e) + ("," if len(e) == 1 else "") + ")"
    return "'%s'" % e


def _random_mesh(rng):
    """[(name, size)] with product <= 8, size-1 axes common."""
    while True:
        k = rng.randint(1, 4)
        sizes = [rng.choice([1, 1, 2, 2, 2, 4, 4, 8]) for _ in range(k)]
        if math.prod(sizes) <= 8:
            return list(zip(rng.sample(NAMES, k), sizes))


def _random_spec(rng, names, ndim):
    unused = names[:]
    rng.shuffle(unused)
    spec = []
    for _ in range(rng.randint(0, ndim)):
        r = rng.random()
        if r < 0.25 or not unused:
            spec.append(None)
        elif r < 0.6:
            spec.append(unused.pop())
        else:
            spec.append(tuple(unused.pop() for _ in range(rng.randint(1, min(3, len(unused))))))
    return tuple(spec)


class Case:
    """One NamedSharding: JAX's view of it, and the CLI arguments that state it."""

    def __init__(self, rng, devs, index):
        self.index = index
        axes = _random_mesh(rng)
        n = math.prod(s for _, s in axes)
        self.ids = rng.sample(range(8), n) if rng.random() < 0.6 else list(range(n))
        # Sub-axes: split one axis of size 4 or 8 into factors for JAX.
        self.split = {}  # axis name -> [(jax name, pre_size, size)]
        jax_axes = []
        splittable = [a for a in axes if a[1] in (4, 8)]
        if splittable and rng.random() < 0.5:
            name, size = rng.choice(splittable)
            factors = [2, size // 2] if size == 4 or rng.random() < 0.5 else [size // 2, 2]
            if size == 8 and rng.random() < 0.4:
                factors = [2, 2, 2]
            pre, parts = 1, []
            for i, f in enumerate(factors):
                parts.append(("%s_%d" % (name, i), pre, f))
                pre *= f
            self.split[name] = parts
        for name, size in axes:
            if name in self.split:
                jax_axes += [(j, f) for j, _, f in self.split[name]]
            else:
                jax_axes.append((name, size))
        self.axes = axes
        self.ndim = rng.choice([0, 1, 1, 2, 2, 3, 3])
        self.spec = _random_spec(rng, [a for a, _ in jax_axes], self.ndim)
        mesh = Mesh(np.array([devs[i] for i in self.ids], dtype=object).reshape([s for _, s in jax_axes]),
                    tuple(a for a, _ in jax_axes))
        sizes = dict(jax_axes)
        shape = []
        for d in range(self.ndim):
            e = self.spec[d] if d < len(self.spec) else None
            k = math.prod(sizes[a] for a in (e if isinstance(e, tuple) else (e,) if e else ()))
            shape.append(0 if rng.random() < 0.03 else k * rng.randint(1, 3))
        self.shape = shape
        permuted = self.ids != list(range(n))
        ns = NamedSharding(mesh, P(*self.spec))
        ns_ids = NamedSharding(mesh, P(*self.spec), _logical_device_ids=tuple(self.ids))
        self.jax_boxes = {d.id: [[0 if s.start is None else s.start, n if s.stop is None else s.stop]
                                 for s, n in zip(idx, shape)]
                          for d, idx in ns.devices_indices_map(tuple(shape)).items()}
        # JAX prints mesh positions; with _logical_device_ids, device ids.
        self.jax_hlo = str((ns_ids if permuted else ns)._to_xla_hlo_sharding(self.ndim))
        self.jax_sdy = str(ns._to_sdy_sharding(self.ndim).build({}))  # in the caller's MLIR context
        self.jax_sdy_ids = str(ns_ids._to_sdy_sharding(self.ndim).build({}))
        self.named = ns

    # reshard's side -------------------------------------------------------

    def axis_text(self, jax_name):
        """A JAX axis name as reshard's Shardy text writes it over the unsplit mesh."""
        for name, parts in self.split.items():
            for j, pre, f in parts:
                if j == jax_name:
                    return '"%s":(%d)%d' % (name, pre, f)
        return '"%s"' % jax_name

    def dims_text(self, dims):
        """Shardy dim list "[{...}, ...]" over the unsplit mesh."""
        return "[" + ", ".join("{" + ", ".join(self.axis_text(a) for a in d) + "}" for d in dims) + "]"

    def spec_dims(self):
        out = []
        for d in range(self.ndim):
            e = self.spec[d] if d < len(self.spec) else None
            out.append(list(e) if isinstance(e, tuple) else [e] if e else [])
        return out

    def sharding_text(self):
        """The sharding as reshard reads it: the PartitionSpec, or Shardy with sub-axes."""
        if self.split:
            return self.dims_text(self.spec_dims())
        return "P(" + ", ".join(_fmt_entry(e) for e in self.spec) + ")"

    def common(self, devices=True):
        args = ["--shape", ",".join(map(str, self.shape)), "--mesh", ",".join("%s=%d" % a for a in self.axes)]
        if devices and self.ids != list(range(len(self.ids))):
            args += ["--devices", ",".join(map(str, self.ids))]
        return args

    def expected_shardy(self):
        """JAX's Shardy dims, written over the unsplit mesh (sub-axes for split axes)."""
        m = re.fullmatch(r'#sdy\.sharding<mesh<.*?>, (\[.*\])>', self.jax_sdy)
        assert m, self.jax_sdy
        dims = [[a for a in re.findall(r'"([^"]+)"', d)] for d in re.findall(r"\{([^}]*)\}", m.group(1))]
        return "#sdy.sharding<@mesh, %s>" % self.dims_text(dims)

    def describe(self):
        return "mesh %s ids %s shape %s spec %s split %s" % (self.axes, self.ids, self.shape, self.spec, self.split)


def _boxes(show_json):
    out = {}
    for dev in json.loads(show_json)["devices"]:
        boxes = dev["boxes"]
        assert len(boxes) <= 1, dev
        out[dev["id"]] = [list(iv) for iv in boxes[0]] if boxes else None
    return out


def _jax_boxes_normalized(case):
    # A device whose box is empty holds nothing; reshard lists no box for it.
    return {d: (None if any(lo >= hi for lo, hi in b) else b) for d, b in case.jax_boxes.items()}


@pytest.fixture(scope="module")
def cases():
    devs = _devices()
    rng = random.Random(20250610)
    with mlir.make_ir_context():
        return [Case(rng, devs, i) for i in range(N_NAMED)]


def _run_all(calls):
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(lambda args: corpus.run_cli(args), calls))


def test_random_named_shardings_match_jax(cases):
    assert len(cases) >= 2000
    assert sum(1 for c in cases if c.split) >= 300
    assert sum(1 for c in cases if c.ids != sorted(c.ids)) >= 500
    assert sum(1 for c in cases if any(s == 1 for _, s in c.axes)) >= 500
    calls, checks = [], []
    for c in cases:
        # Boxes: from the spec (or sub-axis Shardy text), and every fourth case from JAX's own Shardy text.
        if c.index % 4 == 3:
            calls.append(["show", "--json", "--shape", ",".join(map(str, c.shape)), "--sharding", c.jax_sdy_ids])
        else:
            calls.append(["show", "--json"] + c.common() + ["--sharding", c.sharding_text()])
        checks.append((c, "boxes"))
        # HLO: mesh positions without --devices (as JAX prints), ids with them (_logical_device_ids).
        calls.append(["convert"] + c.common() + ["--sharding", c.sharding_text(), "--to", "hlo"])
        checks.append((c, "hlo"))
        calls.append(["convert"] + c.common() + ["--sharding", c.sharding_text(), "--to", "shardy"])
        checks.append((c, "shardy"))
    results = _run_all(calls)
    failures = []
    for (c, what), args, r in zip(checks, calls, results):
        if r.returncode != 0:
            failures.append("%s: %s\n  $ %s\n  %s" % (what, c.describe(), corpus.shell_line(args), r.stderr.strip()))
            continue
        if what == "boxes":
            got, want = _boxes(r.stdout), _jax_boxes_normalized(c)
        elif what == "hlo":
            got, want = r.stdout.strip(), c.jax_hlo
        else:
            got, want = r.stdout.strip(), c.expected_shardy()
        if got != want:
            failures.append("%s: %s\n  $ %s\n  reshard: %s\n  jax:     %s" % (what, c.describe(), corpus.shell_line(args),
                                                                           got, want))
    assert not failures, "%d of %d checks differ from JAX:\n%s" % (len(failures), len(calls), "\n".join(failures[:10]))


def test_shardy_text_is_what_a_lowered_module_carries(cases):
    """_to_sdy_sharding is the attribute JAX writes into the module: check a sample by lowering."""
    for c in cases[:40]:
        if c.ndim == 0:
            continue
        f = jax.jit(lambda a: a, in_shardings=c.named, out_shardings=c.named)
        text = f.lower(jax.ShapeDtypeStruct(tuple(c.shape), np.float32)).as_text()
        m = re.search(r"sdy\.sharding = #sdy\.sharding<@\w+, (\[[^>]*\])>", text)
        assert m, text
        assert c.jax_sdy.endswith(", %s>" % m.group(1)), (c.jax_sdy, m.group(1))


def _random_hlo_text(rng):
    """A tiled HLO text over 8 or fewer devices, as XLA accepts it."""
    while True:
        rank = rng.randint(0, 3)
        dims = [rng.choice([1, 1, 2, 2, 4]) for _ in range(rank)]
        repl = rng.random() < 0.4
        if repl:
            dims.append(rng.choice([1, 2, 2, 4]))
        n = math.prod(dims)
        if n > 8 or n < 2 or not dims:
            continue
        if rng.random() < 0.5:
            reshape = []
            left = n
            while left > 1:
                f = rng.choice([f for f in (2, 4, 8) if left % f == 0])
                reshape.append(f)
                left //= f
            if rng.random() < 0.3:
                reshape.insert(rng.randint(0, len(reshape)), 1)
            perm = list(range(len(reshape)))
            rng.shuffle(perm)
            t = "<=[%s]" % ",".join(map(str, reshape)) + ("T(%s)" % ",".join(map(str, perm)) if len(reshape) > 1 else "")
        else:
            ids = rng.sample(range(8), n)
            t = ",".join(map(str, ids))
        sub = ""
        if repl:
            sub = " last_tile_dim_replicate" if rng.random() < 0.6 else " last_tile_dims={replicated}"
        return rank, "{devices=[%s]%s%s}" % (",".join(map(str, dims)), t, sub)


def test_random_hlo_texts_print_as_xla_prints_them():
    rng = random.Random(424242)
    texts, calls = [], []
    while len(texts) < N_HLO:
        rank, text = _random_hlo_text(rng)
        try:
            want = str(xla_client.HloSharding.from_string(text))
        except Exception:  # XLA refuses it (one device): not a case
            continue
        texts.append((text, want))
        calls.append(["convert", "--shape", ",".join(["8"] * rank), "--sharding", text, "--to", "hlo"])
    failures = []
    for (text, want), args, r in zip(texts, calls, _run_all(calls)):
        got = r.stdout.strip() if r.returncode == 0 else "exit %d: %s" % (r.returncode, r.stderr.strip())
        if got != want:
            failures.append("  $ %s\n  reshard: %s\n  xla:     %s" % (corpus.shell_line(args), got, want))
    assert not failures, "%d of %d texts differ from XLA:\n%s" % (len(failures), len(texts), "\n".join(failures[:10]))
