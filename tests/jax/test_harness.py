"""Checks the real-JAX harness itself, without the CLI: the hand-written canonical
module passes with the minimal 1792 bytes against XLA's 14336, and wrong modules fail."""
import os

import pytest

import corpus
import harness

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def _case(name):
    return next(c for c in corpus.load_cases() if c.name == name)


def _module(fname):
    path = os.path.join(FIXTURES, fname)
    with open(path) as f:
        return harness.load_module(f.read(), path)


def test_canonical_handmade_module():
    s = harness.run_case(_case("canonical"), _module("canonical_emitted.py"), record=False)
    assert s["xla_bytes"] == 14336
    assert sorted(c["bytes"] for c in s["xla_collectives"]) == [6144, 8192]
    assert {c["op"] for c in s["xla_collectives"]} == {"all-gather"}
    assert s["ours_bytes"] == 1792
    assert [(c["op"], c["group_size"]) for c in s["ours_collectives"]] == [("all-to-all", 8)]


@pytest.mark.parametrize("name", ["canonical_hlo_on_mesh", "canonical_shardy", "canonical_dtensor"])
def test_canonical_other_notations_handmade_module(name):
    # the same layouts written in other notations reach the harness as the same specs
    s = harness.run_case(_case(name), _module("canonical_emitted.py"), record=False)
    assert (s["ours_bytes"], s["xla_bytes"]) == (1792, 14336)


def test_wrong_sharding_is_caught():
    with pytest.raises(harness.HarnessFailure, match="sharding"):
        harness.run_case(_case("canonical"), _module("wrong_sharding.py"), record=False)


def test_wrong_data_is_caught():
    with pytest.raises(harness.HarnessFailure, match="wrong data"):
        harness.run_case(_case("canonical"), _module("wrong_data.py"), record=False)


def test_identity_module_on_noop_case():
    # a module that returns its input is right exactly when nothing has to move
    s = harness.run_case(_case("identity_noop"), _module("wrong_sharding.py"), record=False)
    assert s["ours_bytes"] == 0 and s["xla_bytes"] == 0


def test_uneven_case_baseline_has_no_boundary_collectives():
    # padding at the jit boundary must cost nothing: a no-op reshard of an uneven layout
    # receives 0 bytes, in XLA's program and in ours (an identity module)
    import jax  # noqa: F401
    case = corpus.Case("uneven_identity", "10,6", "x=4", "", "P('x', None)", "P('x', None)", True, "test")
    s = harness.run_case(case, _module("wrong_sharding.py"), record=False)
    assert not s["src_even"] and not s["dst_even"]
    assert s["ours_bytes"] == 0 and s["xla_bytes"] == 0, s


def test_uneven_xla_baseline_runs():
    # the harness's uneven path: XLA's own program is exact, and costs what it costs
    case = _case("uneven_10x6_rows_to_cols")
    s = harness.run_case(case, lambda x, mesh: harness.wsc(x, harness.NamedSharding(
        mesh, harness.parse_spec(case.dst))), record=False)
    assert s["ours_bytes"] == s["xla_bytes"] > 0


JAX_CASES = [c for c in corpus.load_cases() if c.jax]


@pytest.mark.parametrize("case", JAX_CASES, ids=[c.name for c in JAX_CASES])
def test_harness_on_every_jax_case_with_xla_as_module(case):
    # XLA's own resharding, wrapped as an emitted module, passes every jax=1 case with
    # exactly XLA's bytes: the harness handles the case (mesh, device order, uneven
    # padding, notation conversion) and is exact about data and sharding.
    dst_spec = harness.spec_of(case, case.dst)

    def xla_module(x, mesh):
        return harness.wsc(x, harness.NamedSharding(mesh, dst_spec))

    s = harness.run_case(case, xla_module, record=False)
    assert s["ours_bytes"] == s["xla_bytes"]
