"""examples/jax_canonical.py runs and shows one all-to-all of 1792 bytes beside XLA's 14336."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_jax_canonical_example():
    cli = os.environ.get("RESHARD_CLI", os.path.join(ROOT, "build", "reshard"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "jax_canonical.py"), "--reshard", cli],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reshard (--emit jax)         1792 bytes into each device: all-to-all (1792 B, group of 8)" in r.stdout, r.stdout
    assert "XLA (sharding constraint)   14336 bytes" in r.stdout, r.stdout
