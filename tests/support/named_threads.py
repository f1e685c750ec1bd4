"""Run partsync with every Python thread's name given to its OS thread (``python -m
tests.support.named_threads <partsync arguments>``).

Python 3.11 leaves OS threads unnamed, so from outside all of a process's threads read
``python`` in ``/proc/PID/task/TID/comm``. Naming them (15 bytes, the kernel's limit) lets a
test pick one thread of a running partsync, e.g. the lease watchdog, and stop just that one
(``tests.support.freeze``). Nothing in the runtime package changes.
"""

from __future__ import annotations

import ctypes
import runpy
import sys
import threading
from typing import Any

_PR_SET_NAME = 15
_libc = ctypes.CDLL(None, use_errno=True)
_start = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]


def _named(self: threading.Thread, *args: Any) -> None:
    _libc.prctl(_PR_SET_NAME, self.name.encode()[:15], 0, 0, 0)
    _start(self, *args)


def main() -> None:
    threading.Thread._bootstrap_inner = _named  # type: ignore[attr-defined]
    sys.argv = ["partsync", *sys.argv[1:]]
    runpy.run_module("partsync", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
