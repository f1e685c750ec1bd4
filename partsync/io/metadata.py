"""One cluster's metadata as last read: its brokers, and the partitions and leaders of the
topics a run works on."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from partsync._kafka import ELECTION_CODES, ErrorCode, Metadata, TopicMeta, broker_error
from partsync.errors import BrokerError, TopicError
from partsync.io.connections import Connections
from partsync.retry import Backoff, retry_on

__all__ = ["BOUNDS_ELECTION_WAIT_S", "MetadataCache", "TopicInfo"]

# How long reading a topic's leaders or a partition's bounds waits out a leader election (a
# restarted single broker takes a few seconds to lead its partitions again).
BOUNDS_ELECTION_WAIT_S = 15.0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    leaders: dict[int, int]
    leader_epochs: dict[int, int] = field(default_factory=dict)
    # Metadata v10+; a topic deleted and created again under its name gets a new one.
    topic_id: str | None = None
    # The most replicas a partition has (its replication factor; 0 when not told).
    replication: int = 0


class MetadataCache:
    """The last metadata read and the topics it asked for. Metadata is read for the topics a
    run works on only (a cluster may hold 100k partitions of other topics): those named by
    ``watch`` or asked about by ``topic``. Reads run one at a time, numbered as they start: a
    refresh asked for while another read was under way waits for it, and one that began after
    the asking (so it has every topic watched by then) also serves it."""

    def __init__(self, conns: Connections) -> None:
        self.name = conns.name
        self._conns = conns
        self._metadata: tuple[Metadata, frozenset[str]] | None = None
        self._watched: set[str] = set()
        self._watched_lock = threading.Lock()
        self._metadata_lock = threading.Lock()
        self._reads_started = 0
        self._read_ok = 0  # the number of the last read that succeeded
        # TopicInfo per topic of the current metadata (rebuilt when metadata is refreshed):
        # per-partition callers ask for it often, and building it is O(partitions).
        self._topics: tuple[Metadata | None, dict[str, TopicInfo | None]] = (None, {})

    def metadata(self, refresh: bool = False) -> Metadata:
        """The brokers and the watched topics' partitions (``topic``, ``watch``), as last read;
        ``refresh`` reads them again."""
        return self._read_metadata(refresh)[0]

    def _read_metadata(self, refresh: bool) -> tuple[Metadata, frozenset[str]]:
        last = self._metadata
        if last is not None and not refresh:
            return last
        asked = self._reads_started
        with self._metadata_lock:
            last = self._metadata
            if last is not None and (not refresh or self._read_ok > asked):
                return last  # read meanwhile, by a read that began after the asking
            self._reads_started += 1
            number = self._reads_started
            with self._watched_lock:
                topics = sorted(self._watched)
            md = self._conns.bootstrap_call(lambda c: c.metadata(topics))
            last = self._metadata = (md, frozenset(topics))
            self._read_ok = number
            return last

    def watch(self, topics: Iterable[str]) -> None:
        """Read these topics' metadata from now on: naming all of a run's topics before the
        first read makes it one request, rather than one more as ``topic`` meets each."""
        with self._watched_lock:
            self._watched.update(topics)

    def list_topics(self) -> list[str]:
        """Every topic of the cluster that can be described (the one metadata read of all
        topics: for ``--topic-pattern``)."""
        md = self._conns.bootstrap_call(lambda c: c.metadata(None))
        return [t for t, m in md.topics.items() if m.error_code == 0]

    def topic(self, name: str, refresh: bool = False) -> TopicInfo | None:
        """Partition count and leaders, or None when the topic does not exist. A partition
        without a leader (an election under way, e.g. its only replica's broker restarting)
        is waited for with fresh metadata for up to ``BOUNDS_ELECTION_WAIT_S``, as Kafka's
        clients wait for a leader."""

        def again(_e: Exception) -> None:
            nonlocal refresh
            refresh = True

        return retry_on(
            lambda: self._topic_now(name, refresh),
            lambda: Backoff(0.1, 1.0, deadline=BOUNDS_ELECTION_WAIT_S),  # from the first error
            lambda e: isinstance(e, BrokerError) and e.error_code in ELECTION_CODES,
            again=again,
        )

    def _topic_now(self, name: str, refresh: bool) -> TopicInfo | None:
        if name not in self._watched:
            self.watch((name,))
        md, asked = self._read_metadata(refresh)
        if name not in asked:  # read before it was watched: read again, now with it
            md, asked = self._read_metadata(True)
        cached_md, infos = self._topics
        if cached_md is not md:
            infos = {}
            self._topics = (md, infos)
        if name not in infos:
            infos[name] = self._topic_info(md, name)
        return infos[name]

    def _topic_info(self, md: Metadata, name: str) -> TopicInfo | None:
        t: TopicMeta | None = md.topics.get(name)
        if t is None or t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None  # (a broker may leave an unknown topic out of its answer)
        if t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise broker_error(
                t.error_code, "not authorized to describe the topic", cluster=self.name, topic=name
            )
        if t.error_code:
            raise broker_error(
                t.error_code, "metadata for the topic failed", cluster=self.name, topic=name
            )
        leaders = {}
        epochs = {p: pm.leader_epoch for p, pm in t.partitions.items()}
        for p, pm in sorted(t.partitions.items()):
            if pm.leader < 0:
                raise broker_error(
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    "partition has no leader",
                    cluster=self.name,
                    topic=name,
                    partition=p,
                )
            leaders[p] = pm.leader
        replication = max((pm.replicas for pm in t.partitions.values()), default=0)
        return TopicInfo(name, len(t.partitions), leaders, epochs, t.topic_id, replication)

    def leader(self, topic: str, partition: int) -> int:
        info = self.topic(topic)
        if info is None or partition not in info.leaders:
            raise TopicError(
                "topic or partition does not exist",
                cluster=self.name,
                topic=topic,
                partition=partition,
            )
        return info.leaders[partition]
