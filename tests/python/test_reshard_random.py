"""250 random pairs of layouts: 200 drawn widely (even and uneven, replicated and not; most on
one mesh, some with the target on another mesh over the same device list) and 50 that rearrange
every axis of a 2- or 3-axis mesh (cases.rich_pairs), each resharded by reshard.jax.reshard inside
jax.jit: each result equals jax.device_put(x, target) exactly, and the bytes each device receives
through the compiled program's collectives are never more than with with_sharding_constraint.
The counts (strictly better / equal / worse) are printed and written to $RESHARD_PY_SUMMARY."""
import pytest

import cases

PAIRS = cases.random_pairs(200) + cases.rich_pairs(50, seed=cases.SEED + 1)
N = len(PAIRS)


@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_pair(pair):
    cases.run_pair(pair)


def test_pairs_cover_the_space():
    assert N >= 200
    uneven = sum(not (p.src_even and p.dst_even) for p in PAIRS)
    replicated = sum(cases.is_replicated(p.src.mesh, p.src.spec, p.ndim) or
                     cases.is_replicated(p.dst.mesh, p.dst.spec, p.ndim) for p in PAIRS)
    other_mesh = sum(p.src.mesh != p.dst.mesh for p in PAIRS)
    assert uneven >= 40 and N - uneven >= 40, uneven
    assert replicated >= 40 and N - replicated >= 40, replicated
    assert other_mesh >= 15, other_mesh


def test_summary_after_the_pairs():
    """Runs last in this file: every pair was compared and none was worse; reshard's plan was
    strictly better in some (most random pairs move one axis, which XLA already does with the
    fewest bytes)."""
    s = cases.summary()
    if s["cases"] < N:
        pytest.skip("only %d of %d pairs ran (a -k selection)" % (s["cases"], N))
    assert s["worse"] == 0
    assert s["better"] >= 25, s["better"]
    assert s["better"] + s["equal"] == N
