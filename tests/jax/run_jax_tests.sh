#!/usr/bin/env bash
# Runs the real-JAX tests (tests/jax) on 8 host CPU devices.
#   tests/jax/run_jax_tests.sh [pytest args...]
# Environment: RESHARD_CLI (default build/reshard), RESHARD_JAX_MODULE, RESHARD_JAX_CASES,
# RESHARD_JAX_SUMMARY (see tests/jax/test_emitted_jax.py). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=$(scripts/setup_python.sh)
export RESHARD_CLI="${RESHARD_CLI:-build/reshard}"
exec tests/run_pytest_cpu.sh "$py" tests/jax "$@"
