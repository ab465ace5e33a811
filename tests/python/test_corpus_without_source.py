"""The corpus's single-mesh cases (tests/data/collective_cases.tsv, jax=1) through
reshard.jax.reshard inside jax.jit, with no source=: the source reaches the op from the compiler.
Each result equals the target exactly, device by device, and the compiled program never receives
more bytes into a device than XLA's with_sharding_constraint (the real-JAX suite's harness,
tests/jax/harness.py, checks both)."""
import os
import sys

import pytest

from jax.sharding import NamedSharding

import reshard.jax as rj

# The real-JAX suite's corpus reader and harness.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jax"))
import corpus  # noqa: E402
import harness  # noqa: E402

CASES = [c for c in corpus.load_cases() if c.jax]
_VERDICTS: dict = {}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case):
    dst_spec = harness.spec_of(case, case.dst)
    s = harness.run_case(case, lambda a, mesh: rj.reshard(a, NamedSharding(mesh, dst_spec)), record=False)
    _VERDICTS[case.name] = (s["ours_bytes"], s["xla_bytes"])


def test_counts_after_the_cases():
    """Runs last: every case ran; none was worse (asserted per case); some strictly better."""
    if len(_VERDICTS) < len(CASES):
        pytest.skip("only %d of %d cases ran" % (len(_VERDICTS), len(CASES)))
    assert len(CASES) == 89
    better = sum(o < x for o, x in _VERDICTS.values())
    print("\ncorpus without source=: %d cases, %d strictly fewer bytes than XLA, %d equal, 0 more" %
          (len(CASES), better, len(CASES) - better))
    assert better >= 25
