"""CRC32C (Castagnoli), the checksum of every record batch: the ``crc32c`` package's C function.

It is loaded without running the package's ``__init__``, which imports ``importlib.metadata``
(and with it ``email`` and ``zipfile``) and ``argparse`` for a version string and a command line:
about 30 ms of every run's start, for one function. If the package's layout differs from the
one this expects, the package is imported as usual.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["crc32c"]

_EXTENSION = "crc32c._crc32c"


def _load() -> Callable[..., int]:
    loaded: Any = sys.modules.get(_EXTENSION)
    if loaded is None:
        try:
            loaded = _load_extension()
        except (ImportError, OSError, AttributeError):
            loaded = None
    if loaded is None:
        import crc32c as package

        return package.crc32c
    fn: Callable[..., int] = loaded.crc32c
    return fn


def _load_extension() -> Any:
    spec = importlib.util.find_spec("crc32c")  # finds the package; runs none of it
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_crc32c" + suffix)
            if not os.path.exists(path):
                continue
            ext = importlib.util.spec_from_file_location(_EXTENSION, path)
            if ext is None or ext.loader is None:
                return None
            module = importlib.util.module_from_spec(ext)
            ext.loader.exec_module(module)
            # Registered under its own name, so a later ``import crc32c`` reuses this module
            # instead of loading the extension a second time.
            sys.modules[_EXTENSION] = module
            return module
    return None


crc32c = _load()
