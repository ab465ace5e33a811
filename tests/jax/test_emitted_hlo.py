"""`reshard plan --emit hlo` on every corpus case must give HLO text that XLA's own
parser (jaxlib) accepts, and whose collectives tests/jax/hlo_bytes.py can count.
For the canonical case: exactly one all-to-all, no all-gather, 1792 bytes.
Cases with no structured plan (layouts on different device sets that differ in
more than their devices) must say so with exit 1, and plan as one ragged exchange.

XLA's parser in jaxlib 0.10.2: jaxlib.xla_client.hlo.hlo_module_from_text(text)
(the same function as jax._src.lib.xla_client.hlo.hlo_module_from_text); it
raises jaxlib's JaxRuntimeError (INVALID_ARGUMENT) with line and column on bad text.

Environment: RESHARD_CLI (default build/reshard).
"""
import collections

import pytest
from jaxlib import xla_client

import corpus
import hlo_bytes

CASES = corpus.load_cases()


ONLY_RAGGED = "only the ragged exchange moves this data"


def emit_hlo(case):
    """The emitted HLO, or None where the CLI says (exit 1) that no structured
    plan exists; that claim is checked: planned for any target, the case must
    then be one ragged exchange step."""
    args = ["plan"] + case.pair_args() + ["--emit", "hlo"]
    r = corpus.run_cli(args)
    if r.returncode == 1 and ONLY_RAGGED in r.stderr:
        j = corpus.run_cli(["plan"] + case.pair_args() + ["--json"])
        assert j.returncode == 0, j.stderr
        import json
        steps = [s["op"] for s in json.loads(j.stdout)["steps"]]
        assert steps == ["exchange"], "%s: the CLI said only a ragged exchange exists, but plans %s" % (case.name, steps)
        return None
    assert r.returncode == 0, "the CLI failed (exit %d):\n$ %s\n%s%s" % (
        r.returncode, corpus.shell_line(args), r.stdout[-2000:], r.stderr[-2000:])
    return r.stdout


def parse_hlo(text):
    """XLA's own parser; returns the module."""
    try:
        return xla_client.hlo.hlo_module_from_text(text)
    except Exception as e:  # noqa: BLE001 (JaxRuntimeError; show the text with the error)
        pytest.fail("XLA's HLO parser refused the emitted text: %s\n---\n%s" % (e, text[:4000]))


def opcode_counts(module):
    counts = collections.Counter()
    for comp in module.computations():
        for ins in comp.instructions():
            counts[str(ins.opcode).split(".")[-1]] += 1
    return counts


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_emitted_hlo_parses(case):
    text = emit_hlo(case)
    if text is None:
        return  # no structured plan: checked inside emit_hlo
    parse_hlo(text)
    hlo_bytes.collectives(text)  # every operand resolves, every group size reads


def test_canonical_hlo_is_one_all_to_all():
    case = next(c for c in CASES if c.name == "canonical")
    text = emit_hlo(case)
    counts = opcode_counts(parse_hlo(text))
    assert counts["kAllToAll"] == 1, counts
    assert counts["kAllGather"] == 0 and counts["kAllGatherStart"] == 0, counts
    cs = hlo_bytes.collectives(text)
    assert [c["op"] for c in cs] == ["all-to-all"], cs
    assert hlo_bytes.recv_bytes(text) == 1792


def test_parser_entry_point_rejects_bad_text():
    # the harness's parser must really check: a wrong opcode is refused
    with pytest.raises(Exception, match="opcode"):
        xla_client.hlo.hlo_module_from_text(
            "HloModule m\n\nENTRY e {\n  p = f32[8]{0} parameter(0)\n  ROOT r = f32[8]{0} bogus(p)\n}\n")
