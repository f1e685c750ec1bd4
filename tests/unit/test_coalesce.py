"""``io.coalesce.Coalescer``: many threads' questions asked together, never answered stale."""

from __future__ import annotations

import threading

import pytest

from partsync.io.coalesce import Coalescer


class _Asker:
    """An ``ask`` that records every call and can be held mid-call."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.version = 0  # what the "broker" holds when a call is made

    def ask(self, keys: list[int]) -> dict[int, tuple[int, int]]:
        self.calls.append(list(keys))
        seen = self.version
        self.entered.set()
        self.release.wait(5)
        return {k: (k, seen) for k in keys}


def _in_threads(fn, args) -> list[threading.Thread]:  # type: ignore[no-untyped-def]
    threads = [threading.Thread(target=fn, args=(a,)) for a in args]
    for t in threads:
        t.start()
    return threads


def test_one_asker_gets_its_answer_from_one_call() -> None:
    b = _Asker()
    c = Coalescer(b.ask)
    assert c.get(3) == (3, 0)
    assert c.get_many([1, 2]) == {1: (1, 0), 2: (2, 0)}
    assert b.calls == [[3], [1, 2]]


def test_questions_asked_during_a_call_go_out_together_in_the_next_one() -> None:
    b = _Asker()
    b.release.clear()
    c = Coalescer(b.ask)
    got: dict[int, tuple[int, int]] = {}
    first = _in_threads(lambda k: got.__setitem__(k, c.get(k)), [0])
    assert b.entered.wait(5)
    # Asked while the first call is in flight: they must not be answered by it (it was sent
    # before they were asked), so they wait for a call made after this point.
    b.version = 1
    later = _in_threads(lambda k: got.__setitem__(k, c.get(k)), range(1, 9))
    while len(c._queue) < 8:  # all eight queued behind the call in flight
        threading.Event().wait(0.001)
    b.release.set()
    for t in first + later:
        t.join(5)
    assert got[0] == (0, 0)
    assert all(got[k] == (k, 1) for k in range(1, 9))
    assert len(b.calls) == 2 and sorted(b.calls[1]) == list(range(1, 9))


def test_a_failed_call_fails_every_asker_in_it_and_the_next_call_is_fresh() -> None:
    fail = [True]

    def ask(keys: list[int]) -> dict[int, int]:
        if fail[0]:
            raise ConnectionError("broker gone")
        return {k: k * 10 for k in keys}

    c = Coalescer(ask)
    with pytest.raises(ConnectionError):
        c.get_many([1, 2])
    fail[0] = False
    assert c.get(1) == 10


def test_a_key_left_out_of_the_answer_is_an_error_for_its_asker_only() -> None:
    c: Coalescer[int, int] = Coalescer(lambda keys: {k: k for k in keys if k != 2})
    with pytest.raises(KeyError):
        c.get_many([1, 2])
    assert c.get(1) == 1


def test_more_keys_than_the_limit_take_several_calls_and_all_are_answered() -> None:
    b = _Asker()
    c = Coalescer(b.ask, limit=3)
    assert c.get_many(list(range(7))) == {k: (k, 0) for k in range(7)}
    assert [len(x) for x in b.calls] == [3, 3, 1]


def test_the_same_key_asked_twice_at_once_is_asked_once() -> None:
    b = _Asker()
    b.release.clear()
    c = Coalescer(b.ask)
    got: list[tuple[int, int]] = []
    first = _in_threads(lambda k: c.get(k), [9])
    assert b.entered.wait(5)
    twins = _in_threads(lambda k: got.append(c.get(k)), [4, 4])
    while len(c._queue) < 2:
        threading.Event().wait(0.001)
    b.release.set()
    for t in first + twins:
        t.join(5)
    assert got == [(4, 0), (4, 0)]
    assert b.calls[1] == [4]
