"""Per-topic metrics of a link, the same as ``partsync status`` shows: the topic's state (a
state set: one series per state, 1 for the current one), its lag in records and seconds, and
(from ``status``) its config drift. A follower's live metrics derive them from the partitions
it runs (``live_topics``); ``status --metrics-file`` writes them for every topic of the job."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client.exposition import write_to_textfile
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from partsync.plan.link_status import PartitionLag, TopicState, TopicStatus, topic_state
from partsync.ui.metric_families import gauge

__all__ = ["live_topics", "topic_families", "write_status_textfile"]

# A follower's partition status as a plan condition (``plan.link_status.topic_state``).
_CONDITION = {
    "in-sync": "in-sync",
    "synced": "in-sync",
    "behind": "behind",
    "stopped": "behind",
    "unsafe": "unsafe",
    "error": "error",
    "unknown": "unknown",
}


def live_topics(
    status: Mapping[tuple[str, int], str],
    lag: Mapping[tuple[str, int], int],
    lag_s: Mapping[tuple[str, int], float | None],
) -> list[TopicStatus]:
    """The topics of the partitions a follower runs, from their last statuses and lag as last
    seen (handed-over partitions are another process's: left out)."""
    by_topic: dict[str, list[PartitionLag]] = {}
    gone: set[str] = set()
    for (topic, p), st in sorted(status.items()):
        if st == "source-gone":
            gone.add(topic)
            continue
        cond = _CONDITION.get(st)
        if cond is None:
            continue
        behind = lag.get((topic, p), 0)
        if cond == "in-sync" and behind:
            cond = "behind"  # the sources moved on since its last round
        by_topic.setdefault(topic, []).append(
            PartitionLag(p, cond, behind, lag_s.get((topic, p)) if behind else 0.0)
        )
    out = [
        TopicStatus(t, topic_state((p.condition for p in parts), followed=True), tuple(parts))
        for t, parts in sorted(by_topic.items())
        if t not in gone
    ]
    return out + [TopicStatus(t, TopicState.SOURCE_GONE) for t in sorted(gone)]


def topic_families(topics: Sequence[TopicStatus], *, drift: bool) -> Iterator[Metric]:
    yield gauge(
        "partsync_topic_state",
        "1 for the topic's state (caught-up, mirroring, paused, failed, source-gone, "
        "promoted), 0 for the others.",
        ("topic", "state"),
        (((t.topic, s.value), float(t.state is s)) for t in topics for s in TopicState),
    )
    yield gauge(
        "partsync_topic_lag_records",
        "Offsets the topic's partitions are behind their furthest sources, summed.",
        ("topic",),
        (((t.topic,), t.lag_records) for t in topics if t.state is not TopicState.SOURCE_GONE),
    )
    yield gauge(
        "partsync_topic_lag_seconds",
        "The largest of the topic's partitions' lag in seconds (source's newest data timestamp "
        "minus the mirror's); no sample where a partition behind has no measure.",
        ("topic",),
        (((t.topic,), s) for t in topics if (s := t.lag_seconds) is not None and t.partitions),
    )
    if drift:
        yield gauge(
            "partsync_topic_config_drift",
            "Followed configs whose local value differs from the source's.",
            ("topic",),
            (((t.topic,), len(t.config_drift)) for t in topics if t.partitions),
        )


class _StatusCollector:
    def __init__(self, topics: Sequence[TopicStatus]) -> None:
        self.topics = topics

    def collect(self) -> Iterator[Metric]:
        return topic_families(self.topics, drift=True)


def write_status_textfile(path: str | os.PathLike[str], topics: Sequence[TopicStatus]) -> None:
    """``partsync status --metrics-file``: the topics' metrics, written atomically (for
    node_exporter's textfile collector)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StatusCollector(topics))
    write_to_textfile(os.fspath(path), registry)
