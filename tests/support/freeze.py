"""Stop single threads of another process from outside, with ptrace (Linux).

``SIGSTOP`` stops a whole process; a test of what one thread guards needs that thread stopped
while the others run. ``PTRACE_SEIZE`` attaches to a thread without stopping it and
``PTRACE_INTERRUPT`` stops just that thread; ``PTRACE_CONT`` resumes it and ``PTRACE_DETACH``
lets go. Every thread is let go by ``Freezer.close`` (the kernel also detaches them if
the tracing process dies). Only the thread that seized a thread may resume it, so one test
thread drives a ``Freezer``.

A Python thread stopped while it holds the GIL would stop the whole interpreter; a thread is
only left stopped when it is blocked in a system call (the GIL released), else it is resumed
and stopped again a little later.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Iterable

__all__ = ["Freezer", "thread_names"]

_SEIZE, _INTERRUPT, _CONT, _DETACH = 0x4206, 0x4207, 7, 17
_WALL = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def thread_names(pid: int) -> dict[int, str]:
    """Each thread of ``pid`` by its OS name (``tests.support.named_threads`` sets them)."""
    names = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names[int(tid)] = f.read().strip()
        except FileNotFoundError:  # the thread ended while we looked
            pass
    return names


def _ptrace(request: int, tid: int) -> None:
    if _libc.ptrace(request, tid, None, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"ptrace({request:#x}, {tid}): {os.strerror(errno)}")


def _in_syscall(pid: int, tid: int) -> bool:
    with open(f"/proc/{pid}/task/{tid}/syscall") as f:
        return f.read().split()[0] not in ("running", "-1")


class Freezer:
    """Threads of ``pid`` stopped by this test until thawed or closed."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._seized: set[int] = set()
        self.stopped: set[int] = set()

    def stop(self, tids: Iterable[int], blocked: bool = False, within: float = 10.0) -> None:
        """Stop ``tids``. With ``blocked``, each is left stopped only inside a system call."""
        for tid in tids:
            if tid not in self._seized:
                _ptrace(_SEIZE, tid)
                self._seized.add(tid)
            deadline = time.monotonic() + within
            while True:
                _ptrace(_INTERRUPT, tid)
                os.waitpid(tid, _WALL)
                if not blocked or _in_syscall(self.pid, tid):
                    break
                _ptrace(_CONT, tid)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"thread {tid} of {self.pid} never blocked in a syscall")
                time.sleep(0.01)
            self.stopped.add(tid)

    def thaw(self, tids: Iterable[int]) -> None:
        for tid in tids:
            if tid in self.stopped:
                _ptrace(_CONT, tid)
                self.stopped.discard(tid)

    def close(self) -> None:
        """Let every seized thread go. A seized thread that ended is a zombie only its tracer
        can reap, and until it is reaped the process's own exit is not reported to its parent
        (``Popen.wait`` would hang): reap those."""
        for tid in self._seized:
            try:
                if tid not in self.stopped:
                    _ptrace(_INTERRUPT, tid)  # only a stopped tracee can be detached
                    os.waitpid(tid, _WALL)
                _ptrace(_DETACH, tid)
            except (ProcessLookupError, ChildProcessError):
                try:
                    os.waitpid(tid, _WALL | os.WNOHANG)
                except ChildProcessError:
                    pass  # already reaped
        self._seized.clear()
        self.stopped.clear()
