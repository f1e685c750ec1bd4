"""Kafka semantics on demand: what the strict proxy makes a broker do that our brokers (and real
Kafka, at a chosen moment) will not do when asked.

:class:`KafkaSemantics` holds the behaviours a test switches on; :class:`StrictProxy` consults it
for every request and response (``proxy.kafka``):

* **Rejected appends.** ``reject_produce`` answers the n-th Produce of a partition with an error
  *without forwarding it* (nothing is appended, as when Kafka rejects a batch), after holding
  the answer ``hold_s`` seconds, so a client that pipelines appends sends the next one while
  the rejected one is unanswered (the proxy's ``pipelined`` rule flags that). Batches Kafka
  always refuses are rejected the same way: a LogAppendTime batch from a client
  (INVALID_TIMESTAMP), an old message format (INVALID_RECORD), and, for topics given limits
  with ``timestamp_limits``, timestamps beyond ``message.timestamp.before/after.max.ms``.
* **A high watermark below the log end.** ``lag_high_watermark`` reports HW - n to consumer
  reads (Fetch, and ListOffsets latest with replica id -1) and returns no batch above it, as
  Kafka does while an append is not yet replicated; ListOffsets as the debug replica (-2)
  still shows the log end.
* **Throttling.** ``throttle_fetches`` answers Fetch requests as a broker over a quota does
  (KIP-219): at once, with no partitions, and ``throttle_time_ms``.
* **A moved leader.** ``not_leader`` answers the next Produce or Fetch of a partition with
  NOT_LEADER_OR_FOLLOWER.
* **Compaction.** ``hide_offsets`` drops whole batches inside a range from Fetch answers, as the
  log cleaner removes batches whose records were all superseded.
* **Cut connections** (a fault, not a semantics): ``cut_after_produce`` closes the client's
  connection and the broker's right after a Produce was forwarded, so the append may or may
  not be in the log and its answer never comes; ``cut_after_fetch`` does the same to Fetch
  requests (a reader's connection dies mid-read). Seeded, so a failing run can be repeated.

Every injection is counted in ``injected`` (by kind), so a test can tell that it happened.
"""

from __future__ import annotations

import random
import struct
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer.fetch import FetchResponse
    from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

__all__ = ["KafkaSemantics", "ProduceVerdict", "RejectedPartition"]

TopicPartition = tuple[str, int]

INVALID_TIMESTAMP = 32
INVALID_RECORD = 87
NOT_LEADER_OR_FOLLOWER = 6
_LOG_APPEND_TIME = 0x08
_LATEST = -1
_CONSUMER = -1


@dataclass(frozen=True)
class RejectedPartition:
    topic: str
    partition: int
    code: int
    message: str


@dataclass
class ProduceVerdict:
    """What to do with one Produce request: forward ``frame`` (None: forward nothing) and add
    ``rejected`` to the answer after ``hold_s`` seconds."""

    frame: bytes | None
    rejected: list[RejectedPartition] = field(default_factory=list)
    hold_s: float = 0.0


@dataclass
class _Reject:
    code: int
    skip: int
    times: int
    hold_s: float
    message: str


@dataclass
class _Lag:
    by: int
    seconds: float | None  # None: until cleared
    until: float | None = None  # when it ends: ``seconds`` after the first read it lagged


class KafkaSemantics:
    """Behaviours switched on by tests; thread-safe (the proxy's pumps call in)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rejects: dict[TopicPartition, list[_Reject]] = {}
        self._lags: dict[TopicPartition, _Lag] = {}
        self._hidden: dict[TopicPartition, list[tuple[int, int]]] = {}
        self._fetch_not_leader: set[TopicPartition] = set()
        # ListOffsets of these partitions answers NOT_LEADER_OR_FOLLOWER until then (monotonic):
        # a partition just created, whose leader does not lead it yet.
        self._leaderless: dict[TopicPartition, float] = {}
        self._throttles = 0
        self._throttle_ms = 0
        self._limits: dict[str, tuple[int | None, int | None]] = {}
        self._cut_probability = 0.0
        self._cut_api = "produce"
        self._cut_rng = random.Random(0)
        self._cuts_left = 0
        self._cut_skip = 0  # matching requests still to let through before cutting
        self.injected: Counter[str] = Counter()

    # -- switches -----------------------------------------------------------------------------

    def reject_produce(
        self,
        topic: str,
        partition: int,
        code: int,
        *,
        skip: int = 0,
        times: int = 1,
        hold_s: float = 0.3,
        message: str = "rejected by the test proxy",
    ) -> None:
        """Reject ``times`` Produce requests of the partition after letting ``skip`` through."""
        with self._lock:
            self._rejects.setdefault((topic, partition), []).append(
                _Reject(code, skip, times, hold_s, message)
            )

    def not_leader(self, topic: str, partition: int, api: str = "produce") -> None:
        """The next Produce (``api="produce"``) or Fetch of the partition gets
        NOT_LEADER_OR_FOLLOWER."""
        if api == "produce":
            self.reject_produce(
                topic,
                partition,
                NOT_LEADER_OR_FOLLOWER,
                hold_s=0.0,
                message="This server is not the leader for that partition",
            )
        else:
            with self._lock:
                self._fetch_not_leader.add((topic, partition))

    def leaderless(self, topic: str, partition: int, seconds: float) -> None:
        """For ``seconds``, every ListOffsets of the partition gets NOT_LEADER_OR_FOLLOWER."""
        with self._lock:
            self._leaderless[(topic, partition)] = time.monotonic() + seconds

    def lag_high_watermark(
        self, topic: str, partition: int, by: int, *, seconds: float | None = None
    ) -> None:
        """Consumers see the high watermark ``by`` offsets below the log end, for ``seconds``
        from the first read of it (None: until ``clear``): counted from then, not from now, so
        a run that is slow to start still meets the lag."""
        with self._lock:
            self._lags[(topic, partition)] = _Lag(by, seconds)

    def throttle_fetches(self, count: int, throttle_ms: int = 200) -> None:
        with self._lock:
            self._throttles, self._throttle_ms = count, throttle_ms

    def hide_offsets(self, topic: str, partition: int, lo: int, hi: int) -> None:
        """Fetch answers leave out every batch lying wholly inside ``[lo, hi)``."""
        with self._lock:
            self._hidden.setdefault((topic, partition), []).append((lo, hi))

    def timestamp_limits(
        self, topic: str, *, before_max_ms: int | None = None, after_max_ms: int | None = None
    ) -> None:
        """The topic's message.timestamp.before/after.max.ms, enforced on Produce."""
        with self._lock:
            self._limits[topic] = (before_max_ms, after_max_ms)

    def cut_after_produce(self, probability: float, *, seed: int, limit: int = 1 << 30) -> None:
        """After forwarding a Produce, cut both connections with ``probability`` (at most
        ``limit`` times)."""
        self._cut_after("produce", probability, seed, limit)

    def cut_after_fetch(self, probability: float, *, seed: int, limit: int = 1 << 30) -> None:
        self._cut_after("fetch", probability, seed, limit)

    def cut_after_delete_records(self, *, skip: int = 0, limit: int = 1) -> None:
        """Cut the connection of ``limit`` DeleteRecords, after ``skip`` that go through, right
        after forwarding them: the broker moves the log start, the client never hears so."""
        self._cut_after("delete_records", 1.0, 0, limit, skip)

    def _cut_after(
        self, api: str, probability: float, seed: int, limit: int, skip: int = 0
    ) -> None:
        with self._lock:
            self._cut_skip = skip
            self._cut_api = api
            self._cut_probability = probability
            self._cut_rng = random.Random(seed)
            self._cuts_left = limit

    def cut_now(self, api: str = "produce") -> bool:
        """Whether to cut the connection of the ``api`` request just forwarded."""
        with self._lock:
            if self._cuts_left <= 0 or not self._cut_probability or api != self._cut_api:
                return False
            if self._cut_skip > 0:
                self._cut_skip -= 1
                return False
            if self._cut_rng.random() >= self._cut_probability:
                return False
            self._cuts_left -= 1
            self.injected[f"cut-after-{api}"] += 1
            return True

    def clear(self) -> None:
        with self._lock:
            self._cut_probability = 0.0
            self._rejects.clear()
            self._lags.clear()
            self._hidden.clear()
            self._fetch_not_leader.clear()
            self._leaderless.clear()
            self._throttles = 0
            self._limits.clear()

    @property
    def active(self) -> bool:
        with self._lock:
            return bool(
                self._lags
                or self._hidden
                or self._fetch_not_leader
                or self._throttles
                or self._leaderless
            )

    # -- Produce ------------------------------------------------------------------------------

    def on_produce(self, frame: bytes, header: Any, batches: list[Any]) -> ProduceVerdict:
        """Decide on a Produce request (``batches``: the checker's ProducedBatch list)."""
        rejected: dict[TopicPartition, RejectedPartition] = {}
        hold = 0.0
        now_ms = int(time.time() * 1000)
        with self._lock:
            for b in batches:
                key = (b.topic, b.partition)
                reason = self._kafka_refusal(b, now_ms)
                if reason is not None:
                    rejected[key] = RejectedPartition(b.topic, b.partition, *reason)
                    self.injected["refused-batch"] += 1
            for key in dict.fromkeys((b.topic, b.partition) for b in batches):
                rules = self._rejects.get(key)
                if not rules or key in rejected:
                    continue
                rule = rules[0]
                if rule.skip > 0:
                    rule.skip -= 1
                    continue
                rule.times -= 1
                if rule.times <= 0:
                    rules.pop(0)
                rejected[key] = RejectedPartition(key[0], key[1], rule.code, rule.message)
                hold = max(hold, rule.hold_s)
                self.injected[f"produce-error-{rule.code}"] += 1
            for magic_key in self._old_magic(batches):
                rejected.setdefault(
                    magic_key,
                    RejectedPartition(
                        *magic_key,
                        INVALID_RECORD,
                        "Produce requests with version 3 are only allowed to contain "
                        "record batches with magic version 2",
                    ),
                )
        if not rejected:
            return ProduceVerdict(frame)
        return ProduceVerdict(_without(frame, header, set(rejected)), list(rejected.values()), hold)

    def _kafka_refusal(self, b: Any, now_ms: int) -> tuple[int, str] | None:
        """LogValidator's timestamp rules (caller holds the lock)."""
        if b.attributes & _LOG_APPEND_TIME:
            return (
                INVALID_TIMESTAMP,
                "Invalid timestamp type in message: LogAppendTime from a client",
            )
        before, after = self._limits.get(b.topic, (None, None))
        if before is not None and b.base_timestamp >= 0 and now_ms - b.base_timestamp > before:
            return INVALID_TIMESTAMP, f"Timestamp {b.base_timestamp} is out of range (before)"
        if after is not None and b.max_timestamp - now_ms > after:
            return INVALID_TIMESTAMP, f"Timestamp {b.max_timestamp} is out of range (after)"
        return None

    @staticmethod
    def _old_magic(batches: list[Any]) -> list[TopicPartition]:
        return [(b.topic, b.partition) for b in batches if b.magic != 2]

    # -- Fetch and ListOffsets ----------------------------------------------------------------

    def lagging(self, topic: str, partition: int) -> int:
        with self._lock:
            lag = self._lags.get((topic, partition))
            if lag is None:
                return 0
            now = time.monotonic()
            if lag.seconds is not None and lag.until is None:
                lag.until = now + lag.seconds  # the first read: the lag's time starts
            if lag.until is not None and now >= lag.until:
                del self._lags[(topic, partition)]
                return 0
            return lag.by

    def rewrite_fetch(self, frame: bytes, version: int) -> bytes:
        if not self.active:
            return frame
        resp = FetchResponse.decode(frame, version=version, header=True)
        with self._lock:
            if self._throttles > 0:
                self._throttles -= 1
                self.injected["fetch-throttled"] += 1
                resp.responses = []
                resp.throttle_time_ms = self._throttle_ms
                return bytes(resp.encode(header=True))
        for t in resp.responses:
            name = getattr(t, "topic", None)
            for p in t.partitions:
                key = (name, p.partition_index)
                with self._lock:
                    if key in self._fetch_not_leader:
                        self._fetch_not_leader.discard(key)  # type: ignore[arg-type]
                        self.injected["fetch-not-leader"] += 1
                        p.error_code, p.high_watermark, p.records = NOT_LEADER_OR_FOLLOWER, -1, b""
                        continue
                    hidden = list(self._hidden.get(key, ()))  # type: ignore[arg-type]
                by = self.lagging(*key) if name is not None else 0
                if p.error_code or not (by or hidden):
                    continue
                limit = None
                if by:
                    limit = max(p.high_watermark - by, max(p.log_start_offset, 0))
                    p.high_watermark = limit
                    if p.last_stable_offset >= 0:
                        p.last_stable_offset = min(p.last_stable_offset, limit)
                    self.injected["lagged-hw"] += 1
                p.records, dropped = _filter_batches(p.records or b"", limit, hidden)
                self.injected["hidden-batch"] += dropped
        return bytes(resp.encode(header=True))

    def list_offsets_context(self, frame: bytes, version: int) -> dict[TopicPartition, int] | None:
        """Which partitions of a ListOffsets request ask a consumer's latest offset."""
        with self._lock:
            if not self._lags and not self._leaderless:
                return None
        req = ListOffsetsRequest.decode(frame, version=version, header=True)
        if req.replica_id != _CONSUMER:
            # The debug replica (-2) or a follower: the truth (a leaderless partition aside).
            return {} if self._leaderless else None
        return {(t.name, p.partition_index): p.timestamp for t in req.topics for p in t.partitions}

    def rewrite_list_offsets(
        self, frame: bytes, version: int, asked: dict[TopicPartition, int]
    ) -> bytes:
        resp = ListOffsetsResponse.decode(frame, version=version, header=True)
        changed = False
        now = time.monotonic()
        for t in resp.topics:
            for p in t.partitions:
                key = (t.name, p.partition_index)
                with self._lock:
                    until = self._leaderless.get(key)
                if until is not None and now < until:
                    p.error_code, p.offset = NOT_LEADER_OR_FOLLOWER, -1
                    changed = True
                    self.injected["leaderless"] += 1
                    continue
                by = self.lagging(*key)
                if by and asked.get(key) == _LATEST and not p.error_code and p.offset >= 0:
                    p.offset = max(p.offset - by, 0)
                    changed = True
                    self.injected["lagged-hw"] += 1
        return bytes(resp.encode(header=True)) if changed else frame


# -- frame surgery ------------------------------------------------------------------------------


def _without(frame: bytes, header: Any, drop: set[TopicPartition]) -> bytes | None:
    """The Produce request without ``drop``'s partitions; None when nothing is left."""
    req = ProduceRequest.decode(frame, version=header.api_version, header=True)
    topics = []
    for t in req.topic_data:
        keep = [p for p in t.partition_data if (t.name, p.index) not in drop]
        if keep:
            t.partition_data = keep
            topics.append(t)
    if not topics:
        return None
    req.topic_data = topics
    return bytes(req.encode(header=True))


def produce_answer(
    upstream: bytes | None, version: int, correlation_id: int, rejected: list[RejectedPartition]
) -> bytes:
    """The broker's Produce answer (or, when nothing was forwarded, a new one) with the
    rejected partitions' errors added."""
    if upstream is not None:
        resp = ProduceResponse.decode(upstream, version=version, header=True)
    else:
        resp = ProduceResponse(responses=[], throttle_time_ms=0)
        resp.API_VERSION = version
        resp.with_header(correlation_id=correlation_id)
    PR = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    by_topic = {t.name: t for t in resp.responses}
    for r in rejected:
        t = by_topic.get(r.topic)
        if t is None:
            t = ProduceResponse.TopicProduceResponse(name=r.topic, partition_responses=[])
            resp.responses.append(t)
            by_topic[r.topic] = t
        t.partition_responses.append(
            PR(index=r.partition, error_code=r.code, base_offset=-1, error_message=r.message)
        )
    return bytes(resp.encode(header=True))


_LENGTH = struct.Struct(">qi")


def _filter_batches(
    records: bytes, limit: int | None, hidden: list[tuple[int, int]]
) -> tuple[bytes, int]:
    """Keep whole batches ending below ``limit`` (None: all) and outside every hidden range;
    returns the records and how many hidden batches were dropped."""
    out = bytearray()
    dropped = 0
    pos = 0
    data = bytes(records)
    while pos + 61 <= len(data):
        base, length = _LENGTH.unpack_from(data, pos)
        end = pos + 12 + length
        if end > len(data):
            break  # a truncated tail batch: the client fetches it whole next time
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        last = base + last_delta
        if limit is not None and last >= limit:
            break
        if any(lo <= base and last < hi for lo, hi in hidden):
            dropped += 1
        else:
            out += data[pos:end]
        pos = end
    return bytes(out), dropped
