#!/usr/bin/env bash
# The Python package's tests: builds and installs `reshard` into .venv (pip install ., see
# scripts/setup_python_package.sh), then runs pytest on tests/python with 8 host CPU devices.
#   tests/python/run_python_tests.sh [pytest args...]
# Environment: RESHARD_PY_SUMMARY=path writes the byte comparison with with_sharding_constraint
# (cases strictly better / equal / worse) as JSON; RESHARD_PY_SEED changes the random cases.
# Exits non-zero on any failure; the last line is pytest's summary.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
py=$(scripts/setup_python_package.sh)
echo "python package built and installed in $(( $(date +%s) - start )) s"
# XLA's C++ log (its "Involuntary full rematerialization" warnings) at errors only.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# From the repository root `import reshard` is the installed package (the sources are in python/).
exec tests/run_pytest_cpu.sh "$py" tests/python "$@"
