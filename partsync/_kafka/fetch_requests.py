"""Fetch requests (a mixin of ``Connection``): pipelined (``send_fetch*``, then
``receive_fetch*``), in fetch sessions (KIP-227), or as one ``call`` that waits out a broker's
throttling. Every answer is decoded by ``raw`` (records are views into the received body, not
copies) and turned into ``FetchedPartition``s by ``fetch_outcome``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from kafka.protocol.consumer.fetch import FetchRequest

from partsync._kafka.codes import raise_for_code
from partsync._kafka.raw import decode_fetch_response
from partsync.errors import ClusterError

if TYPE_CHECKING:
    from partsync._kafka.framed_socket import Answer, Decoder

__all__ = [
    "THROTTLE_WAIT_LIMIT_S",
    "FetchOutcome",
    "FetchRequests",
    "FetchedPartition",
    "fetch_outcome",
]


# The longest a fetch waits out a broker's throttling before returning what it has (nothing).
THROTTLE_WAIT_LIMIT_S = 60.0


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview
    # KIP-392: the replica the leader asks this client to fetch the partition from instead
    # (given a client rack; the answer then holds no records), or -1.
    preferred_read_replica: int = -1


class FetchOutcome(NamedTuple):
    """A Fetch response: how long the broker asks this client to wait before its next request
    (a quota; KIP-219), the top-level error code and fetch session id (v7+, else 0), and the
    partitions by (topic, partition)."""

    throttle_ms: int
    error_code: int
    session_id: int
    partitions: dict[tuple[str, int], FetchedPartition]


def fetch_outcome(body: bytes, version: int, offset: int) -> FetchOutcome:
    """The Fetch response in ``body`` (its header ends at ``offset``), records as views into
    ``body``. Raises ValueError on a body that does not parse. Pure: no sockets."""
    throttle, error, session_id, topics = decode_fetch_response(body, version, offset)
    return FetchOutcome(
        throttle,
        error,
        session_id,
        {
            (topic, p.partition): FetchedPartition(
                p.partition,
                p.error_code,
                p.high_watermark,
                p.log_start_offset,
                p.records,
                p.preferred_read_replica,
            )
            for topic, parts in topics.items()
            for p in parts
        },
    )


def _fetch_request(
    wanted: Mapping[str, list[tuple[int, int, int]]],
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    rack: str = "",
    *,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Mapping[str, list[int]] | None = None,
) -> FetchRequest:
    """A Fetch without a fetch session (epoch -1), or in one (KIP-227: ``session_id`` and
    ``session_epoch`` as ``plan.fetch_session`` says, ``forgotten`` partitions leaving it)."""
    P = FetchRequest.FetchTopic.FetchPartition
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    P(partition=p, fetch_offset=o, partition_max_bytes=m, log_start_offset=-1)
                    for p, o, m in parts
                ],
            )
            for topic, parts in wanted.items()
        ],
        forgotten_topics_data=[
            FetchRequest.ForgottenTopic(topic=t, partitions=ps)
            for t, ps in (forgotten or {}).items()
        ],
        rack_id=rack,
    )


class FetchRequests:
    """Fetch over ``send``/``receive_body`` or ``call_raw`` (from ``BrokerConnection``)."""

    cluster: str
    rack: str
    last_throttle_ms: int

    if TYPE_CHECKING:

        def call_raw(self, api: str, request: Any, decode: Decoder) -> Any: ...

        def send(self, api: str, request: Any, _answer: Answer | None = None) -> None: ...

        def receive_body(self) -> tuple[bytes, int]: ...

        def version(self, api: str) -> int: ...

        def close(self) -> None: ...

    def send_fetch(
        self,
        topic: str,
        wanted: list[tuple[int, int, int]],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
    ) -> None:
        """Send a Fetch for (partition, offset, partition_max_bytes) triples; read it with
        ``receive_fetch``. min_bytes >= 1: Tansu answers min_bytes=0 with no partitions.
        Without the client's rack: the leader answers (a doorbell waits on the leader's log;
        a leader that points elsewhere answers at once, which would spin)."""
        self.send("Fetch", _fetch_request({topic: wanted}, max_wait_ms, min_bytes, max_bytes))

    def send_fetch_many(
        self,
        wanted: Mapping[str, list[tuple[int, int, int]]],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
        rack: bool = True,
    ) -> None:
        """A Fetch for several topics, with the client's rack unless ``rack`` is False (KIP-392:
        an answer may point a partition at another replica); read it with
        ``receive_fetch_many``."""
        self.send(
            "Fetch",
            _fetch_request(wanted, max_wait_ms, min_bytes, max_bytes, self.rack if rack else ""),
        )

    def receive_fetch(self) -> dict[int, FetchedPartition]:
        """The answer to ``send_fetch`` (one topic), its records views into the received body
        (``raw``: not copied); ``last_throttle_ms`` keeps how long the broker asked this client
        to wait before its next request (a quota)."""
        return {p: f for (_t, p), f in self.receive_fetch_many().items()}

    def send_fetch_session(
        self,
        session_id: int,
        epoch: int,
        wanted: Mapping[str, list[tuple[int, int, int]]],
        forgotten: Mapping[str, list[int]],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
    ) -> None:
        """A Fetch in a fetch session (KIP-227; Fetch v7+, the session id and epoch from
        ``plan.fetch_session``), to the leader (no rack: a doorbell waits on the leader's log);
        read it with ``receive_fetch_session``."""
        req = _fetch_request(
            wanted,
            max_wait_ms,
            min_bytes,
            max_bytes,
            session_id=session_id,
            session_epoch=epoch,
            forgotten=forgotten,
        )
        self.send("Fetch", req)

    def receive_fetch_session(self) -> tuple[int, int, dict[tuple[str, int], FetchedPartition]]:
        """(top-level error code, session id, partitions) of the answer to
        ``send_fetch_session``: the session errors come back as codes (the session is gone, a
        full request starts another), not raised."""
        return self._receive_fetch(raise_error=False)

    def receive_fetch_many(self) -> dict[tuple[str, int], FetchedPartition]:
        """The answer to ``send_fetch_many`` by (topic, partition), as ``receive_fetch``."""
        return self._receive_fetch(raise_error=True)[2]

    def _receive_fetch(
        self, *, raise_error: bool
    ) -> tuple[int, int, dict[tuple[str, int], FetchedPartition]]:
        body, at = self.receive_body()
        try:
            answer = fetch_outcome(body, self.version("Fetch"), at)
        except ValueError as e:
            self.close()  # out of step with the broker from here
            raise ClusterError(
                f"Fetch response does not parse: {e}", cluster=self.cluster
            ) from None
        self._took(answer, raise_error=raise_error)
        return answer.error_code, answer.session_id, answer.partitions

    def _took(self, answer: FetchOutcome, *, raise_error: bool) -> None:
        """What every Fetch answer means for the connection: its throttle time is kept in
        ``last_throttle_ms``, and a top-level error is raised (``raise_error``) or left to the
        caller (a fetch session's errors)."""
        self.last_throttle_ms = answer.throttle_ms
        if answer.error_code and raise_error:
            raise_for_code(answer.error_code, "Fetch", cluster=self.cluster)

    def fetch(
        self,
        topic: str,
        wanted: list[tuple[int, int, int]],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
    ) -> dict[int, FetchedPartition]:
        """A Fetch as a ``call`` (on a shared connection, alongside other threads' calls), its
        records views into the received body, as ``receive_fetch``'s. A
        throttled answer (KIP-219: the broker answers a client over its quota at once, without
        the partitions, with ``throttle_time_ms``, and reads nothing more from it until that
        time has passed) is waited out and asked again, for up to ``THROTTLE_WAIT_LIMIT_S`` in
        all; then the partial answer is returned."""
        waited = 0.0
        while True:
            req = _fetch_request({topic: wanted}, max_wait_ms, min_bytes, max_bytes)
            answer: FetchOutcome = self.call_raw("Fetch", req, fetch_outcome)
            self._took(answer, raise_error=True)
            out = {p: f for (_t, p), f in answer.partitions.items()}
            pause = min(answer.throttle_ms / 1000, THROTTLE_WAIT_LIMIT_S - waited)
            if pause <= 0 or all(p in out for p, _o, _m in wanted):
                return out
            time.sleep(pause)
            waited += pause
