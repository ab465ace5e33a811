#!/usr/bin/env bash
# Runs the real-JAX tests (tests/jax) on 8 host CPU devices.
#   tests/jax/run_jax_tests.sh [pytest args...]
# Environment: RESHARD_CLI (default build/reshard), RESHARD_JAX_MODULE, RESHARD_JAX_CASES,
# RESHARD_JAX_SUMMARY (see tests/jax/test_emitted_jax.py). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=$(scripts/setup_python.sh)
case "${XLA_FLAGS:-}" in
  *xla_force_host_platform_device_count*) ;;   # the caller chose a device count (16 for bigger meshes)
  *) export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_force_host_platform_device_count=8" ;;
esac
export JAX_PLATFORMS=cpu
export RESHARD_CLI="${RESHARD_CLI:-build/reshard}"
# -rfEs: list failures, errors and skips (with reasons) in the summary; the last line
# is pytest's "N passed, M failed ..." summary.
targets=(tests/jax)
for a in "$@"; do
  if [ -e "${a%%::*}" ]; then targets=(); break; fi   # the caller named test files
done
exec "$py" -m pytest -q -rfEs -p no:cacheprovider "${targets[@]}" "$@"
