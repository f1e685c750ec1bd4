"""``run.heap.settle``: the collector set once per process, by the first engine. Each case runs
in a fresh interpreter, since the collector's settings are the whole process's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ((700, 10, 10), (10_000, 10, 10)),  # CPython's default: young collections rarer
        ((50_000, 5, 5), (50_000, 5, 5)),  # already rarer: kept
        ((0, 10, 10), (0, 10, 10)),  # collection switched off by the host: left so
    ],
)
def test_settle_freezes_once_and_raises_the_young_threshold(
    before: tuple[int, int, int], after: tuple[int, int, int]
) -> None:
    got = _run(
        f"""
        import gc
        gc.set_threshold(*{before!r})
        from partsync.run import heap
        frozen_before = gc.get_freeze_count()
        first = heap.settle()
        frozen = gc.get_freeze_count()
        second = heap.settle()
        print(first, second, frozen_before == 0 and frozen > 0, gc.get_threshold())
        """
    )
    assert got == f"True False True {after!r}"


def test_the_first_engine_settles_the_heap() -> None:
    got = _run(
        """
        import gc
        from partsync.io.pool import ClusterPool
        from partsync.run.engine import Engine
        before = gc.get_freeze_count()
        Engine(ClusterPool(), workers=1, follow=False).close()
        after = gc.get_freeze_count()
        Engine(ClusterPool(), workers=1, follow=False).close()
        print(before == 0 and after > 0, gc.get_freeze_count() == after, gc.get_threshold()[0])
        """
    )
    assert got == "True True 10000"
