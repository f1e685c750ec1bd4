"""The topic ids KIP-848's consumer protocol names partitions by (``io.group_consumer``): its
heartbeats report owned partitions, and its answers assign them, by topic id, not name."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from partsync.errors import ClusterError
from partsync.io.group_session import Member

__all__ = ["TopicIds"]


class TopicIds:
    """The ids of the member's topics, learnt from the local cluster's metadata as the
    coordinator names them."""

    def __init__(self, member: Member) -> None:
        self.m = member
        self._ids: dict[uuid.UUID, str] = {}

    def owned(self, partitions: Iterable[tuple[str, int]]) -> dict[uuid.UUID, list[int]]:
        """``partitions`` (topic name, partition) by topic id, for a heartbeat."""
        owned: dict[uuid.UUID, list[int]] = {}
        ids = {name: tid for tid, name in self._ids.items()}
        for topic, p in partitions:
            owned.setdefault(ids[topic], []).append(p)  # owned only after name() named it
        return owned

    def name(self, tid: uuid.UUID) -> str:
        """The name of the member's topic with id ``tid``."""
        name = self._ids.get(tid)
        if name is None:
            m = self.m
            for topic in m.topics:
                info = m.local.topic(topic, refresh=True)
                if info is not None and info.topic_id:
                    self._ids[uuid.UUID(info.topic_id)] = topic
            name = self._ids.get(tid)
            if name is None:
                # E.g. local metadata that lags a topic created again: ask again shortly.
                raise ClusterError(
                    f"group {m.group!r}: assigned topic id {tid}, which none of "
                    f"{list(m.topics)} has in the local cluster's metadata",
                    cluster=m.local.name,
                )
        return name
