"""Realistic programs (tests/python/realistic_programs.py), run with XLA's warnings on: an MLP
training step with FSDP and tensor-parallel shardings, a transformer block's gradient and a scan
over layers. Under jax.jit each logs "Involuntary full rematerialization"; under reshard.jax.jit
none does, each receives fewer bytes into a device, and the values agree."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_realistic_programs():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    r = subprocess.run([sys.executable, os.path.join(HERE, "realistic_programs.py")], env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [x["name"] for x in results] == ["mlp_train_step", "transformer_block_grad", "scan_over_layers"]
    logs = {}
    for chunk in r.stderr.split("== ")[1:]:
        head, _, body = chunk.partition("\n")
        logs[head.strip()] = body
    for x in results:
        ours, xla = x["reshard.jax.jit"], x["jax.jit"]
        assert "Involuntary full rematerialization" in logs["%s jax.jit" % x["name"]], x["name"]
        assert "Involuntary full rematerialization" not in logs["%s reshard.jax.jit" % x["name"]], x["name"]
        assert ours["bytes"] < xla["bytes"], x
        assert x["max_abs_diff"] < 1e-4, x
