"""Stop single threads of another process from outside, with ptrace (Linux, x86_64).

``SIGSTOP`` stops a whole process; a test of what one thread guards needs that thread stopped
while the others run. ``PTRACE_SEIZE`` attaches to a thread without stopping it and
``PTRACE_INTERRUPT`` stops just that thread; ``PTRACE_DETACH`` lets it go and run on. Every
thread still held is let go by ``Freezer.close`` (the kernel also detaches them if the tracing
process dies). Only the thread that seized a thread may resume it, so one test thread drives a
``Freezer``.

A Python thread stopped while it holds the GIL would stop the whole interpreter, and a test
would then pass for the wrong reason. A thread stopped with ``blocked`` is only left stopped
inside a wait made without the GIL (a futex wait, poll/select/epoll, a socket read, a sleep),
else it is resumed and stopped again a little later. Some system calls are made while holding
the GIL (a futex *wake*, ``mmap``), so "in a system call" alone is not enough.
"""

from __future__ import annotations

import ctypes
import os
import platform
import time
from collections.abc import Iterable

__all__ = ["Freezer", "thread_names"]

_SEIZE, _INTERRUPT, _CONT, _DETACH = 0x4206, 0x4207, 7, 17
_WALL = 0x40000000
_EVENT_STOP = 128  # PTRACE_EVENT_STOP: the stop PTRACE_INTERRUPT asked for
# x86_64 system calls a CPython thread blocks in without the GIL: poll, select, recvfrom,
# nanosleep, clock_nanosleep, epoll_wait, pselect6, ppoll, epoll_pwait (futex is checked apart).
_BLOCKING = {7, 23, 45, 35, 230, 232, 270, 271, 281}
_FUTEX, _FUTEX_WAITS = 202, {0, 9}  # FUTEX_WAIT, FUTEX_WAIT_BITSET
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


def _ptrace(request: int, tid: int, signal: int = 0) -> None:
    if _libc.ptrace(request, tid, None, signal or None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"ptrace({request:#x}, {tid}): {os.strerror(errno)}")


def _wait_stopped(tid: int) -> None:
    """Wait for the stop PTRACE_INTERRUPT asked for. A signal for the thread that arrived first
    is delivered (not dropped) and the interrupt, still pending, stops it after that. Raises
    ProcessLookupError if the thread ended."""
    while True:
        _, status = os.waitpid(tid, _WALL)
        if not os.WIFSTOPPED(status):
            raise ProcessLookupError(tid)  # it exited (and is reaped now)
        if status >> 16 == _EVENT_STOP:
            return
        _ptrace(_CONT, tid, os.WSTOPSIG(status))


def _in_blocking_wait(pid: int, tid: int) -> bool:
    with open(f"/proc/{pid}/task/{tid}/syscall") as f:
        fields = f.read().split()
    if fields[0] in ("running", "-1"):
        return False
    nr = int(fields[0])
    if nr == _FUTEX:
        return int(fields[2], 16) & 0x7F in _FUTEX_WAITS
    return nr in _BLOCKING


class Freezer:
    """Threads of ``pid`` stopped by this test until thawed or closed."""

    def __init__(self, pid: int) -> None:
        if platform.machine() != "x86_64":
            raise NotImplementedError("tests.support.freeze knows x86_64 system calls only")
        self.pid = pid
        self._seized: set[int] = set()
        self.stopped: set[int] = set()

    def stop(self, tids: Iterable[int], blocked: bool = False, within: float = 10.0) -> None:
        """Stop ``tids`` (a thread that has ended meanwhile is skipped). With ``blocked``, each
        is left stopped only inside a wait made without the GIL."""
        for tid in tids:
            if tid in self.stopped:
                continue
            try:
                if tid not in self._seized:
                    _ptrace(_SEIZE, tid)
                    self._seized.add(tid)
                deadline = time.monotonic() + within
                while True:
                    _ptrace(_INTERRUPT, tid)
                    _wait_stopped(tid)
                    if not blocked or _in_blocking_wait(self.pid, tid):
                        break
                    _ptrace(_CONT, tid)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"thread {tid} of {self.pid} never blocked in a wait")
                    time.sleep(0.01)
            except ProcessLookupError:
                self._seized.discard(tid)  # it ended: nothing to stop
                continue
            self.stopped.add(tid)

    def thaw(self, tids: Iterable[int]) -> None:
        """Let ``tids`` go: they run on, no longer traced (a signal then reaches them as
        usual instead of stopping them for a tracer)."""
        for tid in tids:
            if tid in self.stopped:
                self.stopped.discard(tid)
                self._seized.discard(tid)
                _ptrace(_DETACH, tid)

    def close(self) -> None:
        """Let every thread still seized go; one that fails is skipped, not the rest. A seized
        thread that ended is a zombie only its tracer can reap, and until it is reaped the
        process's own exit is not reported to its parent (``Popen.wait`` would hang)."""
        for tid in self._seized:
            try:
                if tid not in self.stopped:
                    _ptrace(_INTERRUPT, tid)  # only a stopped tracee can be detached
                    _wait_stopped(tid)
                _ptrace(_DETACH, tid)
            except OSError:
                try:
                    os.waitpid(tid, _WALL | os.WNOHANG)
                except ChildProcessError:
                    pass  # already reaped
        self._seized.clear()
        self.stopped.clear()
