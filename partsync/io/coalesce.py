"""Many threads' small questions to one broker, asked as one request: ``Coalescer``.

Each partition's copy reads its own bounds (log start, high watermark, log end) at the start
of every round, because only a read made where and when it copies is fresh enough to append
after. With hundreds of partitions copying at once, those reads were hundreds of one-partition
ListOffsets requests queued on the one shared connection per broker. A coalescer keeps each
read's freshness and asks them together: while one request is in flight, new questions wait
and then go out together in the next request, so a question is always answered by a request
sent after it was asked (group commit, as in a database log).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Ask(Generic[K, V]):
    __slots__ = ("done", "error", "key", "value")

    def __init__(self, key: K) -> None:
        self.key = key
        self.done = False
        self.value: V | None = None
        self.error: BaseException | None = None


class Coalescer(Generic[K, V]):
    """``get(key)`` answers with ``ask(keys)[key]``, where ``ask`` is called with every key
    asked since the previous call started (at most ``limit`` of them per call).

    ``ask`` runs on the thread of one of the askers, outside any lock; an exception it raises
    is every asker's in that call. A key missing from its answer raises ``KeyError`` in its
    asker. Keys asked twice in one call are asked once."""

    def __init__(self, ask: Callable[[list[K]], Mapping[K, V]], *, limit: int = 1000) -> None:
        self._ask = ask
        self._limit = limit
        self._cv = threading.Condition()
        self._queue: list[_Ask[K, V]] = []
        self._busy = False

    def get(self, key: K) -> V:
        return self.get_many([key])[key]

    def get_many(self, keys: list[K]) -> dict[K, V]:
        """``get`` for several keys at once (asked together where the limit allows)."""
        mine: list[_Ask[K, V]] = [_Ask(k) for k in keys]
        with self._cv:
            self._queue.extend(mine)
        while True:
            with self._cv:
                while self._busy and not all(a.done for a in mine):
                    self._cv.wait()
                if all(a.done for a in mine):
                    return {a.key: self._answer(a) for a in mine}
                # Nobody is asking: this thread asks for everyone waiting, in the order they
                # came (so its own keys may need a further call when more than ``limit`` wait).
                self._busy = True
                batch, self._queue = self._queue[: self._limit], self._queue[self._limit :]
            self._run(batch)

    def _run(self, batch: list[_Ask[K, V]]) -> None:
        try:
            answers = self._ask(list(dict.fromkeys(a.key for a in batch)))
            for a in batch:
                if a.key in answers:
                    a.value = answers[a.key]
                else:
                    a.error = KeyError(a.key)
        except BaseException as e:  # noqa: BLE001 - every asker of this call gets it
            for a in batch:
                a.error = e
        finally:
            with self._cv:
                for a in batch:
                    a.done = True
                self._busy = False
                self._cv.notify_all()

    @staticmethod
    def _answer(a: _Ask[K, V]) -> V:
        if a.error is not None:
            # Each asker gets its own copy: callers locate an error at their partition by
            # setting its fields, which must not show up in another asker's error.
            try:
                err = copy.copy(a.error)
            except Exception:  # noqa: BLE001 - an exception that cannot be copied
                err = a.error
            raise err
        return a.value  # type: ignore[return-value]
