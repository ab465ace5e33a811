"""The corpus itself: every row verifies with the CLI, and the jax column is right.

jax=1 exactly when the row has one named mesh (x=4,y=2 form) of at most 8 devices
and `reshard convert --to jax` states both sides over it. Needs build/reshard
(or RESHARD_CLI); no JAX."""
import math

import pytest

import corpus

CASES = corpus.load_cases()


def test_corpus_size_and_coverage():
    assert len(CASES) >= 70
    assert any(c.name == "canonical" for c in CASES)
    assert sum(c.jax for c in CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_row_verifies(case):
    args = ["verify"] + case.pair_args()
    r = corpus.run_cli(args)
    assert r.returncode == 0, "$ %s\n%s%s" % (corpus.shell_line(args), r.stdout, r.stderr)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_jax_flag(case):
    named = bool(case.mesh) and not any(ch in case.mesh for ch in '<["')
    expressible = named and math.prod(s for _, s in case.mesh_axes) <= 8
    if expressible:
        for text in (case.src, case.dst):
            r = corpus.run_cli(["convert"] + case.common_args() + ["--sharding", text, "--to", "jax"])
            if r.returncode != 0:
                expressible = False
    assert case.jax == expressible, "%s: jax column says %d, the CLI says %d" % (
        case.name, case.jax, expressible)
