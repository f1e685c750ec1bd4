"""partsync.run.diff's result model (JSON contract, exit status, ranges) and partsync.ui.diff_render's
table, notes and HTML page, on constructed results (no brokers)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace

import pytest
from rich.console import Console

from partsync.errors import ExitStatus, UsageError
from partsync.plan.comparator import Bounds
from partsync.plan.diff_model import (
    DiffOptions,
    DiffReport,
    DiffRequest,
    DiffStatus,
    Level,
    PartitionDiff,
    TopicDiff,
    common_range,
    lags,
)
from partsync.ui.diff_render import diff_html, diff_notes, diff_summary, diff_table, display_status

S = DiffStatus


def part(p: int, status: DiffStatus, **kw: object) -> PartitionDiff:
    clusters = kw.pop("clusters", {"dc1": Bounds(0, 100), "dc2": Bounds(0, 100)})
    assert isinstance(clusters, dict)
    known = {n: b for n, b in clusters.items() if b is not None}
    defaults: dict[str, object] = {
        "common_range": common_range(known) if len(known) == len(clusters) else None,
        "lag": lags(known) if known else {},
    }
    defaults.update(kw)
    return PartitionDiff("orders", p, status, Level.BATCH, clusters, **defaults)  # type: ignore[arg-type]


def report(*topics: TopicDiff, clusters: tuple[str, ...] = ("dc1", "dc2")) -> DiffReport:
    return DiffReport(tuple(topics), clusters, Level.BATCH, 10_000, 1.5)


def test_common_range_and_lag() -> None:
    b = {"dc1": Bounds(0, 500), "dc2": Bounds(120, 480), "dc3": Bounds(50, 510)}
    assert common_range(b) == (120, 480)
    assert lags(b) == {"dc1": 10, "dc2": 30, "dc3": 0}
    assert common_range({"a": Bounds(0, 10), "b": Bounds(20, 30)}) == (20, 20)  # disjoint: empty


def test_partition_json_matches_the_contract() -> None:
    p = part(
        3,
        S.DIVERGENT,
        clusters={"dc1": Bounds(0, 100), "dc2": Bounds(10, 90)},
        first_divergent_offset=42,
        disagreeing=("dc2",),
        reason="records differ",
    )
    d = p.to_dict()
    keys = (
        "partition",
        "clusters",
        "common_range",
        "status",
        "first_divergent_offset",
        "disagreeing",
        "lag",
    )
    assert {k: d[k] for k in keys} == {
        "partition": 3,
        "clusters": {
            "dc1": {"log_start": 0, "high_watermark": 100},
            "dc2": {"log_start": 10, "high_watermark": 90},
        },
        "common_range": [10, 90],
        "status": "divergent",
        "first_divergent_offset": 42,
        "disagreeing": ["dc2"],
        "lag": {"dc1": 0, "dc2": 10},
    }
    assert d["reason"] == "records differ" and d["level"] == "batch"


def test_unknown_bounds_serialise_as_nulls() -> None:
    p = part(0, S.ERROR, clusters={"dc1": Bounds(0, 5), "dc2": None}, unreachable=("dc2",))
    d = p.to_dict()
    assert d["clusters"]["dc2"] == {"log_start": None, "high_watermark": None}
    assert d["common_range"] is None and d["lag"] == {"dc1": 0}
    assert display_status(p) == "unreachable"


@pytest.mark.parametrize(
    ("statuses", "topic_status", "topic", "exit_status"),
    [
        ([S.IDENTICAL, S.IDENTICAL], None, S.IDENTICAL, ExitStatus.OK),
        ([S.IDENTICAL, S.LAGGING], None, S.LAGGING, ExitStatus.OK),
        ([S.LAGGING, S.ERROR], None, S.ERROR, ExitStatus.FAILURE),
        ([S.ERROR, S.DIVERGENT], None, S.DIVERGENT, ExitStatus.UNSAFE),  # divergence wins
        ([S.IDENTICAL], S.DIVERGENT, S.DIVERGENT, ExitStatus.UNSAFE),  # partition counts differ
        ([], S.ERROR, S.ERROR, ExitStatus.FAILURE),
    ],
)
def test_topic_status_and_exit_code(
    statuses: list[DiffStatus],
    topic_status: DiffStatus | None,
    topic: DiffStatus,
    exit_status: ExitStatus,
) -> None:
    t = TopicDiff(
        "orders", tuple(part(i, s) for i, s in enumerate(statuses)), topic_status=topic_status
    )
    assert t.status is topic
    assert report(t).exit_status is exit_status
    assert report(t).to_dict()["topics"][0]["status"] == topic.value


def test_options_and_request_validation() -> None:
    with pytest.raises(UsageError):
        DiffOptions(chunk_offsets=0)
    with pytest.raises(UsageError, match="at least two clusters"):
        DiffRequest(("t",), ())


def test_cli_default_chunk_size_matches_the_options() -> None:
    from partsync.ui.cli import diff

    (opt,) = [o for o in diff.params if o.name == "chunk_offsets"]
    assert opt.default == DiffOptions().chunk_offsets


def _sample() -> DiffReport:
    parts = [
        part(0, S.IDENTICAL),
        part(
            1,
            S.LAGGING,
            clusters={"dc1": Bounds(0, 100), "dc2": Bounds(0, 60)},
            reason="common range identical; behind the furthest cluster: dc2 by 40",
        ),
        part(
            2,
            S.DIVERGENT,
            first_divergent_offset=43,
            disagreeing=("dc2",),
            reason="records differ at offset 43: dc2 differs from dc1 in value",
        ),
        part(
            3,
            S.ERROR,
            clusters={"dc1": Bounds(0, 5), "dc2": None},
            unreachable=("dc2",),
            reason="cluster dc2 unreachable: connection refused",
        ),
    ]
    name = "orders<script>"
    t = TopicDiff(name, tuple(replace(p, topic=name) for p in parts), {"dc1": 4, "dc2": 4})
    return report(t)


def test_table_notes_and_summary() -> None:
    r = _sample()
    console = Console(width=120, record=True, color_system=None)
    console.print(diff_table(r))
    text = console.export_text()
    for want in (
        "identical",
        "lagging",
        "divergent",
        "unreachable",
        "0..60 -40",
        "0..100 ✗",
        "43",
        "- ?",
        "✗ = disagrees, ? = unreachable",
    ):
        assert want in text, want
    # An unreachable cluster is not marked as one that disagrees (the legend's ✗).
    assert "- ✗" not in text
    assert "orders<script>" in text  # rich markup in names is printed, not interpreted
    notes = diff_notes(r)
    assert notes == [
        (
            "divergent: topic orders<script> partition 2 (dc2 disagrees): records differ at "
            "offset 43: dc2 differs from dc1 in value"
        ),
        "unreachable: topic orders<script> partition 3: cluster dc2 unreachable: connection refused",
    ]
    assert diff_summary(r).startswith(
        "4 partitions on 2 clusters (batch level): 1 identical, 1 lagging, 1 divergent, 1 unreachable"
    )


def test_html_is_self_contained_and_escaped() -> None:
    r = _sample()
    page = diff_html(r, generated=dt.datetime(2026, 1, 2, tzinfo=dt.UTC))
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "orders&lt;script&gt;" in page
    # No external assets: the only URL is SVG's own namespace-free url(#lag) pattern reference.
    assert not re.search(r"(src|href)=", page)
    assert "http" not in page
    assert page.count("<svg") == 1 + 4  # pattern defs + one chart per partition
    assert "diverges at 43" in page and "lag 40" in page and "common 0..60" in page
    assert "? dc2" in page and "✗ dc2" in page and "no data" in page  # unreachable / disagrees
    assert "? unreachable cluster" in page
    assert "divergence found" in page and "2026-01-02" in page


def test_html_escapes_cluster_names() -> None:
    t = TopicDiff(
        "t",
        (
            part(
                0,
                S.DIVERGENT,
                clusters={'a"<b>': Bounds(0, 3), "c&d": Bounds(0, 3)},
                first_divergent_offset=1,
                disagreeing=("c&d",),
            ),
        ),
    )
    page = diff_html(report(t, clusters=('a"<b>', "c&d")))
    assert '<b>"' not in page and "a&quot;&lt;b&gt;" in page and "c&amp;d" in page


def test_html_at_1000_partitions_summary_first_problems_first_and_a_filter() -> None:
    parts = [part(p, S.IDENTICAL) for p in range(1000)]
    parts[700] = part(
        700,
        S.DIVERGENT,
        first_divergent_offset=5,
        disagreeing=("dc2",),
        reason="records differ at offset 5",
    )
    parts[3] = part(3, S.LAGGING, clusters={"dc1": Bounds(0, 100), "dc2": Bounds(0, 60)})
    t = TopicDiff("big", tuple(parts), {"dc1": 1000, "dc2": 1000})
    page = diff_html(report(t), generated=dt.datetime(2026, 1, 2, tzinfo=dt.UTC))
    # The per-topic table comes before any partition's detail, with the counts by status.
    table = page.index("<th>topic</th>")
    assert table < page.index('class="part ')
    assert "<td>big</td><td>divergent</td><td>1000</td><td>998</td><td>1</td><td>1</td>" in page
    # Problems first: the divergent partition, then the lagging one, then partition 0.
    order = [int(m) for m in re.findall(r"/ partition (\d+)", page)]
    assert order[:3] == [700, 3, 0] and len(order) == 1000
    # The filter hides identical partitions with CSS alone (no script in the page).
    assert 'id="only-problems"' in page and page.count('class="part s-identical"') == 998
    assert "#only-problems:checked ~ .parts .s-identical{display:none}" in page
    assert "<script" not in page
