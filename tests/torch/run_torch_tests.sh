#!/usr/bin/env bash
# reshard.torch's tests: installs torch (once; the CUDA build from PyPI, which runs on CPU with
# gloo) and the package into .venv, then runs pytest on tests/torch: 8 gloo processes run every
# case once (tests/torch/dtensor_worker.py).
#   tests/torch/run_torch_tests.sh [pytest args...]
# Environment: RESHARD_TORCH_CASES (300 random placement pairs), RESHARD_TORCH_SEED (0).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=$(scripts/setup_python_package.sh)
scripts/setup_torch.sh "$py"
exec "$py" -m pytest -q -rfEs -p no:cacheprovider tests/torch "$@"
