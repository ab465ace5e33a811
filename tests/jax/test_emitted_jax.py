"""Real-JAX check of `reshard plan --for jax-cpu --emit jax` on every jax=1 corpus case.

For each case the emitted module's reshard(x, mesh) must give exactly x in the
target sharding, and its compiled program must receive no more bytes per device
than XLA's with_sharding_constraint (see harness.py for the details, including
uneven layouts).

Environment:
  RESHARD_CLI          the CLI (default build/reshard)
  RESHARD_JAX_MODULE   use this module file instead of the CLI's output, for the cases
                       named in RESHARD_JAX_CASES (comma list, default: canonical);
                       the other cases are skipped
  RESHARD_JAX_SUMMARY  write a JSON summary here (per case: bytes ours/XLA, both collective
                       lists, the plan's lower bound)
"""
import os

import pytest

import corpus
import harness

CASES = [c for c in corpus.load_cases() if c.jax]


def _selected(case):
    if not os.environ.get("RESHARD_JAX_MODULE"):
        return True
    names = os.environ.get("RESHARD_JAX_CASES", "canonical").split(",")
    return case.name in [n.strip() for n in names]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_emitted_jax(case):
    if not _selected(case):
        pytest.skip("RESHARD_JAX_MODULE is set: only %s run" % os.environ.get("RESHARD_JAX_CASES", "canonical"))
    source, filename = harness.emitted_source(case)
    fn = harness.load_module(source, filename)
    s = harness.run_case(case, fn)
    # recorded, not asserted: uneven layouts move padding, so ours may exceed the bound
    s["lower_bound"] = harness.plan_lower_bound(case)
    print("%s: ours %s B (%s), XLA %s B (%s), lower bound %s B" % (
        case.name, s["ours_bytes"], [c["op"] for c in s["ours_collectives"]],
        s["xla_bytes"], [c["op"] for c in s["xla_collectives"]], s["lower_bound"]))
