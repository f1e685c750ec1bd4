"""How the Spark engine cuts diff work into per-slice tasks (pure; needs pyspark importable)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from partsync.config import ClusterRef
from partsync.engines.spark import slice_jobs
from partsync.plan.comparator import Bounds
from partsync.plan.diff_model import DiffOptions, DiffStatus, Level, PartitionDiff, merge_slices
from partsync.run.diff import DiffJob

REFS = (ClusterRef("a", (("h", 1),)), ClusterRef("b", (("h", 2),)))


def job(lo: int, hi: int, chunk: int = 250) -> DiffJob:
    return DiffJob(
        REFS,
        "t",
        0,
        DiffOptions(chunk_offsets=chunk),
        {"a": Bounds(lo, hi), "b": Bounds(0, hi + 7)},
    )


def test_slices_cover_the_common_range_on_the_chunk_grid() -> None:
    sliced = slice_jobs([job(100, 3000)], slice_offsets=500)
    spans = [j.options.within for j in sliced]
    assert spans == [
        (100, 500),
        (500, 1000),
        (1000, 1500),
        (1500, 2000),
        (2000, 2500),
        (2500, 3000),
    ]
    assert all(j.partition == 0 and j.topic == "t" for j in sliced)


def test_slice_size_is_rounded_down_to_whole_chunks_and_small_ranges_stay_whole() -> None:
    assert [j.options.within for j in slice_jobs([job(0, 1000)], slice_offsets=600)] == [
        (0, 500),
        (500, 1000),
    ]
    assert [j.options.within for j in slice_jobs([job(0, 400)], slice_offsets=500)] == [None]


def _pd(status: DiffStatus, first: int | None = None, chunks: int = 1) -> PartitionDiff:
    return PartitionDiff(
        "t",
        0,
        status,
        Level.BATCH,
        {"a": Bounds(0, 10), "b": Bounds(0, 10)},
        common_range=(0, 10),
        first_divergent_offset=first,
        chunks=chunks,
        bytes_read={"a": 5, "b": 5},
    )


def test_merge_takes_the_earliest_divergence_and_adds_up_work() -> None:
    merged = merge_slices(
        [_pd(DiffStatus.IDENTICAL), _pd(DiffStatus.DIVERGENT, 700), _pd(DiffStatus.DIVERGENT, 300)]
    )
    assert merged.status is DiffStatus.DIVERGENT and merged.first_divergent_offset == 300
    assert merged.chunks == 3 and merged.bytes_read == {"a": 15, "b": 15}


def test_merge_reports_an_error_over_anything_else() -> None:
    merged = merge_slices([_pd(DiffStatus.DIVERGENT, 3), _pd(DiffStatus.ERROR)])
    assert merged.status is DiffStatus.ERROR
    assert merge_slices([_pd(DiffStatus.IDENTICAL)] * 2).status is DiffStatus.IDENTICAL
