"""Table-driven tests of the comparator, ``partsync.plan.plan_partition`` (pure, no I/O).

Each case gives the local bounds, the sources' bounds (in preference order) and the chunk size,
and expects the exact condition and chunk tuples, so a change in how ranges are cut or which
source serves them shows up as a precise diff.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from partsync.plan.comparator import (
    Bounds,
    Chunk,
    Condition,
    PartitionPlan,
    PlanPolicy,
    plan_partition,
)

T, P = "orders", 3


@dataclass(frozen=True)
class Case:
    id: str
    local: tuple[int, int]
    sources: dict[str, tuple[int, int]]
    chunk_offsets: int
    condition: Condition
    target_end: int
    chunks: tuple[tuple[int, int, str], ...] = ()
    serving: tuple[str, ...] = ()
    reason_has: tuple[str, ...] = ()
    bootstrap: bool = False


CASES = [
    Case(
        "in-sync",
        local=(0, 100),
        sources={"a": (0, 100)},
        chunk_offsets=10,
        condition=Condition.IN_SYNC,
        target_end=100,
    ),
    Case(
        "in-sync-with-every-source-and-trimmed-local",
        local=(60, 100),
        sources={"a": (0, 100), "b": (90, 100)},
        chunk_offsets=10,
        condition=Condition.IN_SYNC,
        target_end=100,
    ),
    Case(
        "empty-partitions-everywhere",
        local=(0, 0),
        sources={"a": (0, 0)},
        chunk_offsets=10,
        condition=Condition.IN_SYNC,
        target_end=0,
    ),
    Case(
        "behind-one-source-chunked",
        local=(0, 0),
        sources={"a": (0, 250)},
        chunk_offsets=100,
        condition=Condition.BEHIND,
        target_end=250,
        chunks=((0, 100, "a"), (100, 200, "a"), (200, 250, "a")),
        serving=("a",),
    ),
    Case(
        # The chunk grid starts at the local end, not at multiples of chunk_offsets.
        "behind-grid-starts-at-local-end",
        local=(0, 50),
        sources={"a": (0, 300)},
        chunk_offsets=100,
        condition=Condition.BEHIND,
        target_end=300,
        chunks=((50, 150, "a"), (150, 250, "a"), (250, 300, "a")),
        serving=("a",),
    ),
    Case(
        "behind-by-one-offset",
        local=(0, 99),
        sources={"a": (0, 100)},
        chunk_offsets=50_000,
        condition=Condition.BEHIND,
        target_end=100,
        chunks=((99, 100, "a"),),
        serving=("a",),
    ),
    Case(
        # Past a's end only b can serve; the cut at 150 (a's end) keeps a out of [150, 200).
        "two-sources-different-ends",
        local=(0, 0),
        sources={"a": (0, 150), "b": (0, 300)},
        chunk_offsets=100,
        condition=Condition.BEHIND,
        target_end=300,
        chunks=((0, 100, "a"), (100, 150, "b"), (150, 200, "b"), (200, 300, "b")),
        serving=("a", "b"),
    ),
    Case(
        # Chunks past the shorter source's end, even when it is listed first.
        "shorter-source-serves-nothing-past-its-end",
        local=(0, 150),
        sources={"a": (0, 100), "b": (0, 300)},
        chunk_offsets=100,
        condition=Condition.BEHIND,
        target_end=300,
        chunks=((150, 250, "b"), (250, 300, "b")),
        serving=("b",),
    ),
    Case(
        "round-robin-among-covering-sources",
        local=(0, 0),
        sources={"a": (0, 500), "b": (0, 500), "c": (0, 500)},
        chunk_offsets=100,
        condition=Condition.BEHIND,
        target_end=500,
        chunks=(
            (0, 100, "a"),
            (100, 200, "b"),
            (200, 300, "c"),
            (300, 400, "a"),
            (400, 500, "b"),
        ),
        serving=("a", "b", "c"),
    ),
    Case(
        # Preference order is the mapping's order, not the names' order.
        "round-robin-follows-given-order",
        local=(0, 0),
        sources={"z": (0, 300), "a": (0, 300)},
        chunk_offsets=100,
        condition=Condition.BEHIND,
        target_end=300,
        chunks=((0, 100, "z"), (100, 200, "a"), (200, 300, "z")),
        serving=("z", "a"),
    ),
    Case(
        "local-end-beyond-every-source",
        local=(0, 200),
        sources={"a": (0, 100), "b": (0, 150)},
        chunk_offsets=100,
        condition=Condition.UNSAFE,
        target_end=150,
        reason_has=("local log end 200", "beyond", "150"),
    ),
    Case(
        "source-log-start-beyond-local-end-no-other-source",
        local=(0, 50),
        sources={"a": (80, 200)},
        chunk_offsets=100,
        condition=Condition.UNSAFE,
        target_end=200,
        reason_has=("no source holds offsets 50..80", "the local log end 50", "a holds 80..200"),
    ),
    Case(
        # b still holds [50, 80), so b serves it; from a's log start on both can serve.
        "source-log-start-beyond-local-end-other-source-holds-it",
        local=(0, 50),
        sources={"a": (80, 200), "b": (0, 200)},
        chunk_offsets=100,
        condition=Condition.BEHIND,
        target_end=200,
        chunks=((50, 80, "b"), (80, 150, "b"), (150, 200, "a")),
        serving=("b", "a"),
    ),
    Case(
        # An empty local partition below the source's log start (retention deleted the head):
        # the copy starts at the log start, after fillers (issue 14).
        "empty-local-below-source-log-start-bootstraps",
        local=(0, 0),
        sources={"a": (1000, 2000)},
        chunk_offsets=600,
        condition=Condition.BEHIND,
        target_end=2000,
        chunks=((1000, 1600, "a"), (1600, 2000, "a")),
        serving=("a",),
        bootstrap=True,
    ),
    Case(
        # Empty at 300 (its own log start moved there): the same, from 300.
        "empty-local-at-an-offset-bootstraps-from-the-earliest-source",
        local=(300, 300),
        sources={"a": (1000, 2000), "b": (700, 1500)},
        chunk_offsets=1000,
        condition=Condition.BEHIND,
        target_end=2000,
        chunks=((700, 1000, "b"), (1000, 1500, "b"), (1500, 1700, "a"), (1700, 2000, "a")),
        serving=("b", "a"),
        bootstrap=True,
    ),
    Case(
        # Log start exactly at the local end is fine: the source holds the next offset.
        "source-log-start-equal-to-local-end",
        local=(0, 80),
        sources={"a": (80, 200)},
        chunk_offsets=1000,
        condition=Condition.BEHIND,
        target_end=200,
        chunks=((80, 200, "a"),),
        serving=("a",),
    ),
    Case(
        # [100, 150) is on no source: nothing at all is planned, not even [0, 100).
        "gap-in-coverage",
        local=(0, 0),
        sources={"a": (0, 100), "b": (150, 300)},
        chunk_offsets=1000,
        condition=Condition.UNSAFE,
        target_end=300,
        reason_has=(
            "no source holds offsets 100..150",
            "offset 100",
            "a holds 0..100",
            "b holds 150..300",
        ),
    ),
    Case(
        "cut-at-source-log-start",
        local=(0, 10),
        sources={"a": (0, 1000), "b": (500, 1000)},
        chunk_offsets=1000,
        condition=Condition.BEHIND,
        target_end=1000,
        chunks=((10, 500, "a"), (500, 1000, "b")),
        serving=("a", "b"),
    ),
    Case(
        "cut-at-source-end",
        local=(0, 0),
        sources={"a": (0, 700), "b": (0, 1000)},
        chunk_offsets=1000,
        condition=Condition.BEHIND,
        target_end=1000,
        chunks=((0, 700, "a"), (700, 1000, "b")),
        serving=("a", "b"),
    ),
    Case(
        # Cuts from the grid and from both sources' bounds merge into one sorted run.
        "cuts-from-grid-and-bounds-merge",
        local=(0, 0),
        sources={"a": (0, 130), "b": (70, 400)},
        chunk_offsets=100,
        condition=Condition.BEHIND,
        target_end=400,
        chunks=(
            (0, 70, "a"),
            (70, 100, "b"),
            (100, 130, "a"),
            (130, 200, "b"),
            (200, 300, "b"),
            (300, 400, "b"),
        ),
        serving=("a", "b"),
    ),
    Case(
        # A source whose bounds lie wholly below the local end does not matter.
        "source-entirely-below-local-end",
        local=(0, 500),
        sources={"old": (0, 100), "a": (0, 600)},
        chunk_offsets=1000,
        condition=Condition.BEHIND,
        target_end=600,
        chunks=((500, 600, "a"),),
        serving=("a",),
    ),
    Case(
        "chunk-of-one-offset",
        local=(0, 0),
        sources={"a": (0, 3), "b": (0, 3)},
        chunk_offsets=1,
        condition=Condition.BEHIND,
        target_end=3,
        chunks=((0, 1, "a"), (1, 2, "b"), (2, 3, "a")),
        serving=("a", "b"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_partition(case: Case) -> None:
    local = Bounds(*case.local)
    sources = {name: Bounds(*b) for name, b in case.sources.items()}
    plan = plan_partition(T, P, local, sources, PlanPolicy(chunk_offsets=case.chunk_offsets))

    assert plan.topic == T and plan.partition == P
    assert plan.condition is case.condition
    assert plan.local == local
    assert dict(plan.sources) == sources
    assert plan.target_end == case.target_end
    assert tuple((c.start, c.end, c.source) for c in plan.chunks) == case.chunks
    assert plan.serving == case.serving
    assert plan.bootstrap is case.bootstrap
    if case.condition is Condition.UNSAFE:
        assert plan.reason is not None
        for text in case.reason_has:
            assert text in plan.reason
    else:
        assert plan.reason is None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_chunks_are_one_contiguous_run_from_the_local_end(case: Case) -> None:
    """The invariant offset identity rests on: copy exactly [local end, target end), in order,
    each chunk from a source that holds all of it."""
    sources = {name: Bounds(*b) for name, b in case.sources.items()}
    plan = plan_partition(T, P, Bounds(*case.local), sources, PlanPolicy(case.chunk_offsets))
    if plan.condition is not Condition.BEHIND:
        assert plan.chunks == ()
        return
    # A bootstrap starts at the sources' log start instead (fillers cover the rest).
    assert plan.chunks[0].start == (plan.copy_start if plan.bootstrap else plan.local.end)
    assert plan.chunks[-1].end == plan.target_end
    for a, b in zip(plan.chunks, plan.chunks[1:]):
        assert a.end == b.start
    for c in plan.chunks:
        assert 0 < c.span <= case.chunk_offsets
        held = sources[c.source]
        assert held.log_start <= c.start and c.end <= held.end
    assert plan.missing == plan.target_end - plan.local.end


def test_sources_mapping_is_copied() -> None:
    sources = {"a": Bounds(0, 10)}
    plan = plan_partition(T, P, Bounds(0, 0), sources)
    sources["b"] = Bounds(0, 20)
    assert list(plan.sources) == ["a"]


def test_no_sources_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one source"):
        plan_partition(T, P, Bounds(0, 0), {})


def test_default_policy() -> None:
    plan = plan_partition(T, P, Bounds(0, 0), {"a": Bounds(0, 120_000)})
    assert [(c.start, c.end) for c in plan.chunks] == [
        (0, 50_000),
        (50_000, 100_000),
        (100_000, 120_000),
    ]


def test_missing_and_to_dict() -> None:
    plan = plan_partition(T, P, Bounds(5, 40), {"a": Bounds(0, 100)}, PlanPolicy(50))
    assert plan.missing == 60
    assert plan.to_dict() == {
        "topic": T,
        "partition": P,
        "condition": "behind",
        "local": {"log_start": 5, "end": 40},
        "sources": {"a": {"log_start": 0, "high_watermark": 100}},
        "target_end": 100,
        "missing": 60,
        "ranges": [
            {"start": 40, "end": 90, "source": "a"},
            {"start": 90, "end": 100, "source": "a"},
        ],
        "reason": None,
        "bootstrap": None,
        "scan": None,
    }
    boot = plan_partition(T, P, Bounds(0, 0), {"a": Bounds(1000, 2000)}).to_dict()
    assert boot["bootstrap"] == {"fill_from": 0, "log_start": 1000}


def test_bootstrap_can_be_switched_off() -> None:
    plan = plan_partition(
        T, P, Bounds(0, 0), {"a": Bounds(1000, 2000)}, PlanPolicy(bootstrap=False)
    )
    assert plan.condition is Condition.UNSAFE and "no source holds offsets 0..1000" in str(
        plan.reason
    )


def test_unsafe_plan_to_dict_has_reason_and_no_ranges() -> None:
    plan = plan_partition(T, P, Bounds(0, 200), {"a": Bounds(0, 100)})
    doc = plan.to_dict()
    assert doc["condition"] == "unsafe"
    assert doc["ranges"] == []
    assert isinstance(doc["reason"], str) and "beyond" in doc["reason"]
    assert doc["missing"] == 0  # local is ahead, nothing is "missing"


def test_plan_objects_are_frozen() -> None:
    plan = plan_partition(T, P, Bounds(0, 0), {"a": Bounds(0, 10)})
    with pytest.raises(AttributeError):
        plan.target_end = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        plan.chunks[0].start = 1  # type: ignore[misc]
    assert isinstance(plan, PartitionPlan)
    assert plan.chunks == (Chunk(0, 10, "a"),)


@pytest.mark.parametrize("chunk_offsets", [0, -1, -50_000])
def test_policy_rejects_chunks_below_one(chunk_offsets: int) -> None:
    with pytest.raises(ValueError, match="chunk_offsets"):
        PlanPolicy(chunk_offsets=chunk_offsets)


def test_policy_accepts_one() -> None:
    assert PlanPolicy(chunk_offsets=1).chunk_offsets == 1


@pytest.mark.parametrize("log_start,end", [(-1, 0), (-5, 10), (10, 9), (1, 0)])
def test_bounds_rejects_invalid(log_start: int, end: int) -> None:
    with pytest.raises(ValueError, match="invalid bounds"):
        Bounds(log_start, end)


def test_bounds_holds_is_half_open() -> None:
    b = Bounds(10, 20)
    assert not b.holds(9)
    assert b.holds(10)
    assert b.holds(19)
    assert not b.holds(20)
    assert not Bounds(5, 5).holds(5)  # an empty log holds nothing
