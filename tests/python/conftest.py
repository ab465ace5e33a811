"""pytest setup for the Python package's tests: 8 host CPU devices, the import path, the summary.

RESHARD_PY_SUMMARY=path writes the byte comparison of test_reshard_random.py (cases strictly
better / equal / worse than with_sharding_constraint) as JSON; the counts are printed either way.
"""
import json
import os
import sys

import pytest

# XLA reads this once, when jax first initializes its backend.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_sessionfinish(session, exitstatus):
    # Under pytest-xdist (tests/run_pytest_cpu.sh) each worker ran some of the cases: it hands
    # their results to the controller, which prints the summary.
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        import cases
        out["reshard_results"] = json.dumps(cases.results(), default=str)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    import cases
    cases.add_results(json.loads(getattr(node, "workeroutput", {}).get("reshard_results", "{}")))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):  # an xdist worker: the controller prints the whole summary
        return
    import cases
    s = cases.summary()
    if not s["cases"]:
        return
    line = ("reshard.jax vs with_sharding_constraint, bytes into each device: %d cases, %d strictly better, "
            "%d equal, %d worse (%d uneven, %d with a replicated side; reshard's plan used in %d)" %
            (s["cases"], s["better"], s["equal"], s["worse"], s["uneven"], s["replicated"], s["choices"].get("reshard", 0)))
    terminalreporter.write_line(line)
    path = os.environ.get("RESHARD_PY_SUMMARY")
    if path:
        with open(path, "w") as f:
            json.dump(s, f, indent=1, default=str)
        terminalreporter.write_line("summary written to %s" % path)
