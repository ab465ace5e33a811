"""reshard.audit: where a jitted JAX function reshards, what XLA pays, what reshard would pay.

    from reshard.audit import audit
    report = audit(jax.jit(f, in_shardings=..., out_shardings=...), x, y)
    for f in report["findings"]:
        print(f["kind"], f["instruction"], f["from"], "->", f["to"],
              f["xla"]["max_recv_bytes"], "->", f["reshard"]["max_recv_bytes"])

audit(jitted_fn, *args, **kwargs) compiles jitted_fn for args (arrays, or
jax.ShapeDtypeStruct with shardings), and hands what XLA produced to the C++
audit (include/reshard/audit.h) through the extension module: the compiled
module's HLO text (with its large constants, so offset tables of 16 or more
entries are readable) and XLA's log lines written to standard error during
the compile ("[SPMD] Involuntary full rematerialization ..."; they are still
shown). It returns the JSON object `reshard audit --json` prints for the same
texts, as docs/audit.md describes it: {"findings", "totals", "modules",
"not_understood", "notes"}. No executable is needed: `pip install .` is
enough.

Options: all_reshards=True also lists the reshards that move no more than
reshard's plan (kind "none"); target= is the CLI's --for ("jax-cpu" by default:
structured collectives only).

Errors: TypeError if jitted_fn has no .lower (wrap it in jax.jit); ValueError
if the HLO text is broken (the audit's message). A function that JAX has
compiled before may come from JAX's cache without XLA logging again; the HLO
is read all the same.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from typing import Any

from . import _core

__all__ = ["audit", "hlo_text"]


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


# File descriptor 2 is the process's: one capture at a time, or a second would restore the
# first's temporary file as the process's standard error.
_capturing = threading.Lock()


def _compile_capturing_stderr(lowered, emit: bool = True):
    """lowered.compile(), with what XLA writes to file descriptor 2 meanwhile (re-emitted afterwards
    unless emit=False: then the caller decides; other threads' writes meanwhile are in it too)."""
    with _capturing:
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
    if log and emit:
        sys.stderr.write(log)
        sys.stderr.flush()
    return compiled, log


def audit(jitted_fn, *args, all_reshards: bool = False, target: str = "jax-cpu", **kwargs) -> dict[str, Any]:
    """Compiles jitted_fn(*args, **kwargs) and returns the audit of its HLO and XLA's log (the JSON object of
    `reshard audit --json`), computed by the C++ library in this process."""
    if not hasattr(jitted_fn, "lower"):
        raise TypeError("audit() takes a jitted function (jax.jit(f, ...)), got %r" % (jitted_fn,))
    compiled, log = _compile_capturing_stderr(jitted_fn.lower(*args, **kwargs))
    texts = [("module.hlo.txt", hlo_text(compiled))]
    if log:
        texts.append(("xla.log", log))
    return json.loads(_core.audit_json(texts, target, all_reshards))
