#!/usr/bin/env bash
# Builds the Python package `reshard` (nanobind module + reshard.jax) and installs it into the
# real-JAX virtual environment (.venv, made by scripts/setup_python.sh). Prints the venv's python.
#   scripts/setup_python_package.sh   -> /path/to/repo/.venv/bin/python
# The build tools (scikit-build-core, nanobind) are installed into .venv once, and the package is
# built without build isolation, so that the CMake build directory (build-python/, see
# pyproject.toml) keeps its paths and a reinstall recompiles only what changed. A plain
# `pip install .` (isolated) works too; it fetches the build tools itself.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh   # the C++ toolchain, fmt and nlohmann-json (Debian packages)
py=$(scripts/setup_python.sh)
if ! "$py" -c "import scikit_build_core, nanobind" 2>/dev/null; then
  echo "setup_python_package: installing scikit-build-core and nanobind" >&2
  "$py" -m pip install --quiet --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.4" >&2
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
"$py" -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps . >&2
echo "$py"
