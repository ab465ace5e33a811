"""reshard.audit: where a jitted JAX function reshards, what XLA pays, what reshard would pay.

    from reshard.audit import audit
    report = audit(jax.jit(f, in_shardings=..., out_shardings=...), x, y)
    for f in report["findings"]:
        print(f["kind"], f["instruction"], f["from"], "->", f["to"],
              f["xla"]["max_recv_bytes"], "->", f["reshard"]["max_recv_bytes"])

audit(jitted_fn, *args, **kwargs) compiles jitted_fn for args (arrays, or
jax.ShapeDtypeStruct with shardings), and runs `reshard audit --json` on what
XLA produced: the compiled module's HLO text (with its large constants, so
offset tables of 16 or more entries are readable) and XLA's log lines written
to standard error during the compile ("[SPMD] Involuntary full
rematerialization ..."; they are still shown). It returns the CLI's JSON
object, as docs/audit.md describes it: {"findings", "totals", "modules",
"not_understood", "notes"}.

The CLI is $RESHARD_CLI, else `reshard` on PATH. It is a separate process on
purpose: the auditor is the C++ library behind `reshard audit`, and this
module only hands it XLA's text.

Options: all_reshards=True also lists the reshards that move no more than
reshard's plan (kind "none"); target= is the CLI's --for ("jax-cpu" by default:
structured collectives only).

Errors: TypeError if jitted_fn has no .lower (wrap it in jax.jit); RuntimeError
if the CLI is not found or fails (its message included). A function that JAX
has compiled before may come from JAX's cache without XLA logging again; the
HLO is read all the same.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Optional

__all__ = ["audit", "hlo_text"]


def _cli(cli: Optional[str]) -> str:
    path = cli or os.environ.get("RESHARD_CLI") or shutil.which("reshard")
    if not path:
        raise RuntimeError("reshard.audit needs the reshard CLI: set RESHARD_CLI or put `reshard` on PATH")
    return path


def hlo_text(compiled) -> str:
    """The compiled modules' HLO text with large constants printed (compiled.as_text() elides them)."""
    try:
        from jaxlib import _hlo  # jaxlib's printer; private, so fall back if it moves
        options = _hlo.HloPrintOptions()
        options.print_large_constants = True
        modules = compiled.runtime_executable().hlo_modules()
        return "\n".join(m.to_string(options) for m in modules)
    except Exception:  # noqa: BLE001 (any failure: the public text is still right, only terser)
        return compiled.as_text()


def _compile_capturing_stderr(lowered):
    """lowered.compile(), with what XLA writes to file descriptor 2 meanwhile (re-emitted afterwards)."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            compiled = lowered.compile()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        log = tmp.read().decode("utf-8", errors="replace")
    if log:
        sys.stderr.write(log)
        sys.stderr.flush()
    return compiled, log


def audit(jitted_fn, *args, cli: Optional[str] = None, all_reshards: bool = False, target: str = "jax-cpu",
          **kwargs) -> dict[str, Any]:
    """Compiles jitted_fn(*args, **kwargs) and returns `reshard audit --json` of its HLO and XLA's log."""
    if not hasattr(jitted_fn, "lower"):
        raise TypeError("audit() takes a jitted function (jax.jit(f, ...)), got %r" % (jitted_fn,))
    exe = _cli(cli)
    compiled, log = _compile_capturing_stderr(jitted_fn.lower(*args, **kwargs))
    text = hlo_text(compiled)
    with tempfile.TemporaryDirectory() as tmp:
        hlo_path = os.path.join(tmp, "module.hlo.txt")
        log_path = os.path.join(tmp, "xla.log")
        with open(hlo_path, "w", encoding="utf-8") as f:
            f.write(text)
        with open(log_path, "w", encoding="utf-8") as f:
            f.write(log)
        cmd = [exe, "audit", "--json", "--for", target] + (["--all"] if all_reshards else []) + [hlo_path, log_path]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("reshard audit failed (exit %d): %s" % (r.returncode, r.stderr.strip()))
    return json.loads(r.stdout)
