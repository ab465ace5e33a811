"""Reads tests/data/collective_cases.tsv and runs the `reshard` CLI on its rows."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(ROOT, "tests", "data", "collective_cases.tsv")
COLUMNS = ["name", "shape", "mesh", "devices", "from", "to", "jax", "origin"]


@dataclass(frozen=True)
class Case:
    name: str
    shape: str
    mesh: str
    devices: str
    src: str
    dst: str
    jax: bool
    origin: str

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.shape.split(",") if d.strip())

    @property
    def mesh_axes(self) -> list[tuple[str, int]]:
        """[(name, size), ...] of a mesh written x=4,y=2 (empty for no mesh)."""
        out = []
        for part in self.mesh.split(","):
            part = part.strip()
            if part:
                n, s = part.split("=")
                out.append((n.strip(), int(s)))
        return out

    @property
    def device_ids(self) -> list[int] | None:
        return [int(d) for d in self.devices.split(",")] if self.devices.strip() else None

    def common_args(self) -> list[str]:
        args = ["--shape", self.shape]
        if self.mesh:
            args += ["--mesh", self.mesh]
        if self.devices:
            args += ["--devices", self.devices]
        return args

    def pair_args(self) -> list[str]:
        return self.common_args() + ["--from", self.src, "--to", self.dst]


def load_cases(path: str = CORPUS) -> list[Case]:
    cases = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != len(COLUMNS):
                raise ValueError("%s:%d: %d columns, expected %d" % (path, lineno, len(cols), len(COLUMNS)))
            name, shape, mesh, devices, src, dst, jax_flag, origin = cols
            if jax_flag not in ("0", "1"):
                raise ValueError("%s:%d: jax column must be 0 or 1" % (path, lineno))
            cases.append(Case(name, shape, mesh, devices, src, dst, jax_flag == "1", origin))
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError("duplicate case names: %s" % sorted(dup))
    return cases


def cli_path() -> str:
    p = os.environ.get("RESHARD_CLI", os.path.join(ROOT, "build", "reshard"))
    return p if os.path.isabs(p) else os.path.join(ROOT, p)


def run_cli(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([cli_path()] + args, capture_output=True, text=True, timeout=timeout)


def _quote(a: str) -> str:
    import re
    import shlex
    if re.fullmatch(r"[\w@%+=:,./-]+", a):
        return a
    if "'" in a and not any(c in a for c in '"$`\\!'):
        return '"' + a + '"'
    return shlex.quote(a)


def shell_line(args: list[str]) -> str:
    """The command as one shell line (for error messages), quoted for bash."""
    return " ".join(_quote(a) for a in [cli_path()] + args)
