"""A strict wire checker: a TCP proxy holding partsync's Produce requests to Apache Kafka's rules.

The test brokers from PyPI (Tansu, noida) accept things Apache Kafka rejects: several batches
per partition, a non-zero baseOffset, bad CRCs (Tansu), batches with offset holes. A test that
only checks what such a broker stored cannot tell whether partsync would work against Kafka.
So tests put this proxy between partsync and the broker:

* Every request frame is parsed (size prefix, request header v1/v2 with its tagged fields).
  Every Produce request (api key 0) is decoded with kafka-python's protocol classes and checked
  by :func:`check_produce_request` against Kafka's client-append rules (LogValidator,
  ProduceRequest.validateRecords): exactly one magic-2 batch per partition, baseOffset 0, a valid
  CRC32C, lastOffsetDelta == recordCount - 1, no control batch, the transactional bit only with a
  transactional_id, a sequence with every producer id, a known codec, and acks == -1 (what
  partsync must send). Breaches go to :attr:`StrictProxy.violations`; the request is still
  forwarded, so the run goes on and every breach is collected.
* No pipelining per partition (rule ``pipelined``): a Produce for a partition while an earlier
  Produce for it is unanswered is a breach. Kafka keeps no producer state for a partition it
  has not seen the producer on (a new session, or state expired after
  ``producer.id.expiration.ms``, which is all historical data) and then accepts any sequence:
  if the earlier batch is rejected, the later one lands at its offset. The rule guards the
  mirrored partitions' offsets; partsync's own record topics (``PARTSYNC_RECORDS``: keyed,
  compacted, the latest value of a key wins, written by every process of a job) are exempt:
  two followers recording at once is two producers, which Kafka allows.
* Metadata responses (api key 3) are rewritten so the broker is advertised at the proxy's own
  address; otherwise a client would connect to the broker directly after bootstrapping and
  bypass the checker. The response is decoded with kafka-python's ``MetadataResponse`` (the
  api key and version come from the request with the same correlation id) and re-encoded.

Single-broker clusters only (both test brokers are single nodes): a proxy forwards every
connection to one upstream broker, so a Metadata response listing more than one broker is
reported in :attr:`StrictProxy.errors` and passed through unchanged. FindCoordinator responses
(group and transaction coordinators, since fencing) and DescribeCluster responses (``partsync
check``) are rewritten the same way; a response that cannot be is reported, so a client can
never silently go around the proxy.

Use from a test module (the fixture is found when imported into the module's namespace)::

    from tests.integration.kafka_proxy import strict_proxy  # noqa: F401  (pytest fixture)

    def test_x(strict_proxy, local_broker):
        proxy = strict_proxy(local_broker.bootstrap)
        ...  # point partsync's --local at proxy.bootstrap
        proxy.assert_clean()  # no violations, no proxy errors, at least one Produce seen
"""

from __future__ import annotations

import collections
import socket
import struct
import threading
import time
import warnings
from collections import Counter, namedtuple
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace, TracebackType
from typing import Any, Self

import crc32c
import pytest

with warnings.catch_warnings():
    # kafka-python 3.0 warns (DeprecationWarning) while loading its JSON protocol schemas.
    warnings.simplefilter("ignore", DeprecationWarning)
    # Importing the protocol packages registers every response class, which the header parser
    # uses to tell flexible (header v2, tagged fields) from non-flexible request versions.
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer  # noqa: F401
    from kafka.protocol.admin.cluster import DescribeClusterResponse
    from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
    from kafka.protocol.api_header import ResponseClassRegistry
    from kafka.protocol.api_key import ApiKey
    from kafka.protocol.consumer.fetch import FetchRequest
    from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse
    from kafka.protocol.metadata.metadata import MetadataResponse
    from kafka.protocol.producer.produce import ProduceRequest

from partsync.plan.topic_select import PARTSYNC_RECORDS
from tests.integration.kafka_semantics import KafkaSemantics, produce_answer

__all__ = [
    "LinkShape",
    "ProduceCheck",
    "ProducedBatch",
    "RequestHeader",
    "StrictProxy",
    "Violation",
    "check_partition_records",
    "check_produce_request",
    "parse_request_header",
    "strict_proxy",
]

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
FIND_COORDINATOR = 10
DELETE_RECORDS = 21
DESCRIBE_CLUSTER = 60
# Responses carrying broker addresses this proxy does not rewrite (none left: kept so that an
# API added here later is reported rather than let through).
_UNREWRITTEN_ADDRESSES: dict[int, str] = {}
_MAX_FRAME = 256 << 20

# Record batch v2 header (Kafka's DefaultRecordBatch); parsed here independently of partsync.
_BATCH = struct.Struct(
    ">q"  # baseOffset => Int64
    "i"  # batchLength => Int32
    "i"  # partitionLeaderEpoch => Int32
    "b"  # magic => Int8
    "I"  # crc => Uint32 (CRC32C of bytes 21..end)
    "h"  # attributes => Int16
    "i"  # lastOffsetDelta => Int32
    "q"  # baseTimestamp => Int64
    "q"  # maxTimestamp => Int64
    "q"  # producerId => Int64
    "h"  # producerEpoch => Int16
    "i"  # baseSequence => Int32
    "i"  # recordCount => Int32
)
_BatchHeader = namedtuple(
    "_BatchHeader",
    "base_offset batch_length partition_leader_epoch magic crc attributes last_offset_delta "
    "base_timestamp max_timestamp producer_id producer_epoch base_sequence record_count",
)
_LOG_OVERHEAD = 12  # baseOffset + batchLength
_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


@dataclass(frozen=True)
class Violation:
    """One breach of Kafka's Produce rules. ``rule`` is a short stable name tests can match."""

    rule: str
    detail: str
    topic: str | None = None
    partition: int | None = None
    correlation_id: int | None = None

    def __str__(self) -> str:
        where = f"{self.topic}[{self.partition}]" if self.topic is not None else "request"
        return f"{self.rule}: {where} (correlation id {self.correlation_id}): {self.detail}"


@dataclass(frozen=True)
class ProducedBatch:
    """A batch that passed through the proxy in a Produce request (for tests to inspect)."""

    topic: str
    partition: int
    codec: str
    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    size: int
    magic: int = 2
    attributes: int = 0
    base_timestamp: int = -1
    max_timestamp: int = -1


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool | None  # None: an api this kafka-python does not know
    tagged_fields: dict[int, bytes]
    size: int  # bytes the header takes in the frame

    @property
    def api_name(self) -> str:
        try:
            return ApiKey(self.api_key).name
        except ValueError:
            return f"api{self.api_key}"


@dataclass
class ProduceCheck:
    header: RequestHeader
    transactional_id: str | None = None
    acks: int | None = None
    violations: list[Violation] = field(default_factory=list)
    batches: list[ProducedBatch] = field(default_factory=list)


# -- parsing ----------------------------------------------------------------------------------


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated unsigned varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("unsigned varint longer than 5 bytes")


def _flexible(api_key: int, api_version: int) -> bool | None:
    """Whether this request version uses header v2 (flexible), from kafka-python's schemas."""
    probe = SimpleNamespace(request_api_key=api_key, request_api_version=api_version)
    try:
        cls = ResponseClassRegistry.get_response_class(probe)
    except ValueError:  # a version beyond what kafka-python knows
        return None
    return None if cls is None else bool(cls.flexible_version_q(api_version))


def parse_request_header(frame: bytes) -> RequestHeader:
    """Parse a request header (v1: api key, version, correlation id, client id; v2 adds tagged
    fields) from a frame without its size prefix."""
    api_key, api_version, correlation_id, n = struct.unpack_from(">hhih", frame, 0)
    pos = 10
    client_id = None
    if n >= 0:
        client_id = frame[pos : pos + n].decode("utf-8", errors="replace")
        pos += n
    flexible = _flexible(api_key, api_version)
    tags: dict[int, bytes] = {}
    if flexible:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            tags[tag] = bytes(frame[pos : pos + size])
            pos += size
    if pos > len(frame):
        raise ValueError(f"request header runs past the frame ({pos} > {len(frame)} bytes)")
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible, tags, pos)


def check_partition_records(
    records: bytes | None,
    *,
    topic: str,
    partition: int,
    transactional_id: str | None,
    correlation_id: int | None = None,
) -> tuple[list[Violation], list[ProducedBatch]]:
    """Apache Kafka's rules for one partition's records in a client Produce request."""
    out: list[Violation] = []
    batches: list[ProducedBatch] = []

    def bad(rule: str, detail: str) -> None:
        out.append(Violation(rule, detail, topic, partition, correlation_id))

    data = bytes(records or b"")
    raw: list[bytes] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < _BATCH.size:
            bad(
                "framing",
                f"{len(data) - pos} trailing bytes at byte {pos}, less than a batch header",
            )
            break
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + _LOG_OVERHEAD + length
        if length < _BATCH.size - _LOG_OVERHEAD or end > len(data):
            bad(
                "framing",
                f"batch at byte {pos} declares length {length}; {len(data) - pos} bytes left",
            )
            break
        raw.append(data[pos:end])
        pos = end
    if len(raw) != 1:
        # ProduceRequest.validateRecords: "exactly one record batch per partition" (87).
        bad(
            "batch-count",
            f"{len(raw)} record batches in one partition's records (must be exactly 1)",
        )

    for i, b in enumerate(raw):
        h = _BatchHeader._make(_BATCH.unpack_from(b, 0))
        what = f"batch {i} ({len(b)} bytes)"
        batches.append(
            ProducedBatch(
                topic,
                partition,
                _CODECS.get(h.attributes & 0x07, "?"),
                h.record_count,
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                len(b),
                h.magic,
                h.attributes,
                h.base_timestamp,
                h.max_timestamp,
            )
        )
        if h.magic != 2:
            bad("magic", f"{what}: magic {h.magic}, only record batch v2 is accepted")
            continue
        if h.base_offset != 0:
            bad("base-offset", f"{what}: baseOffset {h.base_offset}, a client must send 0")
        actual = crc32c.crc32c(b[21:])
        if actual != h.crc:
            bad("crc", f"{what}: stored CRC32C {h.crc:#010x}, computed {actual:#010x}")
        if h.last_offset_delta < 0 or h.last_offset_delta != h.record_count - 1:
            bad(
                "offset-delta",
                f"{what}: lastOffsetDelta {h.last_offset_delta} with {h.record_count} records "
                "(must be recordCount - 1: offset holes cannot be produced)",
            )
        if h.attributes & _CONTROL:
            bad(
                "control",
                f"{what}: control batch (attributes {h.attributes:#x}); markers are written "
                "by transaction coordinators, not clients",
            )
        if h.attributes & _TRANSACTIONAL and transactional_id is None:
            bad(
                "transactional",
                f"{what}: transactional batch in a request without a transactional_id",
            )
        if h.attributes & 0x07 not in _CODECS:
            bad("codec", f"{what}: unknown compression codec {h.attributes & 0x07}")
        if h.producer_id >= 0 and h.base_sequence < 0:
            bad(
                "sequence",
                f"{what}: producerId {h.producer_id} with baseSequence {h.base_sequence}",
            )
    return out, batches


def check_produce_request(frame: bytes, *, require_acks: int | None = -1) -> ProduceCheck:
    """Check one Produce request (a frame without its size prefix: header + body)."""
    header = parse_request_header(frame)
    if header.api_key != PRODUCE:
        raise ValueError(f"not a Produce request: api key {header.api_key}")
    check = ProduceCheck(header)

    def bad(rule: str, detail: str, topic: str | None = None, partition: int | None = None) -> None:
        check.violations.append(Violation(rule, detail, topic, partition, header.correlation_id))

    try:
        req = ProduceRequest.decode(frame, version=header.api_version, header=True)
    except Exception as e:  # noqa: BLE001 - an undecodable request is itself the finding
        bad("decode", f"Produce v{header.api_version} does not decode: {e!r}")
        return check
    if bytes(req.encode(header=False)) != bytes(frame[header.size :]):
        # kafka-python's decoder does not notice a short frame (it slices what is there);
        # re-encoding the body does. (The header is compared by our own parser: kafka-python
        # drops unknown header tagged fields when it re-encodes.)
        bad("decode", f"Produce v{header.api_version} body does not re-encode to the same bytes")
    check.transactional_id = req.transactional_id
    check.acks = req.acks
    if require_acks is not None and req.acks != require_acks:
        bad("acks", f"acks={req.acks}, expected {require_acks}")
    seen: set[tuple[str, int]] = set()
    for t in req.topic_data:
        topic = getattr(t, "name", None) or f"topic-id:{getattr(t, 'topic_id', None)}"
        for p in t.partition_data:
            if (topic, p.index) in seen:
                bad("batch-count", "partition listed twice in one request", topic, p.index)
            seen.add((topic, p.index))
            violations, batches = check_partition_records(
                p.records,
                topic=topic,
                partition=p.index,
                transactional_id=req.transactional_id,
                correlation_id=header.correlation_id,
            )
            check.violations += violations
            check.batches += batches
    return check


def _group_error(groups: list[str], code: int, version: int, correlation_id: int) -> bytes:
    """A DescribeGroups answer giving every group asked ``code``."""
    G = DescribeGroupsResponse.DescribedGroup
    resp = DescribeGroupsResponse(
        throttle_time_ms=0,
        groups=[
            G(
                error_code=code,
                group_id=g,
                group_state="",
                protocol_type="",
                protocol_data="",
                members=[],
            )
            for g in groups
        ],
    )
    resp.API_VERSION = version
    resp.with_header(correlation_id=correlation_id)
    return bytes(resp.encode(header=True))


def rewrite_metadata_response(
    frame: bytes, version: int, host: str, port: int
) -> tuple[bytes, str | None]:
    """Advertise ``host:port`` as the (single) broker. Returns the new frame (no size prefix)
    and an error text when the response could not be rewritten faithfully."""
    resp = MetadataResponse.decode(frame, version=version, header=True)
    if bytes(resp.encode(header=True)) != bytes(frame):
        return frame, f"Metadata v{version} does not re-encode to the same bytes; passed through"
    if len(resp.brokers) != 1:
        return frame, (
            f"Metadata v{version} lists {len(resp.brokers)} brokers; the proxy supports "
            "single-broker clusters only (passed through unchanged)"
        )
    resp.brokers[0].host = host
    resp.brokers[0].port = port
    return bytes(resp.encode(header=True)), None


def rewrite_find_coordinator_response(
    frame: bytes, version: int, host: str, port: int
) -> tuple[bytes, str | None]:
    """Advertise ``host:port`` as the coordinator (single-broker clusters)."""
    resp = FindCoordinatorResponse.decode(frame, version=version, header=True)
    if bytes(resp.encode(header=True)) != bytes(frame):
        return (
            frame,
            f"FindCoordinator v{version} does not re-encode to the same bytes; passed through",
        )
    for c in getattr(resp, "coordinators", None) or [resp]:
        if c.error_code == 0:
            c.host, c.port = host, port
    return bytes(resp.encode(header=True)), None


def rewrite_describe_cluster_response(
    frame: bytes, version: int, host: str, port: int
) -> tuple[bytes, str | None]:
    """Advertise ``host:port`` as the (single) broker of DescribeCluster (``partsync check``)."""
    resp = DescribeClusterResponse.decode(frame, version=version, header=True)
    if bytes(resp.encode(header=True)) != bytes(frame):
        return frame, f"DescribeCluster v{version} does not re-encode to the same bytes"
    if len(resp.brokers) > 1:
        return frame, f"DescribeCluster v{version} lists {len(resp.brokers)} brokers"
    for b in resp.brokers:
        b.host, b.port = host, port
    return bytes(resp.encode(header=True)), None


# -- the proxy --------------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes, or None on a clean EOF before the first byte."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            if not buf:
                return None
            raise ConnectionError(f"connection closed {len(buf)} bytes into a {n}-byte read")
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    if not 0 <= size <= _MAX_FRAME:
        raise ValueError(f"frame size {size} out of range")
    body = _recv_exact(sock, size)
    if body is None:
        raise ConnectionError("connection closed before the frame body")
    return body


@dataclass(frozen=True)
class LinkShape:
    """A long fat link as one TCP connection sees it (tc netem is not available here): at most
    ``rate`` bytes per second each way, and ``delay_s`` one way (the round trip is twice it).
    Frames go out whole (store and forward), in order."""

    rate: float
    delay_s: float


class _Shaped:
    """One direction of one connection through a ``LinkShape``: frames queue, leave at the
    link's rate and arrive ``delay_s`` later, in order, from a thread of their own."""

    def __init__(self, sock: socket.socket, shape: LinkShape, name: str) -> None:
        self.sock = sock
        self.shape = shape
        self._q: collections.deque[tuple[float, bytes]] = collections.deque()
        self._cv = threading.Condition()
        self._free_at = 0.0  # when the link has sent everything queued so far
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def sendall(self, data: bytes) -> None:
        with self._cv:
            start = max(time.monotonic(), self._free_at)
            self._free_at = start + len(data) / self.shape.rate
            self._q.append((self._free_at + self.shape.delay_s, data))
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._q and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                due, data = self._q[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                self._q.popleft()
            try:
                self.sock.sendall(data)
            except OSError:
                return


class _Link:
    """One client connection and its upstream connection, with a pump thread per direction.

    Answers reach the client in request order, whether they come from the broker or from the
    proxy itself (a rejected Produce, held for a while): Kafka answers a connection's requests
    in order, and clients rely on it."""

    def __init__(
        self, proxy: StrictProxy, client: socket.socket, upstream: socket.socket, n: int
    ) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        # correlation id -> (api key, version, context for the answer's rewrite)
        self._pending: dict[int, tuple[int, int, Any]] = {}
        self._order: collections.deque[int] = collections.deque()  # answers owed, in order
        self._ready: dict[int, bytes] = {}
        self._fetches = 0  # Fetch requests forwarded and not yet answered
        self._finished = 0
        self._closed = False
        shape = proxy.shape
        # Where requests and answers are written: the sockets, or the link emulator's queues.
        self._to_upstream: Any = (
            upstream if shape is None else _Shaped(upstream, shape, f"link-{n}-up")
        )
        self._to_client: Any = client if shape is None else _Shaped(client, shape, f"link-{n}-down")
        self.threads = [
            threading.Thread(target=self._pump_requests, name=f"proxy-{n}-requests", daemon=True),
            threading.Thread(target=self._pump_responses, name=f"proxy-{n}-responses", daemon=True),
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _pump_requests(self) -> None:
        try:
            while True:
                frame = _read_frame(self.client)
                if frame is None:
                    return
                step = self.proxy._on_request(frame, self)
                if step.cut_before:
                    self.shutdown()
                    return
                if step.header is not None and step.answered:
                    cid = step.header.correlation_id
                    with self._lock:
                        self._order.append(cid)
                        if step.forward is not None:
                            self._pending[cid] = (
                                step.header.api_key,
                                step.header.api_version,
                                step.context,
                            )
                            if step.header.api_key == FETCH:
                                self._fetches += 1
                                self.proxy.saw_fetches_in_flight(self._fetches)
                    if step.forward is None:  # answered by the proxy alone
                        self.deliver_later(cid, step.answer(None), step.hold_s)
                if step.forward is not None:
                    self._to_upstream.sendall(struct.pack(">i", len(step.forward)) + step.forward)
                    if step.cut_after:
                        self.shutdown()  # the append's fate is unknown to the client
                        return
        except OSError:  # ConnectionError included
            pass  # a side closed: the normal end of a connection
        except Exception as e:  # noqa: BLE001 - a proxy bug must fail the test, not hang it
            self.proxy._error(f"request pump: {e!r}")
        finally:
            self._finish()

    def _pump_responses(self) -> None:
        try:
            while True:
                frame = _read_frame(self.upstream)
                if frame is None:
                    return
                (cid,) = struct.unpack_from(">i", frame, 0)
                with self._lock:
                    api = self._pending.pop(cid, None)
                    if api is not None and api[0] == FETCH:
                        self._fetches -= 1
                if api is None:
                    self.proxy._error(f"response with unknown correlation id {cid}")
                    continue
                frame, hold = self.proxy._on_response(api[0], api[1], frame, self, api[2])
                if hold > 0:
                    self.deliver_later(cid, frame, hold)
                else:
                    self.deliver(cid, frame)
                    self.proxy._delivered(self, cid)
        except OSError:  # ConnectionError included
            pass
        except Exception as e:  # noqa: BLE001
            self.proxy._error(f"response pump: {e!r}")
        finally:
            self._finish()

    def deliver(self, cid: int, frame: bytes) -> None:
        """Send every answer that is next in request order."""
        with self._send_lock:
            with self._lock:
                self._ready[cid] = frame
                out = []
                while self._order and self._order[0] in self._ready:
                    head = self._order.popleft()
                    out.append((head, self._ready.pop(head)))
            try:
                for answered, f in out:
                    # An append counts as unanswered (the pipelining check) until its answer
                    # goes out; marked first, since the client may send its next append as soon
                    # as it has the answer.
                    self.proxy._answered(self, answered)
                    self._to_client.sendall(struct.pack(">i", len(f)) + f)
            except OSError:
                self.shutdown()

    def deliver_later(self, cid: int, frame: bytes, delay: float) -> None:
        timer = threading.Timer(delay, self.deliver, args=(cid, frame))
        timer.daemon = True
        timer.start()

    def shutdown(self) -> None:
        """Wake both pumps (a blocked recv returns) without closing the descriptors yet."""
        for s in (self.client, self.upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _finish(self) -> None:
        self.shutdown()
        with self._lock:
            self._finished += 1
            last = self._finished == len(self.threads)
        if last:
            self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for shaped in (self._to_upstream, self._to_client):
            if isinstance(shaped, _Shaped):
                shaped.close()
        self.client.close()
        self.upstream.close()
        self.proxy._forget(self)

    def join(self, timeout: float) -> None:
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(timeout)


@dataclass
class _Step:
    """What the proxy does with one request: forward ``forward`` (None: nothing), whether an
    answer is owed, what the answer's rewrite needs, and how a proxy-made answer looks."""

    header: RequestHeader | None
    forward: bytes | None
    answered: bool = True
    context: Any = None
    hold_s: float = 0.0
    answer: Callable[[bytes | None], bytes] = lambda upstream: upstream or b""
    cut_after: bool = False
    # The connection is cut instead (a fault's request that must never reach the broker).
    cut_before: bool = False


class StrictProxy:
    """Forward a loopback port to one broker, checking every Produce request on the way."""

    def __init__(
        self,
        upstream: str,
        *,
        host: str = "127.0.0.1",
        require_acks: int | None = -1,
        shape: LinkShape | None = None,
    ) -> None:
        up_host, _, up_port = upstream.rpartition(":")
        self.upstream = (up_host.strip("[]"), int(up_port))
        self.require_acks = require_acks
        # Every connection through the proxy as a long fat link (None: loopback as it is).
        self.shape = shape
        self.violations: list[Violation] = []
        self.errors: list[str] = []
        self.produced: list[ProducedBatch] = []
        self.requests: Counter[str] = Counter()  # api name -> requests seen
        self.metadata_rewritten = 0
        self.refused_connections = 0  # clients turned away while the broker was down
        # The most Fetch requests one connection had unanswered at once (pipelining).
        self.max_fetches_in_flight = 0
        # Partitions asked per Fetch request, in the order the requests came.
        self.fetch_partitions: list[int] = []
        # Kafka's behaviours on demand (tests/integration/kafka_semantics.py).
        self.kafka = KafkaSemantics()
        # Unanswered Produce requests: partition -> (link, correlation id) of the request.
        self._appending: dict[tuple[str, int], tuple[_Link, int]] = {}
        # A test's fault (``on_request``): (api name, count at which it fires, after the answer,
        # action), and once its request passed with after the answer: (link, correlation id).
        self._hook: tuple[str, int, bool, Callable[[], None]] | None = None
        self._hook_answer: tuple[_Link | None, int, Callable[[], None]] | None = None
        self._hook_drops = False
        # A test's coordinator fault (``coordinator_not_ready``): DescribeGroups requests the
        # proxy answers itself with this error code, and how many more.
        self._group_fault: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._count = 0
        self._stop = threading.Event()
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.1)  # the accept loop polls the stop flag
        self.host, self.port = self._listener.getsockname()[:2]
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"proxy-{self.port}", daemon=True
        )
        self._acceptor.start()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connections_made(self) -> int:
        """Client connections accepted (and forwarded) so far."""
        with self._lock:
            return self._count

    def saw_fetches_in_flight(self, n: int) -> None:
        with self._lock:
            self.max_fetches_in_flight = max(self.max_fetches_in_flight, n)

    @property
    def produce_requests_seen(self) -> int:
        with self._lock:
            return self.requests[ApiKey(PRODUCE).name]

    def reset(self) -> None:
        """Forget what was seen so far (a shared proxy between tests)."""
        with self._lock:
            self.violations.clear()
            self.errors.clear()
            self.produced.clear()
            self.requests.clear()
            self.kafka.clear()
            self.kafka.injected.clear()
            self._hook = self._hook_answer = None
            self._group_fault = None

    def on_request(
        self,
        api: str,
        nth: int,
        action: Callable[[], None],
        *,
        answered: bool = False,
        dropped: bool = False,
    ) -> None:
        """Run ``action`` (e.g. SIGKILL the client) once, as the ``nth`` ``api`` request from now
        passes, before the broker gets it (it still does, unless ``dropped``: then the
        connection is cut instead), or (``answered``) right after its answer went to the
        client."""
        with self._lock:
            self._hook = (api, self.requests[api] + nth, answered, action)
            self._hook_answer = None
            self._hook_drops = dropped

    def coordinator_not_ready(self, times: int, code: int = 16) -> None:
        """Answer the next ``times`` DescribeGroups requests with ``code`` (default
        NOT_COORDINATOR) without the broker: a cluster whose first group made it create
        __consumer_offsets, and whose coordinator has not loaded yet."""
        with self._lock:
            self._group_fault = (code, times)

    def group_faults_left(self) -> int:
        with self._lock:
            return 0 if self._group_fault is None else self._group_fault[1]

    def hook_fired(self) -> bool:
        with self._lock:
            return self._hook is None and self._hook_answer is None

    def _fire(self, header: RequestHeader, link: _Link | None) -> bool:
        """``on_request``'s action, if this request is the one; whether it is dropped."""
        with self._lock:
            hook = self._hook
            if hook is None or hook[0] != header.api_name or self.requests[hook[0]] != hook[1]:
                return False
            self._hook = None
            if hook[2]:
                self._hook_answer = (link, header.correlation_id, hook[3])
                return False
            dropped = self._hook_drops
        hook[3]()
        return dropped

    def _delivered(self, link: _Link | None, cid: int) -> None:
        with self._lock:
            hook = self._hook_answer
            if hook is None or hook[0] is not link or hook[1] != cid:
                return
            self._hook_answer = None
        hook[2]()

    def assert_clean(self, *, require_produce: bool = True) -> None:
        """No rule broken, no proxy trouble, and (unless told otherwise) at least one Produce
        checked, so that a clean result is not vacuous."""
        with self._lock:
            violations, errors = list(self.violations), list(self.errors)
            produced = self.requests[ApiKey(PRODUCE).name]
        assert errors == [], "proxy errors:\n" + "\n".join(errors)
        assert violations == [], "Kafka Produce rule violations:\n" + "\n".join(
            map(str, violations)
        )
        assert produced > 0 or not require_produce, (
            f"no Produce request went through the proxy (requests: {dict(self.requests)})"
        )

    # -- callbacks from the pumps ---------------------------------------------------------

    def _on_request(self, frame: bytes, link: _Link | None = None) -> _Step:
        """Parse and (for Produce) check a request, and decide what reaches the broker."""
        try:
            header = parse_request_header(frame)
        except (struct.error, ValueError) as e:
            self._error(f"unparsable request header: {e!r}")
            return _Step(None, frame)
        check = None
        if header.api_key == PRODUCE:
            check = check_produce_request(frame, require_acks=self.require_acks)
        with self._lock:
            self.requests[header.api_name] += 1
            if header.flexible is None:
                self.errors.append(
                    f"unknown api {header.api_key} v{header.api_version}: header not fully parsed"
                )
            if check is not None:
                self.violations += check.violations
                self.produced += check.batches
                if check.acks != 0:
                    self._track_appends(check, link)
        if self._fire(header, link):
            return _Step(header, None, answered=False, cut_before=True)
        if header.api_name == "DescribeGroups" and (fault := self._take_group_fault()):
            version, cid = header.api_version, header.correlation_id
            req = DescribeGroupsRequest.decode(frame, version=version, header=True)
            return _Step(
                header, None, answer=lambda _up: _group_error(req.groups, fault, version, cid)
            )
        if check is not None:
            verdict = self.kafka.on_produce(frame, header, check.batches)
            answered = check.acks != 0
            if not verdict.rejected:
                return _Step(header, frame, answered, cut_after=self.kafka.cut_now())
            version, cid, rejected = header.api_version, header.correlation_id, verdict.rejected
            return _Step(
                header,
                verdict.frame,
                answered,
                verdict,
                verdict.hold_s,
                lambda up: produce_answer(up, version, cid, rejected),
            )
        if header.api_key == FETCH:
            req = FetchRequest.decode(frame, version=header.api_version, header=True)
            with self._lock:
                self.fetch_partitions.append(sum(len(t.partitions) for t in req.topics))
            return _Step(header, frame, cut_after=self.kafka.cut_now("fetch"))
        if header.api_key == DELETE_RECORDS:
            return _Step(header, frame, cut_after=self.kafka.cut_now("delete_records"))
        if header.api_key == LIST_OFFSETS:
            asked = self.kafka.list_offsets_context(frame, header.api_version)
            return _Step(header, frame, context=asked)
        return _Step(header, frame)

    def _take_group_fault(self) -> int:
        with self._lock:
            if self._group_fault is None:
                return 0
            code, left = self._group_fault
            self._group_fault = (code, left - 1) if left > 1 else None
            return code

    def _track_appends(self, check: ProduceCheck, link: _Link | None) -> None:
        """Record the request's partitions as being appended; flag one already being appended.
        Caller holds the lock."""
        cid = check.header.correlation_id
        # Several batches of one partition in one request are their own violation (batch-count).
        for key in dict.fromkeys((b.topic, b.partition) for b in check.batches):
            if key[0] in PARTSYNC_RECORDS:
                continue  # not a mirror: no offset to keep (the module's docstring)
            earlier = self._appending.get(key)
            if earlier is not None:
                self.violations.append(
                    Violation(
                        "pipelined",
                        f"sent while the append of correlation id {earlier[1]} for this partition "
                        "is unanswered; if that one is rejected, this batch can land at its offset",
                        key[0],
                        key[1],
                        cid,
                    )
                )
            self._appending[key] = (link, cid)  # type: ignore[assignment]

    def _answered(self, link: _Link | None, cid: int) -> None:
        with self._lock:
            for key, (lk, c) in list(self._appending.items()):
                if lk is link and c == cid:
                    del self._appending[key]

    def _on_response(
        self,
        api_key: int,
        version: int,
        frame: bytes,
        link: _Link | None = None,
        context: Any = None,
    ) -> tuple[bytes, float]:
        """The answer to pass on, and how long to hold it."""
        if api_key == PRODUCE:
            if context is None:
                return frame, 0.0
            # Partitions the proxy rejected: their errors join the broker's answer, held.
            (cid,) = struct.unpack_from(">i", frame, 0)
            return produce_answer(frame, version, cid, context.rejected), context.hold_s
        if api_key == FETCH:
            return self.kafka.rewrite_fetch(frame, version), 0.0
        if api_key == LIST_OFFSETS and context is not None:
            return self.kafka.rewrite_list_offsets(frame, version, context), 0.0
        if api_key == METADATA:
            new, problem = rewrite_metadata_response(frame, version, self.host, self.port)
            with self._lock:
                if problem:
                    self.errors.append(problem)
                else:
                    self.metadata_rewritten += 1
            return new, 0.0
        if api_key in (FIND_COORDINATOR, DESCRIBE_CLUSTER):
            rewrite = (
                rewrite_find_coordinator_response
                if api_key == FIND_COORDINATOR
                else rewrite_describe_cluster_response
            )
            new, problem = rewrite(frame, version, self.host, self.port)
            if problem:
                self._error(problem)
            return new, 0.0
        if api_key in _UNREWRITTEN_ADDRESSES:
            self._error(
                f"{_UNREWRITTEN_ADDRESSES[api_key]} response advertises broker addresses this "
                "proxy does not rewrite; a client could bypass the checker"
            )
        return frame, 0.0

    def _error(self, text: str) -> None:
        with self._lock:
            self.errors.append(text)

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)
            # Answers that will never come: the client learns the outcome from the log.
            for key, (lk, _c) in list(self._appending.items()):
                if lk is link:
                    del self._appending[key]

    # -- accepting and shutting down ------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as e:
                if not self._stop.is_set():
                    self._error(f"accept failed: {e!r}")
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                # The broker is down (a fault test killed it): the client sees a refused
                # connection, as it would without the proxy.
                client.close()
                with self._lock:
                    self.refused_connections += 1
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._stop.is_set():
                    client.close()
                    upstream.close()
                    return
                self._count += 1
                link = _Link(self, client, upstream, self._count)
                self._links.add(link)
            link.start()

    def close(self) -> None:
        """Stop accepting, cut every connection, wait for the pump threads, close every socket."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._acceptor.join(5)
        self._listener.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.shutdown()
        for link in links:
            link.join(5)
        for link in links:
            link.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"StrictProxy({self.bootstrap} -> {self.upstream[0]}:{self.upstream[1]}, "
            f"{sum(self.requests.values())} requests, {len(self.violations)} violations)"
        )


@pytest.fixture
def strict_proxy() -> Iterator[Callable[..., StrictProxy]]:
    """Factory fixture: ``strict_proxy(broker_bootstrap, **kw) -> StrictProxy``; every proxy it
    started is closed at teardown."""
    proxies: list[StrictProxy] = []

    def start(upstream: str, **kw: Any) -> StrictProxy:
        proxy = StrictProxy(upstream, **kw)
        proxies.append(proxy)
        return proxy

    yield start
    for p in proxies:
        p.close()
