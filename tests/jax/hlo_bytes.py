"""The HLO byte counter now lives in the Python package: python/reshard/hlo_bytes.py.

The real-JAX tests import it from there by path, so they run before the package
is built or installed (scripts/test.sh runs them first).
  python3 python/reshard/hlo_bytes.py dump.txt   # collectives and bytes of any HLO text
"""
import importlib.util as _util
import os as _os
import sys as _sys

_PATH = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "python", "reshard", "hlo_bytes.py")
_spec = _util.spec_from_file_location("reshard_hlo_bytes", _PATH)
_module = _util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
_sys.modules[__name__] = _module  # `import hlo_bytes` is the package's module itself
