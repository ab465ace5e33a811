"""pytest setup for the real-JAX tests: host CPU devices, import path, JSON summary."""
import json
import os
import sys

import pytest

# XLA reads this once, when jax first initializes its backend.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_sessionfinish(session, exitstatus):
    # Under pytest-xdist (tests/run_pytest_cpu.sh) each worker ran some of the cases: it hands
    # their summaries to the controller, which writes the file.
    worker_output = getattr(session.config, "workeroutput", None)
    path = os.environ.get("RESHARD_JAX_SUMMARY")
    if worker_output is None and not path:
        return
    try:
        import harness
    except ImportError:
        return
    if worker_output is not None:
        worker_output["reshard_summary"] = json.dumps(harness.SUMMARY, default=str)
        return
    cases = list(harness.SUMMARY.values())
    summary = {"cases": cases,
               "passed": sum(1 for c in cases if c.get("ok")),
               "failed": sum(1 for c in cases if not c.get("ok"))}
    with open(path, "w") as f:
        json.dump(summary, f, indent=1, default=str)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    payload = getattr(node, "workeroutput", {}).get("reshard_summary")
    if not payload or payload == "{}":
        return
    try:
        import harness
    except ImportError:
        return
    harness.SUMMARY.update(json.loads(payload))
