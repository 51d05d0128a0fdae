"""Suite-wide settings. The compile cache (toolkit.cache) is off for the suite: tests that compile one model
several times with monkeypatched passes must not see each other's entries. The tests in tests/cache/ turn it on
per test with their own folder; any other use lands in a temporary folder, never in the home directory."""

import atexit
import os
import shutil
import tempfile

# Many CLI tests start npuscope in a subprocess: let those keep compiled bytecode as any Python does by default.
# Under PYTHONDONTWRITEBYTECODE=1 every subprocess would compile the ~260 toolkit modules afresh (~0.5 s each).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

_CACHE = tempfile.mkdtemp(prefix="npuscope-test-cache-")
os.environ.setdefault("NPUSCOPE_COMPILE_CACHE_MODE", "disable")
os.environ.setdefault("NPUSCOPE_COMPILE_CACHE", _CACHE)
atexit.register(shutil.rmtree, _CACHE, True)
