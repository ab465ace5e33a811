#!/usr/bin/env bash
# Creates the Python virtual environment for the real-JAX tests at .venv in the
# repository root, installing jax/jaxlib 0.10.2, pytest, pytest-xdist and numpy only when
# they are missing. Idempotent. Prints the venv's python path on stdout.
#   scripts/setup_python.sh            -> /path/to/repo/.venv/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv"
py="$venv/bin/python"
jax_version=0.10.2

if [ ! -x "$py" ]; then
  echo "setup_python: creating $venv" >&2
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian's python3 ships venv separately.
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
fi

# Which of the wanted packages are missing (or at the wrong version)?
missing=$("$py" - "$jax_version" <<'PY'
import sys
from importlib import metadata
want = {"jax": sys.argv[1], "jaxlib": sys.argv[1], "pytest": None, "pytest-xdist": None, "numpy": None}
out = []
for name, version in want.items():
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        have = None
    if have is None or (version is not None and have != version):
        out.append(name if version is None else "%s==%s" % (name, version))
print(" ".join(out))
PY
)
if [ -n "$missing" ]; then
  echo "setup_python: installing $missing" >&2
  "$py" -m pip install --quiet --disable-pip-version-check $missing >&2
fi
echo "$py"
