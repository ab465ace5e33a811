#!/usr/bin/env bash
# What both pytest suites (tests/jax, tests/python) run under: 8 host CPU
# devices unless the caller chose a count (16 for bigger meshes), and pytest
# listing failures, errors and skips (with reasons) before its last line, the
# "N passed, M failed ..." summary. Tests run in one pytest-xdist worker per
# core, a file to a worker (its last tests check counts over the whole file;
# PYTEST_WORKERS=n to choose; 1 runs them in pytest's own process):
# most of their time is XLA compiling, one thread a compile.
#   tests/run_pytest_cpu.sh PYTHON SUITE_DIR [pytest args...]
# A pytest argument naming a test file replaces SUITE_DIR. Exits with pytest's status.
set -euo pipefail
py=$1 suite=$2
shift 2
case "${XLA_FLAGS:-}" in
  *xla_force_host_platform_device_count*) ;;
  *) export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_force_host_platform_device_count=8" ;;
esac
export JAX_PLATFORMS=cpu
targets=("$suite")
for a in "$@"; do
  if [ -e "${a%%::*}" ]; then targets=(); break; fi   # the caller named test files
done
workers=${PYTEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}
case "$workers" in
  '' | *[!0-9]*) echo "run_pytest_cpu: PYTEST_WORKERS must be a whole number, not '$workers'" >&2; exit 2 ;;
esac
# One process where the caller debugs (--pdb, --trace), wants output (-s) or chose workers (-n).
for a in "$@"; do
  case "$a" in --pdb | --trace | -s | --capture=no | -n | -n* | --numprocesses*) workers=1 ;; esac
done
parallel=()
if [ "$workers" -gt 1 ] && "$py" -c "import xdist" 2>/dev/null; then parallel=(-n "$workers" --dist loadfile); fi
exec "$py" -m pytest "${parallel[@]}" -q -rfEs -p no:cacheprovider "${targets[@]}" "$@"
