"""The one module that imports kafka-python internals (pinned to the 3.0.x line).

kafka-python 3.0 moved its protocol and network modules (``kafka.protocol.*`` is now generated
from Kafka's JSON schemas; the old ``kafka.conn``/``kafka.client_async`` are gone), so every
import of them lives here. partsync uses kafka-python for request/response encoding, error codes
and SASL mechanisms, and runs its own small blocking connection so requests can be pipelined
(several in flight, responses in order) without kafka-python's event loop.

Everything this module returns is plain Python (dataclasses, dicts, bytes), never a kafka-python
object, so the rest of partsync does not depend on its internals.
"""

from __future__ import annotations

import collections
import socket
import ssl
import struct
import threading
from dataclasses import dataclass
from typing import Any

import kafka.errors as _kerrors
from kafka.net.sasl import get_sasl_mechanism
from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer, EncodeBufferPool

from partsync.config import Security
from partsync.errors import BrokerError, ClusterError

__all__ = [
    "COORDINATOR_RETRY_CODES",
    "EARLIEST",
    "GROUP_KEY",
    "LATEST",
    "TXN_KEY",
    "PROBE_WAIT_MS",
    "BrokerInfo",
    "Connection",
    "FetchedPartition",
    "JoinResult",
    "Metadata",
    "PartitionMeta",
    "ProducedPartition",
    "TopicMeta",
    "broker_error",
    "error_name",
    "error_retriable",
    "fetch_error",
    "raise_for_code",
]

EARLIEST = -2
LATEST = -1
GROUP_KEY = 0
TXN_KEY = 1
# Answers that mean "ask again (maybe elsewhere) shortly": COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
COORDINATOR_RETRY_CODES = frozenset({14, 15, 16})
# Wait for probes of data that is known to exist. Kafka answers at once when data is there;
# Tansu answers max_wait_ms=0 (like min_bytes=0) with no partitions at all, so never use 0.
PROBE_WAIT_MS = 100

# (request, response, lowest, highest) version partsync speaks, clamped to what each broker
# offers. The ranges are ones Apache Kafka 2.5 through 4.x accept (4.0 removed the oldest,
# KIP-896); InitProducerId starts at 3 in practice because Tansu rejects v0-2.
_PREFERRED = {
    "Metadata": (MetadataRequest, MetadataResponse, 4, 7),
    "Fetch": (FetchRequest, FetchResponse, 4, 11),
    "Produce": (ProduceRequest, ProduceResponse, 3, 8),
    "ListOffsets": (ListOffsetsRequest, ListOffsetsResponse, 1, 5),
    "InitProducerId": (InitProducerIdRequest, InitProducerIdResponse, 0, 4),
    "CreateTopics": (CreateTopicsRequest, CreateTopicsResponse, 2, 4),
    "DescribeConfigs": (DescribeConfigsRequest, DescribeConfigsResponse, 1, 2),
    # Group membership on the LOCAL cluster only (partsync never joins a source's groups).
    # JoinGroup >= 4 answers a new member MEMBER_ID_REQUIRED first; both paths are handled.
    "FindCoordinator": (FindCoordinatorRequest, FindCoordinatorResponse, 1, 6),
    "JoinGroup": (JoinGroupRequest, JoinGroupResponse, 2, 9),
    "SyncGroup": (SyncGroupRequest, SyncGroupResponse, 1, 5),
    "Heartbeat": (HeartbeatRequest, HeartbeatResponse, 1, 4),
    "LeaveGroup": (LeaveGroupRequest, LeaveGroupResponse, 1, 5),
    "SaslHandshake": (SaslHandshakeRequest, SaslHandshakeResponse, 1, 1),
    "SaslAuthenticate": (SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 1),
}

_SIZE = struct.Struct(">i")


def _encode_framed_into(request: Any, out: EncodeBuffer) -> None:
    """``request.encode(header=True, framed=True)`` written into ``out``, without the copy
    ``encode`` makes of the finished buffer (which, for a Produce request, copies every batch)."""
    version = request.API_VERSION
    flexible = request.flexible_version_q(version)
    start = out.pos
    out.ensure(4)
    out.pos += 4  # frame size, filled in below
    request.encode_header_into(out, flexible=flexible)
    request._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)(request, out)
    _SIZE.pack_into(out.buf, start, out.pos - start - 4)


def _ssl_context(sec: Security) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=sec.ssl_cafile)
    if not sec.ssl_check_hostname:
        ctx.check_hostname = False
    if sec.ssl_certfile:
        ctx.load_cert_chain(sec.ssl_certfile, sec.ssl_keyfile, sec.ssl_password)
    return ctx


def error_name(code: int) -> str:
    return str(_kerrors.for_code(code).__name__)


def error_retriable(code: int) -> bool:
    return bool(getattr(_kerrors.for_code(code), "retriable", False))


def broker_error(
    code: int,
    what: str,
    *,
    cluster: str | None = None,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> BrokerError:
    """The BrokerError for a Kafka error code, named and flagged retriable by kafka-python."""
    return BrokerError(
        what,
        error_code=code,
        error_name=error_name(code),
        retriable=error_retriable(code),
        cluster=cluster,
        topic=topic,
        partition=partition,
        offset=offset,
    )


def fetch_error(cluster: str, topic: str, partition: int, offset: int, code: int) -> BrokerError:
    return broker_error(code, "fetch failed", cluster=cluster, topic=topic, partition=partition,
                        offset=offset)


def raise_for_code(
    code: int,
    what: str,
    *,
    cluster: str | None = None,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> None:
    if code:
        raise broker_error(code, what, cluster=cluster, topic=topic, partition=partition, offset=offset)


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class PartitionMeta:
    partition: int
    leader: int
    error_code: int


@dataclass(frozen=True)
class TopicMeta:
    name: str
    error_code: int
    partitions: dict[int, PartitionMeta]


@dataclass(frozen=True)
class Metadata:
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicMeta]


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes


@dataclass(frozen=True)
class JoinResult:
    error_code: int
    generation: int
    member_id: str
    leader: str
    protocol: str | None
    # (member id, metadata) of every member; only the leader gets them.
    members: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ProducedPartition:
    partition: int
    error_code: int
    base_offset: int
    log_start_offset: int
    error_message: str | None


class Connection:
    """A blocking connection to one broker with pipelining.

    ``send()`` writes a request and returns at once; ``receive()`` returns the responses in the
    order the requests were sent (Kafka answers in order on one connection). Sending and
    receiving may happen on two threads. ``call()`` is send + receive for one-off requests.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        cluster: str,
        client_id: str = "partsync",
        security: Security | None = None,
        timeout: float = 30.0,
        socket_buffer_bytes: int = 4 << 20,
    ) -> None:
        self.host = host
        self.port = port
        self.cluster = cluster
        self.client_id = client_id
        self.timeout = timeout
        self._security = security or Security()
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        self._call_lock = threading.Lock()
        self._pending: collections.deque[tuple[int, Any, int, str]] = collections.deque()
        self._correlation = 0
        self._versions: dict[str, int] = {}
        # Set once the socket is closed (by us or after an I/O error): the connection is out of
        # step with its pending requests and must be replaced, never reused.
        self.closed = False
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise ClusterError(
                f"cannot connect to broker {host}:{port}: {e.strerror or e}", cluster=cluster
            ) from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Big buffers matter on long fat links: the window caps one connection's throughput.
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, socket_buffer_bytes)
            except OSError:
                pass
        if self._security.uses_ssl:
            try:
                sock = _ssl_context(self._security).wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, OSError) as e:
                sock.close()
                raise ClusterError(f"TLS handshake with {host}:{port} failed: {e}", cluster=cluster) from e
        self._sock = sock
        self._rfile = sock.makefile("rb", buffering=1 << 20)
        try:
            self._negotiate_versions()
            if self._security.uses_sasl:
                self._authenticate()
        except BaseException:
            self.close()
            raise

    # -- framing ----------------------------------------------------------------------------

    def version(self, api: str) -> int:
        return self._versions[api]

    def send(self, api: str, request: Any) -> None:
        req_cls, resp_cls, _lo, _hi = _PREFERRED.get(api, (None, None, 0, 0))
        version = self._versions.get(api, 0)
        with self._send_lock:
            self._correlation += 1
            cid = self._correlation
            request.API_VERSION = version
            request.with_header(correlation_id=cid, client_id=self.client_id)
            # Encoded into this thread's reusable buffer and sent from it: a Produce request's
            # batches are copied once (into the buffer), not three times.
            with EncodeBufferPool.acquire() as out:
                _encode_framed_into(request, out)
                self._pending.append((cid, resp_cls, version, api))
                try:
                    with memoryview(out.buf)[: out.pos] as data:
                        self._sock.sendall(data)
                except OSError as e:
                    raise self._io_error(f"sending {api}", e) from e

    def receive(self) -> Any:
        with self._recv_lock:
            cid, resp_cls, version, api = self._pending.popleft()
            try:
                head = self._read_exact(4)
                (size,) = _SIZE.unpack(head)
                body = self._read_exact(size)
            except OSError as e:
                raise self._io_error(f"reading {api} response", e) from e
            (got,) = _SIZE.unpack_from(body, 0)
            if got != cid:
                self.close()
                raise ClusterError(
                    f"broker {self.host}:{self.port} answered correlation id {got}, expected {cid}",
                    cluster=self.cluster,
                )
            if api == "ApiVersions" or resp_cls.flexible_version_q(version):
                return resp_cls.decode(body, version=version, header=True)
            # A non-flexible response header is just the correlation id, checked above. Decoding
            # it with header=True would copy the whole body (a Fetch response's batches) first.
            return resp_cls.decode(memoryview(body)[4:], version=version, header=False)

    def call(self, api: str, request: Any) -> Any:
        # One-off calls hold both halves so two threads' calls cannot swap responses; a
        # connection used for pipelining (send/receive on separate threads) makes no calls.
        with self._call_lock:
            self.send(api, request)
            return self.receive()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _read_exact(self, n: int) -> bytes:
        data = self._rfile.read(n)
        if data is None or len(data) != n:
            raise ConnectionResetError("connection closed by broker")
        return data

    def _io_error(self, what: str, e: OSError) -> ClusterError:
        self.close()
        return ClusterError(
            f"{what} with broker {self.host}:{self.port} failed: {e}", cluster=self.cluster
        )

    def close(self) -> None:
        self.closed = True
        for closer in (self._rfile.close, self._sock.close):
            try:
                closer()
            except (OSError, AttributeError):
                pass

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- session setup ----------------------------------------------------------------------

    def _negotiate_versions(self) -> None:
        self._versions["ApiVersions"] = 0
        req = ApiVersionsRequest()
        self._pending.append((0, ApiVersionsResponse, 0, "ApiVersions"))
        req.API_VERSION = 0
        req.with_header(correlation_id=0, client_id=self.client_id)
        self._sock.sendall(req.encode(header=True, framed=True))
        resp = self.receive()
        raise_for_code(resp.error_code, "ApiVersions", cluster=self.cluster)
        offered = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        for api, (req_cls, _resp, lo, hi) in _PREFERRED.items():
            rng = offered.get(req_cls.API_KEY)
            if rng is None:
                continue
            v = min(hi, rng[1])
            if v >= max(lo, rng[0]):
                self._versions[api] = v
        for needed in ("Metadata", "Fetch", "Produce", "ListOffsets"):
            if needed not in self._versions:
                raise ClusterError(
                    f"broker {self.host}:{self.port} does not support a {needed} version partsync "
                    "needs (record batch v2, Kafka >= 0.11)",
                    cluster=self.cluster,
                )

    def _authenticate(self) -> None:
        sec = self._security
        resp = self.call("SaslHandshake", SaslHandshakeRequest(mechanism=sec.sasl_mechanism))
        raise_for_code(resp.error_code, f"SASL handshake ({sec.sasl_mechanism})", cluster=self.cluster)
        mech = get_sasl_mechanism(sec.sasl_mechanism)(
            host=self.host,
            security_protocol=sec.security_protocol,
            sasl_mechanism=sec.sasl_mechanism,
            sasl_plain_username=sec.sasl_plain_username,
            sasl_plain_password=sec.sasl_plain_password,
        )
        while not mech.is_done():
            auth = self.call("SaslAuthenticate", SaslAuthenticateRequest(auth_bytes=mech.auth_bytes()))
            if auth.error_code:
                # The broker's message may say why; it never contains our password.
                raise ClusterError(
                    f"SASL authentication as {sec.sasl_plain_username!r} failed: "
                    f"{error_name(auth.error_code)} {auth.error_message or ''}".strip(),
                    cluster=self.cluster,
                )
            mech.receive(auth.auth_bytes)
        if not mech.is_authenticated():
            raise ClusterError(
                f"SASL authentication as {sec.sasl_plain_username!r} failed", cluster=self.cluster
            )

    # -- requests ---------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None) -> Metadata:
        topic_reqs = None if topics is None else [
            MetadataRequest.MetadataRequestTopic(name=t) for t in topics
        ]
        resp = self.call(
            "Metadata",
            MetadataRequest(topics=topic_reqs, allow_auto_topic_creation=False),
        )
        brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port) for b in resp.brokers}
        out: dict[str, TopicMeta] = {}
        for t in resp.topics:
            parts = {
                p.partition_index: PartitionMeta(p.partition_index, p.leader_id, p.error_code)
                for p in t.partitions
            }
            out[t.name] = TopicMeta(t.name, t.error_code, parts)
        return Metadata(brokers, out)

    def list_offsets(self, topic: str, partitions: list[int], timestamp: int) -> dict[int, tuple[int, int]]:
        """Returns {partition: (error_code, offset)} for EARLIEST/LATEST."""
        req = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=p, timestamp=timestamp
                        )
                        for p in partitions
                    ],
                )
            ],
        )
        resp = self.call("ListOffsets", req)
        out: dict[int, tuple[int, int]] = {}
        for t in resp.topics:
            for p in t.partitions:
                out[p.partition_index] = (p.error_code, p.offset)
        return out

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
        ``receive_fetch``. min_bytes >= 1: Tansu answers min_bytes=0 with no partitions."""
        P = FetchRequest.FetchTopic.FetchPartition
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                FetchRequest.FetchTopic(
                    topic=topic,
                    partitions=[
                        P(partition=p, fetch_offset=o, partition_max_bytes=m, log_start_offset=-1)
                        for p, o, m in wanted
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        self.send("Fetch", req)

    def receive_fetch(self) -> dict[int, FetchedPartition]:
        resp = self.receive()
        if getattr(resp, "error_code", 0):
            raise_for_code(resp.error_code, "Fetch", cluster=self.cluster)
        out: dict[int, FetchedPartition] = {}
        for t in resp.responses:
            for p in t.partitions:
                out[p.partition_index] = FetchedPartition(
                    p.partition_index,
                    p.error_code,
                    p.high_watermark,
                    p.log_start_offset,
                    p.records or b"",
                )
        return out

    def fetch(self, topic: str, wanted: list[tuple[int, int, int]], **kw: Any) -> dict[int, FetchedPartition]:
        # Held like call(): on a shared connection, two threads' fetches must not swap answers.
        with self._call_lock:
            self.send_fetch(topic, wanted, **kw)
            return self.receive_fetch()

    def send_produce(
        self,
        topic: str,
        batches: dict[int, bytes | bytearray],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> None:
        """Send one Produce request with at most one batch per partition (Kafka's rule)."""
        self.send_produce_many(
            {topic: batches}, acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id
        )

    def send_produce_many(
        self,
        batches: dict[str, dict[int, bytes | bytearray]],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> None:
        """One Produce request for many topics and partitions, one batch per partition."""
        D = ProduceRequest.TopicProduceData
        req = ProduceRequest(
            transactional_id=transactional_id,
            acks=acks,
            timeout_ms=timeout_ms,
            topic_data=[
                D(
                    name=topic,
                    partition_data=[
                        D.PartitionProduceData(index=p, records=b) for p, b in parts.items()
                    ],
                )
                for topic, parts in batches.items()
            ],
        )
        self.send("Produce", req)

    def receive_produce_many(self) -> dict[tuple[str, int], ProducedPartition]:
        resp = self.receive()
        out: dict[tuple[str, int], ProducedPartition] = {}
        for t in resp.responses:
            for p in t.partition_responses:
                out[(t.name, p.index)] = ProducedPartition(
                    p.index,
                    p.error_code,
                    p.base_offset,
                    getattr(p, "log_start_offset", -1),
                    getattr(p, "error_message", None),
                )
        return out

    def receive_produce(self) -> dict[int, ProducedPartition]:
        """The answer to a ``send_produce`` (one topic), by partition."""
        return {p: res for (_t, p), res in self.receive_produce_many().items()}

    def init_producer_id(self, transactional_id: str | None = None, timeout_ms: int = 60_000) -> tuple[int, int]:
        code, pid, epoch = self.try_init_producer_id(transactional_id, timeout_ms)
        raise_for_code(code, "InitProducerId", cluster=self.cluster)
        return pid, epoch

    def try_init_producer_id(
        self, transactional_id: str | None = None, timeout_ms: int = 60_000
    ) -> tuple[int, int, int]:
        """(error code, producer id, epoch), for callers that retry coordinator errors."""
        resp = self.call(
            "InitProducerId",
            InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=timeout_ms),
        )
        return int(resp.error_code), int(resp.producer_id), int(resp.producer_epoch)

    def create_topic(
        self, topic: str, partitions: int, replication: int, configs: dict[str, str], timeout_ms: int = 30_000
    ) -> None:
        T = CreateTopicsRequest.CreatableTopic
        req = CreateTopicsRequest(
            topics=[
                T(
                    name=topic,
                    num_partitions=partitions,
                    replication_factor=replication,
                    assignments=[],
                    configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
                )
            ],
            timeout_ms=timeout_ms,
            validate_only=False,
        )
        resp = self.call("CreateTopics", req)
        for t in resp.topics:
            if t.error_code:
                msg = getattr(t, "error_message", None)
                raise_for_code(
                    t.error_code, f"creating topic ({msg})" if msg else "creating topic",
                    cluster=self.cluster, topic=topic,
                )

    def describe_topic_configs(self, topic: str) -> dict[str, str | None]:
        R = DescribeConfigsRequest.DescribeConfigsResource
        req = DescribeConfigsRequest(
            resources=[R(resource_type=2, resource_name=topic, configuration_keys=None)],
            include_synonyms=False,
        )
        resp = self.call("DescribeConfigs", req)
        out: dict[str, str | None] = {}
        for r in resp.results:
            raise_for_code(r.error_code, "DescribeConfigs", cluster=self.cluster, topic=topic)
            for c in r.configs:
                out[c.name] = c.value
        return out

    # -- group membership (local cluster) ---------------------------------------------------

    def find_coordinator(self, key: str, key_type: int = GROUP_KEY) -> tuple[int, BrokerInfo | None]:
        """(error code, coordinator) for a group (``GROUP_KEY``) or transactional id (``TXN_KEY``)."""
        if self.version("FindCoordinator") >= 4:
            resp = self.call(
                "FindCoordinator", FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
            )
            c = resp.coordinators[0]
            code, node, host, port = c.error_code, c.node_id, c.host, c.port
        else:
            resp = self.call("FindCoordinator", FindCoordinatorRequest(key=key, key_type=key_type))
            code, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
        return code, (BrokerInfo(node, host, port) if not code else None)

    def join_group(
        self,
        group: str,
        member_id: str,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinResult:
        P = JoinGroupRequest.JoinGroupRequestProtocol
        resp = self.call("JoinGroup", JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            member_id=member_id,
            group_instance_id=None,
            protocol_type=protocol_type,
            protocols=[P(name=n, metadata=m) for n, m in protocols],
            reason=None,
        ))
        return JoinResult(
            resp.error_code, resp.generation_id, resp.member_id, resp.leader,
            resp.protocol_name or None,
            tuple((m.member_id, bytes(m.metadata)) for m in resp.members),
        )

    def sync_group(
        self,
        group: str,
        generation: int,
        member_id: str,
        protocol_type: str,
        protocol: str,
        assignments: dict[str, bytes],
    ) -> tuple[int, bytes]:
        A = SyncGroupRequest.SyncGroupRequestAssignment
        resp = self.call("SyncGroup", SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=None,
            protocol_type=protocol_type,
            protocol_name=protocol,
            assignments=[A(member_id=m, assignment=a) for m, a in assignments.items()],
        ))
        return resp.error_code, bytes(resp.assignment or b"")

    def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        resp = self.call("Heartbeat", HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
        ))
        return int(resp.error_code)

    def leave_group(self, group: str, member_id: str) -> int:
        if self.version("LeaveGroup") >= 3:
            M = LeaveGroupRequest.MemberIdentity
            req = LeaveGroupRequest(
                group_id=group, members=[M(member_id=member_id, group_instance_id=None, reason=None)]
            )
        else:
            req = LeaveGroupRequest(group_id=group, member_id=member_id)
        return int(self.call("LeaveGroup", req).error_code)
