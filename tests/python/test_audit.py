"""reshard.jax.audit in real JAX 0.10.2: the canonical case, and a case XLA does well.
It calls the C++ audit through the extension module: no CLI is needed (the test hides it).
"""
import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import reshard.jax as reshard_audit  # noqa: E402 (audit is reshard.jax.audit)



@pytest.fixture(autouse=True)
def no_cli(monkeypatch):
    """The audit must not need the executable: PATH and RESHARD_CLI lead nowhere."""
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("RESHARD_CLI", raising=False)


def mesh():
    return Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def test_canonical_case():
    m = mesh()
    f = jax.jit(lambda v: v * 2, in_shardings=NamedSharding(m, P("y", None, "x")),
                out_shardings=NamedSharding(m, P(None, ("x", "y"), None)))
    report = reshard_audit.audit(f, jax.ShapeDtypeStruct((16, 16, 16), jnp.float32))
    assert report["totals"]["findings"] == 1, report
    finding = report["findings"][0]
    assert finding["kind"] == "full-rematerialization"
    assert finding["from"] == "{devices=[2,1,4]<=[4,2]T(1,0)}"
    assert finding["to"] == "{devices=[1,8,1]<=[8]}"
    assert finding["xla"]["max_recv_bytes"] == 14336
    assert finding["reshard"]["max_recv_bytes"] == 1792
    assert finding["reshard"]["collectives"] == ["all-to-all"]
    assert report["not_understood"] == []


def test_no_finding_at_the_lower_bound():
    m = mesh()
    f = jax.jit(lambda v: v + 1, in_shardings=NamedSharding(m, P("x", None)), out_shardings=NamedSharding(m, P()))
    report = reshard_audit.audit(f, jax.ShapeDtypeStruct((16, 16), jnp.float32), all_reshards=True)
    assert report["totals"]["findings"] == 0
    assert [x["kind"] for x in report["findings"]] == ["none"]


def test_needs_a_jitted_function():
    with pytest.raises(TypeError):
        reshard_audit.audit(lambda v: v, 1)


def test_a_function_that_already_ran_is_audited_from_its_hlo():
    """JAX's cache means XLA compiles and logs nothing the second time: the finding comes from the HLO."""
    m = mesh()
    f = jax.jit(lambda v: v * 2, in_shardings=NamedSharding(m, P("y", None, "x")),
                out_shardings=NamedSharding(m, P(None, ("x", "y"), None)))
    x = jax.device_put(np.ones((16, 16, 16), np.float32), NamedSharding(m, P("y", None, "x")))
    f(x)
    f(x)
    report = reshard_audit.audit(f, x)
    assert report["totals"]["findings"] == 1 and report["totals"]["log_lines"] == 0, report
    assert report["findings"][0]["kind"] == "full-rematerialization"
    assert report["findings"][0]["xla"]["max_recv_bytes"] == 14336


def test_a_program_fixed_with_reshard_jax_audits_clean():
    """reshard.jax's comparison compiles (explain() makes both) are not the user's program."""
    import reshard.jax as rj
    m = mesh()
    src, dst = NamedSharding(m, P("y", None, "x")), NamedSharding(m, P(None, ("x", "y"), None))
    f = rj.jit(lambda v: jax.lax.with_sharding_constraint(v * 2, dst), in_shardings=src)
    x = jax.ShapeDtypeStruct((16, 16, 16), jnp.float32, sharding=src)
    rj.explain(x, dst)
    report = reshard_audit.audit(f, x, all_reshards=True)
    assert report["totals"]["findings"] == 0, report
