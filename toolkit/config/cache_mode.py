"""The default of ``op_compiler_cache_mode``: ``$NPUSCOPE_COMPILE_CACHE_MODE``, else ``enable``."""

from __future__ import annotations

import os

from toolkit.core.errors import ConfigError
from toolkit.core.text import suggest

MODES = ("enable", "disable", "force")

ENV_MODE = "NPUSCOPE_COMPILE_CACHE_MODE"


def default_mode() -> str:
    """``$NPUSCOPE_COMPILE_CACHE_MODE`` or ``enable`` (the converter's default); read when a Config is made.

    Raises:
        ConfigError: the variable holds something other than one of :data:`MODES` (named in the message).
    """
    raw = os.environ.get(ENV_MODE, "").strip()
    if raw and raw not in MODES:
        raise ConfigError(f"environment variable {ENV_MODE}={raw!r} is not a cache mode{suggest(raw, MODES)}; "
                          f"set it to one of {', '.join(MODES)} or unset it")
    return raw or "enable"
