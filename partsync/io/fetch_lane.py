"""A fetch lane: many partitions' fetches from one source broker in one Fetch request.

Each partition copy's fetchers used to fetch over a connection of their own, one partition per
Fetch: with hundreds of partitions that was hundreds of connections and a request per answer,
where a consumer asks for all its partitions on a broker at once. A lane is one connection to
one broker shared by every partition copy of the process that fetches from it (a copy with
``K`` connections per broker uses lanes ``0..K-1``, so one partition's pieces still travel over
K connections). Fetchers ``submit`` (topic, partition, offset, size) and get a ``FetchAnswer``
future; the lane packs what is waiting into Fetch requests with each partition at most once
(a later ask of the same partition waits for the next request), keeps up to ``max_in_flight``
requests outstanding (Kafka answers a connection's requests in order) and hands every
partition its part of the answer.

The request's response limit is the sum of its partitions' sizes (at most
``max_request_bytes``, which also caps how many large asks share a request). The broker may
still short a later partition: the first partition with data gets at least one whole batch
even when that batch is larger than it asked for (KIP-74), and those bytes come off the
response's room. Such a partition's part holds no whole batch, which its range read treats as
in a one-partition fetch (it asks again for more), so the cost is a fetch, not a wrong read.

Packing (``io.pipeline``): on a near broker, while requests are in flight, asks wait until one
is answered or ``PACK_PARTITIONS`` of them are waiting; on a far one (the first round trip took
``FAR_RTT_S``) every ask goes as soon as a request slot is free, since there a round trip costs
more than a request, and the lane keeps ``FAR_IN_FLIGHT_FACTOR`` times as many requests in
flight, since the partitions sharing it each keep their own fetches in flight. A throttled
answer (KIP-219) holds the lane's next request until the throttle time has passed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from partsync._kafka import Connection, FetchedPartition
from partsync.io.answer import Answer
from partsync.io.pipeline import Item, Pipeline

__all__ = ["FAR_RTT_S", "FetchAnswer", "FetchLane", "FetchReply"]

# A connection whose first round trip took this long is on a link where round trips cost
# (a LAN answers in well under a millisecond).
FAR_RTT_S = 0.01
PACK_PARTITIONS = 16
# On a far link every ask goes in a request of its own, and the partitions sharing the lane
# each keep their own fetches in flight: a cap of one partition's fetches made two partitions
# share what one had (0.61-0.66 of a 40 ms link's rate against 0.90 for one partition). The
# bytes in flight stay bounded by the copy's budget (--max-in-flight-bytes).
FAR_IN_FLIGHT_FACTOR = 8


@dataclass(frozen=True, slots=True)
class FetchReply:
    """A partition's part of a Fetch answer (None: the broker left it out, e.g. throttled) and
    the throttle time the whole answer carried."""

    partition: FetchedPartition | None
    throttle_ms: int


FetchAnswer = Answer[FetchReply]


@dataclass(slots=True)
class _Ask(Item[FetchReply]):
    offset: int = 0
    max_wait_ms: int = 500


class FetchLane(Pipeline[_Ask]):
    """Fetch requests for many partitions over one connection to one broker."""

    api = "Fetch"
    label = "fetch lane"

    def __init__(
        self,
        conn: Connection,
        *,
        max_in_flight: int = 4,
        max_request_bytes: int = 48 << 20,
        rack: bool = True,
    ) -> None:
        """``rack``: whether fetches carry the connection's client rack (KIP-392)."""
        self.far = conn.setup_rtt >= FAR_RTT_S
        self.broker = -1  # set by the cluster that made it: the node this lane fetches from
        self.rack = rack
        super().__init__(
            conn,
            max_in_flight=max_in_flight * (FAR_IN_FLIGHT_FACTOR if self.far else 1),
            max_request_bytes=max_request_bytes,
            pack_partitions=PACK_PARTITIONS,
            eager=self.far,
        )
        self._start()

    def submit(
        self,
        topic: str,
        partition: int,
        offset: int,
        size: int,
        *,
        max_wait_ms: int = 500,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> FetchAnswer:
        fut: FetchAnswer = Answer()  # not FetchAnswer(): see SharedWriter.submit
        self._enqueue(_Ask(topic, partition, size, cancelled, fut, offset, max_wait_ms))
        return fut

    def _send(self, batch: list[_Ask]) -> None:
        wanted: dict[str, list[tuple[int, int, int]]] = {}
        for a in batch:
            wanted.setdefault(a.topic, []).append((a.partition, a.offset, a.size))
        self._conn.send_fetch_many(
            wanted,
            max_wait_ms=min(a.max_wait_ms for a in batch),
            min_bytes=1,
            max_bytes=sum(a.size for a in batch),
            rack=self.rack,
        )

    def _receive(self) -> Mapping[tuple[str, int], Any]:
        return self._conn.receive_fetch_many()

    def _throttle_ms(self) -> int:
        return self._conn.last_throttle_ms

    def _hand_out(
        self, batch: list[_Ask], answers: Mapping[tuple[str, int], Any], throttle_ms: int
    ) -> None:
        for a in batch:
            a.future.set(FetchReply(answers.get((a.topic, a.partition)), throttle_ms))
