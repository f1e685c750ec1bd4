"""The process's garbage collector, set once when its first engine is made (``settle``).

A copy allocates a few short-lived objects per batch (views, answers, callbacks), next to the
few hundred thousand long-lived ones its imports and plan made (kafka-python's protocol
classes, partsync's own modules). CPython's defaults collect the young objects every 700
allocations and, every hundred young collections or so, scan every object the process holds:
about 30 ms here, with the GIL held, so every writer and fetch lane stands still meanwhile.
Measured on the seed's small-batch load (250k records): 110 ms of the copy's 1.4 s of CPU in
the collector (docs/benchmarks.md).

So, once: the objects alive then are frozen (``gc.freeze``: left out of every collection; they
live as long as the process does), and young collections run every ``YOUNG_THRESHOLD``
allocations. Reference cycles made later are still collected, in larger steps.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["YOUNG_THRESHOLD", "settle"]

YOUNG_THRESHOLD = 10_000

_lock = threading.Lock()
_settled = False


def settle() -> bool:
    """Freeze what is alive now and raise the young threshold; False if this process already
    did (only its first engine does: a follower's later objects are its working set)."""
    global _settled
    with _lock:
        if _settled:
            return False
        _settled = True
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if young:  # 0: collection switched off by whoever runs us; leave it so
        gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)
    return True
