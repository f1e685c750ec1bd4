"""Kafka's framing over one socket, pipelined: requests are written as they come (each a 4-byte
size, a header and a body) and their answers read back in the order they were sent, which is the
order Kafka answers in on one connection. Nothing here knows of TLS, SASL or how the versions
were chosen (``BrokerConnection``); many threads' ``call``s are ``SharedCalls``'."""

import collections
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from typing import Any, NamedTuple, Self

from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer, EncodeBufferPool

from partsync._kafka.api_versions import PREFERRED
from partsync._kafka.raw import Buffer
from partsync.errors import ClusterError

__all__ = [
    "SIZE",
    "Answer",
    "Decoder",
    "FramedSocket",
    "Pending",
    "encode_framed_into",
    "sendmsg_all",
]

# A frame's size prefix, and the correlation id that opens every response header.
SIZE = struct.Struct(">i")


def encode_framed_into(request: Any, out: EncodeBuffer) -> None:
    """``request.encode(header=True, framed=True)`` written into ``out``, without the copy
    ``encode`` makes of the finished buffer (which, for a Produce request, copies every batch)."""
    version = request.API_VERSION
    flexible = request.flexible_version_q(version)
    start = out.pos
    out.ensure(4)
    out.pos += 4  # frame size, filled in below
    request.encode_header_into(out, flexible=flexible)
    request._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)(request, out)
    SIZE.pack_into(out.buf, start, out.pos - start - 4)


# At most this many buffers per sendmsg (Linux's IOV_MAX is 1024).
_IOV_MAX = 1024


def sendmsg_all(sock: socket.socket, parts: list[Buffer]) -> None:
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


# Decodes a raw response: (body, version, offset after the response header) -> the answer.
Decoder = Callable[[bytes, int, int], Any]


class Answer:
    """Where a ``call`` finds its response, read by whichever caller was reading: decoded by
    kafka-python, or by ``decode`` from the raw body (``raw``'s decoders)."""

    __slots__ = ("decode", "done", "error", "response")

    def __init__(self, decode: Decoder | None = None) -> None:
        self.decode = decode
        self.done = False
        self.response: Any = None
        self.error: ClusterError | None = None


class Pending(NamedTuple):
    correlation_id: int
    response_cls: Any
    version: int
    api: str
    answer: Answer | None  # None: read by ``receive()``


class FramedSocket:
    """Requests framed onto one open socket, answers read back in order.

    ``send()`` writes a request and returns at once; ``receive()`` returns the responses in the
    order the requests were sent. Sending and receiving may happen on two threads.
    """

    def __init__(
        self, sock: socket.socket, *, host: str, port: int, cluster: str, client_id: str
    ) -> None:
        self.host = host
        self.port = port
        self.cluster = cluster
        self.client_id = client_id
        self._sock = sock
        self._rfile = sock.makefile("rb", buffering=1 << 20)
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        self._pending: collections.deque[Pending] = collections.deque()
        self._correlation = 0
        # The version of each API sent, as the broker and partsync agreed (``api_versions``).
        self._versions: dict[str, int] = {}
        # Set once the socket is closed (by us or after an I/O error): the connection is out of
        # step with its pending requests and must be replaced, never reused.
        self.closed = False

    def send(self, api: str, request: Any, _answer: Answer | None = None) -> None:
        _req_cls, resp_cls, _lo, _hi = PREFERRED.get(api, (None, None, 0, 0))
        version = self._versions.get(api, 0)
        with self._send_lock:
            self._correlation += 1
            cid = self._correlation
            request.API_VERSION = version
            request.with_header(correlation_id=cid, client_id=self.client_id)
            # Encoded into this thread's reusable buffer and sent from it: a Produce request's
            # batches are copied once (into the buffer), not three times.
            with EncodeBufferPool.acquire() as out:
                encode_framed_into(request, out)
                self._pending.append(Pending(cid, resp_cls, version, api, _answer))
                try:
                    with memoryview(out.buf)[: out.pos] as data:
                        self._sock.sendall(data)
                except OSError as e:
                    raise self._io_error(f"sending {api}", e) from e

    def send_parts(self, api: str, build: Callable[[int, int], list[Buffer]]) -> None:
        """Send a request encoded by ``build(version, correlation_id)`` as a list of buffers,
        with one scatter/gather write (``raw``'s encoders: batches are not copied); read the
        answer with ``receive``."""
        _req_cls, resp_cls, _lo, _hi = PREFERRED[api]
        version = self._versions[api]
        with self._send_lock:
            self._correlation += 1
            cid = self._correlation
            parts = build(version, cid)
            self._pending.append(Pending(cid, resp_cls, version, api, None))
            try:
                if isinstance(self._sock, ssl.SSLSocket):  # TLS has no sendmsg
                    self._sock.sendall(b"".join(parts))
                else:
                    sendmsg_all(self._sock, parts)
            except OSError as e:
                raise self._io_error(f"sending {api}", e) from e

    def receive(self) -> Any:
        with self._recv_lock:
            return self._read_response(self._next_pending())

    def receive_body(self) -> tuple[bytes, int]:
        """The next response's raw body and the offset after its (non-flexible) header, for
        ``raw``'s decoders; the version is the request's (``version(api)``)."""
        with self._recv_lock:
            return self._read_raw(self._next_pending())

    def _read_raw(self, pending: Pending) -> tuple[bytes, int]:
        """``pending``'s raw body and the offset after its header (non-flexible only)."""
        if pending.response_cls.flexible_version_q(pending.version):
            raise RuntimeError(f"{pending.api} v{pending.version} has a flexible header")
        return self._read_body(pending), 4

    def _next_pending(self) -> Pending:
        pending = self._pending.popleft()
        if pending.answer is not None:
            raise RuntimeError("receive() on a connection used for call()")
        return pending

    def _read_body(self, pending: Pending) -> bytes:
        cid, _resp_cls, _version, api, _answer = pending
        try:
            head = self._read_exact(4)
            (size,) = SIZE.unpack(head)
            body = self._read_exact(size)
        except OSError as e:
            raise self._io_error(f"reading {api} response", e) from e
        (got,) = SIZE.unpack_from(body, 0)
        if got != cid:
            self.close()
            raise ClusterError(
                f"broker {self.host}:{self.port} answered correlation id {got}, expected {cid}",
                cluster=self.cluster,
            )
        return body

    def _read_response(self, pending: Pending) -> Any:
        _cid, resp_cls, version, api, _answer = pending
        body = self._read_body(pending)
        if api == "ApiVersions" or resp_cls.flexible_version_q(version):
            return resp_cls.decode(body, version=version, header=True)
        # A non-flexible response header is just the correlation id, checked above. Decoding
        # it with header=True would copy the whole body (a Fetch response's batches) first.
        return resp_cls.decode(memoryview(body)[4:], version=version, header=False)

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
