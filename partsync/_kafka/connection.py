"""A blocking, pipelined connection to one broker: framing, API version negotiation, TLS, SASL.

kafka-python 3.0 moved its protocol and network modules (``kafka.protocol.*`` is now generated
from Kafka's JSON schemas; the old ``kafka.conn``/``kafka.client_async`` are gone), so every
import of them lives in this package (``partsync._kafka``). partsync uses kafka-python for
request/response encoding, error codes and SASL mechanisms, and runs its own small blocking
connection so requests can be pipelined (several in flight, responses in order) without
kafka-python's event loop. The typed requests are in ``requests.py`` and ``group_requests.py``.
"""

import collections
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Self

from kafka.protocol.admin.acl import DescribeAclsRequest, DescribeAclsResponse
from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
)
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer, EncodeBufferPool

from partsync._kafka.codes import error_name, raise_for_code
from partsync._kafka.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from partsync._kafka.raw import Buffer
from partsync.config import DEFAULT_SOCKET_BUFFER_BYTES, Security
from partsync.errors import ClusterError

__all__ = [
    "CONSUMER_REPLICA",
    "DEBUG_REPLICA",
    "EARLIEST",
    "GROUP_KEY",
    "LATEST",
    "PROBE_WAIT_MS",
    "TXN_KEY",
    "BrokerConnection",
]

EARLIEST = -2
LATEST = -1
# ListOffsets replica ids: a consumer sees the high watermark, the debug replica the log end.
CONSUMER_REPLICA = -1
DEBUG_REPLICA = -2
GROUP_KEY = 0
TXN_KEY = 1
# Wait for probes of data that is known to exist. Kafka answers at once when data is there;
# Tansu answers max_wait_ms=0 (like min_bytes=0) with no partitions at all, so never use 0.
PROBE_WAIT_MS = 100

# (request, response, lowest, highest) version partsync speaks, clamped to what each broker
# offers. The ranges are ones Apache Kafka 2.5 through 4.x accept (4.0 removed the oldest,
# KIP-896); InitProducerId starts at 3 in practice because Tansu rejects v0-2.
_PREFERRED = {
    # v10+ names each topic's id, which tells a topic deleted and created again from the old one.
    "Metadata": (MetadataRequest, MetadataResponse, 4, 12),
    "Fetch": (FetchRequest, FetchResponse, 4, 11),
    "Produce": (ProduceRequest, ProduceResponse, 3, 8),
    "ListOffsets": (ListOffsetsRequest, ListOffsetsResponse, 1, 5),
    "InitProducerId": (InitProducerIdRequest, InitProducerIdResponse, 0, 4),
    # Replaying a source's transactions (``--transactions replay``). Below AddPartitionsToTxn v4
    # and EndTxn v5 (and Produce v12) a Kafka 4 coordinator runs transactions as Kafka 3 does
    # (transaction version 1): partitions are added explicitly, the epoch stays across commits.
    "AddPartitionsToTxn": (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
    "EndTxn": (EndTxnRequest, EndTxnResponse, 0, 4),
    # A replay's transactions a run left open, resumed rather than aborted (KIP-664). Only
    # asked of a broker that offers all three of KIP-664's APIs (``Cluster
    # .can_resume_transactions``): ListTransactions is never sent, its offer is the sign.
    "DescribeProducers": (DescribeProducersRequest, DescribeProducersResponse, 0, 0),
    "DescribeTransactions": (DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0),
    "ListTransactions": (ListTransactionsRequest, ListTransactionsResponse, 0, 0),
    "CreateTopics": (CreateTopicsRequest, CreateTopicsResponse, 2, 4),
    "DescribeConfigs": (DescribeConfigsRequest, DescribeConfigsResponse, 1, 2),
    # Growing a local topic when its sources gained partitions.
    "CreatePartitions": (CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
    # Moving the local log start when a mirror starts at its source's log start (Tansu has none).
    "DeleteRecords": (DeleteRecordsRequest, DeleteRecordsResponse, 0, 2),
    # Group membership on the LOCAL cluster only (partsync never joins a source's groups).
    # JoinGroup >= 4 answers a new member MEMBER_ID_REQUIRED first; both paths are handled.
    "FindCoordinator": (FindCoordinatorRequest, FindCoordinatorResponse, 1, 6),
    "JoinGroup": (JoinGroupRequest, JoinGroupResponse, 2, 9),
    "SyncGroup": (SyncGroupRequest, SyncGroupResponse, 1, 5),
    "Heartbeat": (HeartbeatRequest, HeartbeatResponse, 1, 4),
    "LeaveGroup": (LeaveGroupRequest, LeaveGroupResponse, 1, 5),
    # KIP-848: no first-join delay, and a partition moves only after its owner released it.
    "ConsumerGroupHeartbeat": (ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0, 0),
    "ConsumerGroupDescribe": (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 0, 0),
    # Copying a consumer group's committed offsets (``partsync offsets``).
    "OffsetFetch": (OffsetFetchRequest, OffsetFetchResponse, 1, 7),
    "OffsetCommit": (OffsetCommitRequest, OffsetCommitResponse, 2, 8),
    "DescribeGroups": (DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
    # Whether a group exists at all (``partsync offsets``: a mistyped group is an error).
    "ListGroups": (ListGroupsRequest, ListGroupsResponse, 0, 4),
    # ``partsync check`` only: what this client may do (KIP-430), and the ACLs where permitted.
    "DescribeCluster": (DescribeClusterRequest, DescribeClusterResponse, 0, 1),
    "DescribeAcls": (DescribeAclsRequest, DescribeAclsResponse, 1, 3),
    "SaslHandshake": (SaslHandshakeRequest, SaslHandshakeResponse, 1, 1),
    "SaslAuthenticate": (SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 1),
}

_SIZE = struct.Struct(">i")

log = logging.getLogger(__name__)


class _NotInTheClear(logging.Filter):
    """kafka-python warns "in the clear" at every SASL connection without TLS (SCRAM too,
    whose password never crosses the wire): hundreds of lines in a run. partsync warns once
    per cluster instead, and only where a secret does cross (PLAIN, OAUTHBEARER)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "in the clear" not in record.getMessage()


for _name in ("kafka.net.sasl.plain", "kafka.net.sasl.scram"):
    logging.getLogger(_name).addFilter(_NotInTheClear())
_warned_in_clear: set[str] = set()
_warned_lock = threading.Lock()


def sasl_identity(sec: Security) -> str:
    """Who a SASL login claims to be, for messages: the user name, or the token's kind."""
    if sec.sasl_mechanism == "OAUTHBEARER":
        return "an OAUTHBEARER token"
    return repr(sec.sasl_plain_username)


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


# At most this many buffers per sendmsg (Linux's IOV_MAX is 1024).
_IOV_MAX = 1024


def _sendmsg_all(sock: socket.socket, parts: list[Buffer]) -> None:
    """``sendall`` for a list of buffers, with scatter/gather writes (partial writes resumed)."""
    views = [v for v in (memoryview(p).cast("B") for p in parts) if len(v)]  # bytes, not items
    i = 0
    while i < len(views):
        sent = sock.sendmsg(views[i : i + _IOV_MAX])
        while sent:
            first = views[i]
            if sent >= len(first):
                sent -= len(first)
                i += 1
            else:
                views[i] = first[sent:]
                sent = 0


# One TLS context per cluster's settings and their files' versions: building one loads the CA
# store (~19 ms here, the system's), once per connection before. A file replaced or rewritten on
# disk (a rotated certificate: a new inode or change time, even where the copy kept its mtime)
# has a new signature, so the next connection builds a context from it. The system's CA store
# (no ssl_cafile) is read once per process.
_Signature = tuple[int, int, int, int]
_SSL_CONTEXTS: dict[tuple[Security, tuple[_Signature | None, ...]], ssl.SSLContext] = {}
_SSL_CONTEXTS_LOCK = threading.Lock()


def _file_signature(path: str | None) -> _Signature | None:
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None  # building the context reports it
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _ssl_context(sec: Security) -> ssl.SSLContext:
    files = (sec.ssl_cafile, sec.ssl_certfile, sec.ssl_keyfile)
    key = (sec, tuple(_file_signature(f) for f in files))
    with _SSL_CONTEXTS_LOCK:
        ctx = _SSL_CONTEXTS.get(key)
        if ctx is None:
            ctx = _new_ssl_context(sec)
            for old in [k for k in _SSL_CONTEXTS if k[0] == sec]:
                del _SSL_CONTEXTS[old]  # the files changed: the old context goes
            _SSL_CONTEXTS[key] = ctx
    return ctx


def _new_ssl_context(sec: Security) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=sec.ssl_cafile)
    if not sec.ssl_check_hostname:
        ctx.check_hostname = False
    if sec.ssl_certfile:
        ctx.load_cert_chain(sec.ssl_certfile, sec.ssl_keyfile, sec.ssl_password)
    return ctx


class _Answer:
    """Where a ``call`` finds its response, read by whichever caller was reading."""

    __slots__ = ("done", "error", "response")

    def __init__(self) -> None:
        self.done = False
        self.response: Any = None
        self.error: ClusterError | None = None


class _Pending(NamedTuple):
    correlation_id: int
    response_cls: Any
    version: int
    api: str
    answer: _Answer | None  # None: read by ``receive()``


class BrokerConnection:
    """A blocking connection to one broker with pipelining.

    ``send()`` writes a request and returns at once; ``receive()`` returns the responses in the
    order the requests were sent (Kafka answers in order on one connection). Sending and
    receiving may happen on two threads. ``call()`` is send + receive for one-off requests; many
    threads' calls are in flight at once on a shared connection (whichever caller is reading
    hands each response to its caller). A connection is used either with ``call()`` or with
    ``send()``/``receive()``, never both at once.
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
        socket_buffer_bytes: int = DEFAULT_SOCKET_BUFFER_BYTES,
        connect_timeout: float | None = None,
        rack: str = "",
    ) -> None:
        """``timeout``: seconds each read or write may take; ``connect_timeout``: for the TCP
        connection and the TLS handshake (default ``timeout``)."""
        self.host = host
        self.port = port
        self.cluster = cluster
        self.client_id = client_id
        # Sent with fetches (KIP-392): a leader with a rack-aware replica selector may point
        # this client at a replica in its rack.
        self.rack = rack
        self.timeout = timeout
        self._security = security or Security()
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        # call(): who reads the next response; waiting callers are woken after each one.
        self._handoff = threading.Condition()
        self._reading = False
        self.last_throttle_ms = 0  # from the last Fetch answer (requests.Connection)
        self._pending: collections.deque[_Pending] = collections.deque()
        self._correlation = 0
        self._versions: dict[str, int] = {}
        # When a SASL session the broker limited (an OAUTHBEARER token's expiry, or
        # connections.max.reauth.ms) should be given up for a new connection; None: never.
        self._retire_at: float | None = None
        # ApiVersions' answer: (min, max) version by API key.
        self.offered: dict[int, tuple[int, int]] = {}
        # Set once the socket is closed (by us or after an I/O error): the connection is out of
        # step with its pending requests and must be replaced, never reused.
        self.closed = False
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout or timeout)
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
                raise ClusterError(
                    f"TLS handshake with {host}:{port} failed: {e}", cluster=cluster
                ) from e
        sock.settimeout(timeout)
        self._sock = sock
        self._rfile = sock.makefile("rb", buffering=1 << 20)
        try:
            started = time.monotonic()
            self._negotiate_versions()
            # One small request's round trip: how far away the broker is (a LAN, or a long link).
            self.setup_rtt = time.monotonic() - started
            if self._security.uses_sasl:
                self._authenticate()
        except BaseException:
            self.close()
            raise

    # -- framing ----------------------------------------------------------------------------

    def version(self, api: str) -> int:
        return self._versions[api]

    def supports(self, api: str) -> bool:
        """Whether the broker offers a version of ``api`` partsync speaks."""
        return api in self._versions

    def send(self, api: str, request: Any, _answer: _Answer | None = None) -> None:
        _req_cls, resp_cls, _lo, _hi = _PREFERRED.get(api, (None, None, 0, 0))
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
                self._pending.append(_Pending(cid, resp_cls, version, api, _answer))
                try:
                    with memoryview(out.buf)[: out.pos] as data:
                        self._sock.sendall(data)
                except OSError as e:
                    raise self._io_error(f"sending {api}", e) from e

    def send_parts(self, api: str, build: Callable[[int, int], list[Buffer]]) -> None:
        """Send a request encoded by ``build(version, correlation_id)`` as a list of buffers,
        with one scatter/gather write (``raw``'s encoders: batches are not copied); read the
        answer with ``receive``."""
        _req_cls, resp_cls, _lo, _hi = _PREFERRED[api]
        version = self._versions[api]
        with self._send_lock:
            self._correlation += 1
            cid = self._correlation
            parts = build(version, cid)
            self._pending.append(_Pending(cid, resp_cls, version, api, None))
            try:
                if isinstance(self._sock, ssl.SSLSocket):  # TLS has no sendmsg
                    self._sock.sendall(b"".join(parts))
                else:
                    _sendmsg_all(self._sock, parts)
            except OSError as e:
                raise self._io_error(f"sending {api}", e) from e

    def receive(self) -> Any:
        with self._recv_lock:
            return self._read_response(self._next_pending())

    def receive_body(self) -> tuple[bytes, int]:
        """The next response's raw body and the offset after its (non-flexible) header, for
        ``raw``'s decoders; the version is the request's (``version(api)``)."""
        with self._recv_lock:
            pending = self._next_pending()
            if pending.response_cls.flexible_version_q(pending.version):
                raise RuntimeError(f"{pending.api} v{pending.version} has a flexible header")
            return self._read_body(pending), 4

    def _next_pending(self) -> _Pending:
        pending = self._pending.popleft()
        if pending.answer is not None:
            raise RuntimeError("receive() on a connection used for call()")
        return pending

    def _read_body(self, pending: _Pending) -> bytes:
        cid, _resp_cls, _version, api, _answer = pending
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
        return body

    def _read_response(self, pending: _Pending) -> Any:
        _cid, resp_cls, version, api, _answer = pending
        body = self._read_body(pending)
        if api == "ApiVersions" or resp_cls.flexible_version_q(version):
            return resp_cls.decode(body, version=version, header=True)
        # A non-flexible response header is just the correlation id, checked above. Decoding
        # it with header=True would copy the whole body (a Fetch response's batches) first.
        return resp_cls.decode(memoryview(body)[4:], version=version, header=False)

    def call(self, api: str, request: Any) -> Any:
        """Send ``request`` and return its response. Other threads' calls may be in flight on
        the connection at the same time: one caller at a time reads the next response and
        hands it to its caller, who returns at once."""
        mine = _Answer()
        self.send(api, request, mine)
        return self._wait(mine)

    def call_many(self, api: str, requests: list[Any]) -> list[Any]:
        """Send all ``requests`` at once (the broker works through them one after another,
        with no round trip between them) and return each one's response, or the
        ``ClusterError`` that ended the connection before it came (a failed send fails the
        rest, unsent). Other threads' calls may share the connection meanwhile, as with
        ``call``."""
        answers: list[_Answer] = []
        failed: ClusterError | None = None
        for request in requests:
            mine = _Answer()
            try:
                self.send(api, request, mine)
            except ClusterError as e:
                failed = e
                break
            answers.append(mine)
        out: list[Any] = []
        for mine in answers:
            try:
                out.append(self._wait(mine))
            except ClusterError as e:
                out.append(e)
        assert failed is not None or len(out) == len(requests)
        return out + [failed] * (len(requests) - len(out))

    def _wait(self, mine: _Answer) -> Any:
        """``mine``'s response, read by this thread or by another caller reading meanwhile."""
        while True:
            with self._handoff:
                while self._reading and not mine.done:
                    self._handoff.wait()
                if mine.done:
                    break
                self._reading = True
            try:
                with self._recv_lock:
                    self._answer_next()
            finally:
                with self._handoff:
                    self._reading = False
                    self._handoff.notify_all()
        if mine.error is not None:
            raise mine.error
        return mine.response

    def _answer_next(self) -> None:
        """Read the next response into its caller's answer (the caller holds the reading side).
        Whatever goes wrong, that answer is given an error: its caller must never wait on."""
        pending = self._pending.popleft()
        answer = pending.answer
        if answer is None:
            self.close()
            raise RuntimeError("call() on a connection used for receive()")
        try:
            answer.response = self._read_response(pending)
        except ClusterError as e:  # the connection is closed: every later call fails too
            answer.error = e
        except BaseException as e:
            self.close()  # an answer that does not decode, or an interrupted read
            err = ClusterError(
                f"reading {pending.api} response from broker {self.host}:{self.port} failed: {e!r}",
                cluster=self.cluster,
            )
            err.retriable = False  # a response partsync cannot read is not a broker hiccup
            answer.error = err
            if not isinstance(e, Exception):
                raise
        finally:
            answer.done = True

    @property
    def expiring(self) -> bool:
        """Whether its SASL session is near the end of the lifetime the broker gave it: the
        broker closes it then (KIP-368), so a new user should take a new connection."""
        return self._retire_at is not None and time.monotonic() >= self._retire_at

    def idle_and_open(self) -> bool:
        """Whether the connection can serve another user: open, nothing in flight, and nothing
        to read (a broker that closed it, or sent something unasked, makes it readable)."""
        if self.closed or self._pending or self.expiring:
            return False
        try:
            if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
                return False
            readable, _w, _x = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _read_exact(self, n: int) -> bytes:
        try:
            data: bytes | None = self._rfile.read(n)
        except ValueError:  # closed by another thread (a stop interrupting a blocking call)
            raise ConnectionResetError("connection closed") from None
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- session setup ----------------------------------------------------------------------

    def _negotiate_versions(self) -> None:
        self._versions["ApiVersions"] = 0
        req = ApiVersionsRequest()
        self._pending.append(_Pending(0, ApiVersionsResponse, 0, "ApiVersions", None))
        req.API_VERSION = 0
        req.with_header(correlation_id=0, client_id=self.client_id)
        self._sock.sendall(req.encode(header=True, framed=True))
        resp = self.receive()
        raise_for_code(resp.error_code, "ApiVersions", cluster=self.cluster)
        offered = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        self.offered = offered
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
        if sec.sasl_mechanism in ("PLAIN", "OAUTHBEARER") and not sec.uses_ssl:
            with _warned_lock:
                first = self.cluster not in _warned_in_clear
                _warned_in_clear.add(self.cluster)
            if first:
                what = "password" if sec.sasl_mechanism == "PLAIN" else "token"
                log.warning(
                    "cluster %s: SASL %s without TLS sends the %s unencrypted (use SASL_SSL%s)",
                    self.cluster,
                    sec.sasl_mechanism,
                    what,
                    ", or SCRAM" if what == "password" else "",
                )
        resp = self.call("SaslHandshake", SaslHandshakeRequest(mechanism=sec.sasl_mechanism))
        raise_for_code(
            resp.error_code, f"SASL handshake ({sec.sasl_mechanism})", cluster=self.cluster
        )
        from partsync._kafka.sasl import mechanism  # only where SASL is used: see there

        mech = mechanism(sec, self.host, self.cluster)
        while not mech.is_done():
            auth = self.call(
                "SaslAuthenticate", SaslAuthenticateRequest(auth_bytes=mech.auth_bytes())
            )
            if auth.error_code:
                # The broker's message may say why; it never contains our password.
                raise ClusterError(
                    f"SASL authentication as {sasl_identity(sec)} failed: "
                    f"{error_name(auth.error_code)} {auth.error_message or ''}".strip(),
                    cluster=self.cluster,
                )
            mech.receive(auth.auth_bytes)
            lifetime_ms = int(getattr(auth, "session_lifetime_ms", 0) or 0)
            if lifetime_ms > 0:  # retired at 80% of it, before the broker cuts it off
                self._retire_at = time.monotonic() + 0.8 * lifetime_ms / 1000
        if not mech.is_authenticated():
            raise ClusterError(
                f"SASL authentication as {sasl_identity(sec)} failed", cluster=self.cluster
            )

    # -- requests ---------------------------------------------------------------------------
