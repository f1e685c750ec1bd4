"""The one scripted broker of the unit tests: a stand-in for one broker connection.

``ScriptedBroker`` implements only the adapter calls (``partsync._kafka`` ``Connection``) that
the io layer makes: Metadata, pipelined Produce (``send_produce_many`` then
``receive_produce_many``) and pipelined Fetch (``send_fetch_many`` then ``receive_fetch_many``).
It answers in memory as a broker would, in the order asked, records every request, and can be
scripted to hold sends or answers, fail a send, cut the connection before an answer or throttle.
There is no socket and no byte on a wire.

It is for fast unit tests of what drives connections: the shared writer's and the fetch lane's
packing, ordering and failure handling, and the cluster's metadata cache. The wire path and
syncing itself are tested only against real brokers (``tests/integration``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from partsync._kafka import (
    BrokerInfo,
    FetchedPartition,
    Metadata,
    PartitionMeta,
    ProducedPartition,
    TopicMeta,
)
from partsync.errors import ClusterError

UNKNOWN_TOPIC_OR_PARTITION = 3

FetchRequest = tuple[dict[str, list[tuple[int, int, int]]], int]  # (wanted, max_bytes)


class ScriptedBroker:
    """One broker connection's answers, scripted.

    - Metadata: ``topics`` (name -> partition count) as Kafka answers it: the topics asked for,
      unknown ones with an error (left out with ``omit_unknown``), or all of them for None.
    - Produce: each partition's base offset is its log end so far, which grows by the length of
      each batch (so a batch of n bytes stands for n records).
    - Fetch: each partition asked for gets the record ``b"topic/partition@offset"``.

    Scripting: ``hold`` is waited for before a send is taken; answers are read only once ``gate``
    is set; sends after the first ``fail_after`` requests fail (connection reset); the answer to
    request ``cut_at`` (0-based) never comes, the connection is closed instead; the first answer
    carries ``throttle_ms``; ``rtt`` is the connection's measured setup round trip. A metadata
    call with ``in_call`` and ``release`` set signals ``in_call`` and waits for ``release``.
    """

    def __init__(
        self,
        *,
        topics: Mapping[str, int] | None = None,
        omit_unknown: bool = False,
        rtt: float = 0.0,
        hold: threading.Event | None = None,
        gate: threading.Event | None = None,
        fail_after: int | None = None,
        cut_at: int | None = None,
        throttle_ms: int = 0,
    ) -> None:
        self.cluster = "test"
        self.setup_rtt = rtt
        self.last_throttle_ms = 0
        self.closed = False
        self.topics = dict(topics or {})
        self.omit_unknown = omit_unknown
        self.in_call: threading.Event | None = None
        self.release: threading.Event | None = None
        self.metadata_requests: list[list[str] | None] = []
        self.produce_requests: list[dict[str, dict[int, Any]]] = []
        self.fetch_requests: list[FetchRequest] = []
        self._answers: list[dict[tuple[str, int], Any]] = []  # in the order the requests went
        self._ends: dict[tuple[str, int], int] = {}
        self._cv = threading.Condition()
        self._hold = hold
        self._gate = gate
        self._fail_after = fail_after
        self._cut_at = cut_at
        self._throttle_ms = throttle_ms
        self._received = 0

    # -- Metadata --------------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None) -> Metadata:
        self.metadata_requests.append(None if topics is None else list(topics))
        if self.in_call is not None and self.release is not None:
            self.in_call.set()
            self.release.wait(5)
        out = {}
        for t in self.topics if topics is None else topics:
            if t in self.topics:
                parts = {p: PartitionMeta(p, 1, 0, 0) for p in range(self.topics[t])}
                out[t] = TopicMeta(t, 0, parts, None)
            elif not self.omit_unknown:
                out[t] = TopicMeta(t, UNKNOWN_TOPIC_OR_PARTITION, {}, None)
        return Metadata({1: BrokerInfo(1, "127.0.0.1", 9)}, out)

    # -- pipelined Produce and Fetch ------------------------------------------------------------

    def send_produce_many(
        self,
        batches: Mapping[str, Mapping[int, Any]],
        *,
        acks: int,
        timeout_ms: int,
        transactional_id: str | None = None,
    ) -> None:
        assert acks == -1
        with self._sending():
            self.produce_requests.append({t: dict(p) for t, p in batches.items()})
            answer = {}
            for t, parts in batches.items():
                for p, data in parts.items():
                    base = self._ends.get((t, p), 0)
                    self._ends[(t, p)] = base + len(data)
                    answer[(t, p)] = ProducedPartition(p, 0, base, 0, None)
            self._answers.append(answer)

    def receive_produce_many(self) -> dict[tuple[str, int], ProducedPartition]:
        return self._receive()

    def send_fetch_many(
        self,
        wanted: Mapping[str, list[tuple[int, int, int]]],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        rack: bool = True,
    ) -> None:
        assert min_bytes == 1 and rack  # lanes carry the client rack unless made without
        with self._sending():
            self.fetch_requests.append(({t: list(p) for t, p in wanted.items()}, max_bytes))
            self._answers.append(
                {
                    (t, p): FetchedPartition(p, 0, 1000, 0, f"{t}/{p}@{o}".encode())
                    for t, parts in wanted.items()
                    for p, o, _m in parts
                }
            )

    def receive_fetch_many(self) -> dict[tuple[str, int], FetchedPartition]:
        return self._receive()

    def sent(self) -> int:
        """Produce and Fetch requests sent so far."""
        with self._cv:
            return len(self.produce_requests) + len(self.fetch_requests)

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    @contextmanager
    def _sending(self) -> Iterator[None]:
        """Wait for ``hold``, then take a request under the lock (or fail the send) and wake
        the receiver."""
        if self._hold is not None:
            self._hold.wait(5)
        with self._cv:
            if self.closed:
                raise ClusterError("closed", cluster=self.cluster)
            sent = len(self.produce_requests) + len(self.fetch_requests)
            if self._fail_after is not None and sent >= self._fail_after:
                raise ClusterError("connection reset", cluster=self.cluster)
            yield
            self._cv.notify_all()

    def _receive(self) -> dict[tuple[str, int], Any]:
        if self._gate is not None:
            self._gate.wait(5)
        with self._cv:
            if self._cut_at is not None and self._received == self._cut_at:
                self.closed = True
                raise ClusterError("connection closed by broker", cluster=self.cluster)
            while not self._answers:
                if self.closed:
                    raise ClusterError("closed", cluster=self.cluster)
                self._cv.wait(0.1)
            self.last_throttle_ms = self._throttle_ms if self._received == 0 else 0
            self._received += 1
            return self._answers.pop(0)
