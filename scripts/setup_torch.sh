#!/usr/bin/env bash
# Installs torch into the given Python's environment if it is not there (reshard.torch's optional
# dependency; `pip install '.[torch]'` does the same for users).
#   scripts/setup_torch.sh PYTHON
set -euo pipefail
py=$1
version="${RESHARD_TORCH_VERSION:-2.15.0}"
if ! "$py" -c "import torch, torch.distributed" 2>/dev/null; then
  echo "setup_torch: installing torch==$version (about 5.5 GB with its CUDA libraries; runs on CPU)" >&2
  "$py" -m pip install --quiet --disable-pip-version-check "torch==$version" >&2
fi
