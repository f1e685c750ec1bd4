"""A mirror topic's configs following its source's (``--sync-configs``): read both, set on the
local topic what drifted (``plan.topic_configs`` decides which keys and values), or stop a
topic whose source can no longer be mirrored offset-identically. Used once per run when plans
are applied (``run.topic_changes``), by a follower at every topic check (``run.topic_watch``),
and by ``plan`` to show the drift without changing anything.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from partsync.errors import PartsyncError, UnsafeError
from partsync.io.pool import ClusterPool
from partsync.plan.topic_configs import config_changes, identity_breaking
from partsync.run.topic_plan import SyncRequest, TopicPlan

__all__ = [
    "ConfigDrift",
    "config_drift",
    "config_drifts",
    "follow_configs",
    "sync_configs",
    "with_config_drift",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConfigDrift:
    """A local topic's followed configs against its source's: what to set (key -> the
    source's value), the local values now, the source read, and a refusal when the source can
    no longer be mirrored."""

    topic: str
    source: str
    changes: dict[str, str]
    local: dict[str, str | None]
    refused: str | None = None

    def describe(self) -> str:
        return ", ".join(
            f"{k}={v} (local {self.local.get(k)})" for k, v in sorted(self.changes.items())
        )


def config_drift(
    req: SyncRequest, pool: ClusterPool, topic: str, sources: Sequence[str] | None = None
) -> ConfigDrift | None:
    """The drift of ``topic``'s local configs from the first of its sources (``sources``:
    those known to hold it, in the request's order) that answers; None when no source
    answers or the local topic's configs cannot be read (``config_drifts`` of one). Reads
    only."""
    drifts, _failed = config_drifts(req, pool, {topic: sources})
    return drifts.get(topic)


def sync_configs(
    req: SyncRequest, pool: ClusterPool, topic: str, sources: Sequence[str] | None = None
) -> ConfigDrift | None:
    """Set ``topic``'s drifted configs on the local topic as its source has them; returns what
    was found (and set). Raises ``UnsafeError`` for a source that can no longer be mirrored
    (nothing set), and the broker's error if the local cluster refuses a value."""
    drift = config_drift(req, pool, topic, sources)
    if drift is None:
        return None
    if drift.refused:
        raise UnsafeError(drift.refused, cluster=drift.source, topic=topic)
    if drift.changes:
        pool.get(req.local).set_topic_configs(topic, drift.changes)
    return drift


def config_drifts(
    req: SyncRequest, pool: ClusterPool, topics: Mapping[str, Sequence[str] | None]
) -> tuple[dict[str, ConfigDrift], dict[str, str]]:
    """``config_drift`` of many topics (-> the sources that hold each; None: any source), in
    one DescribeConfigs per cluster, so a link of thousands of topics is read in a few
    requests. Returns each topic's drift from its first answering source (a topic no source
    answered for is left out: it waits for the next check), and the topics whose local
    configs could not be read, with why. Reads only."""
    failed: dict[str, str] = {}
    if not topics:
        return {}, failed
    local = pool.get(req.local)
    try:
        local_cfgs = local.all_topics_configs(sorted(topics))
    except PartsyncError as e:
        return {}, {t: f"topic {t}: reading its configs on {local.name}: {e}" for t in topics}
    src_cfgs: dict[str, tuple[str, dict[str, str | None]]] = {}
    for ref in req.sources:
        want = sorted(
            t
            for t, held in topics.items()
            if (held is None or ref.name in held) and t not in src_cfgs
        )
        if not want:
            continue
        try:
            got = pool.get(ref).all_topics_configs(want)
        except PartsyncError as e:
            log.debug("configs on %s: %s", ref.name, e)
            continue
        src_cfgs.update((t, (ref.name, c)) for t, c in got.items() if isinstance(c, dict))
    drifts = {}
    for topic, (source, src) in sorted(src_cfgs.items()):
        mine = local_cfgs.get(topic)
        if not isinstance(mine, dict):
            failed[topic] = f"topic {topic}: reading its configs on {local.name}: {mine}"
            continue
        refused = identity_breaking(topic, source, src)
        changes = {} if refused else config_changes(req.config_policy, src, mine)
        drifts[topic] = ConfigDrift(topic, source, changes, dict(mine), refused)
    return drifts, failed


def follow_configs(
    req: SyncRequest, pool: ClusterPool, topics: Mapping[str, Sequence[str]]
) -> tuple[dict[str, str], dict[str, str]]:
    """A follower's topic check with --sync-configs: each of ``topics`` (-> the sources that
    hold it now) set as its first answering source has it (logged). Returns the topics to
    refuse (a source that can no longer be mirrored) and those whose configs could not be
    read or set, with why."""
    drifts, failed = config_drifts(req, pool, topics)
    refused: dict[str, str] = {}
    local = pool.get(req.local)
    for topic, drift in drifts.items():
        if drift.refused:
            refused[topic] = drift.refused
            continue
        if not drift.changes:
            continue
        try:
            local.set_topic_configs(topic, drift.changes)
        except PartsyncError as e:
            failed[topic] = f"topic {topic}: setting its configs as the source has them: {e}"
            continue
        log.warning(
            "topic %s on %s: set %s, as %s has it",
            topic,
            local.name,
            drift.describe(),
            drift.source,
        )
    return refused, failed


def with_config_drift(
    req: SyncRequest, pool: ClusterPool, plans: Sequence[TopicPlan]
) -> list[TopicPlan]:
    """``plan --sync-configs``: each plan with its topic's config drift (and a warning saying
    what ``sync --sync-configs`` would set); reads only."""
    out = []
    for tp in plans:
        drift = None if tp.error or tp.create else config_drift(req, pool, tp.topic)
        if drift is None or not (drift.changes or drift.refused):
            out.append(tp)
            continue
        if drift.refused:
            out.append(dataclasses.replace(tp, refused=tp.refused or drift.refused))
            continue
        rows = tuple((k, v, drift.local.get(k)) for k, v in sorted(drift.changes.items()))
        why = f"topic {tp.topic}'s configs differ from {drift.source}'s: {drift.describe()}"
        out.append(dataclasses.replace(tp, config_drift=rows, warnings=(*tp.warnings, why)))
    return out
