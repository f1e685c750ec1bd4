"""A blocking, pipelined connection to one broker: framing, API version negotiation, TLS, SASL.

kafka-python 3.0 moved its protocol and network modules (``kafka.protocol.*`` is now generated
from Kafka's JSON schemas; the old ``kafka.conn``/``kafka.client_async`` are gone), so every
import of them lives in this package (``partsync._kafka``). partsync uses kafka-python for
request/response encoding, error codes and SASL mechanisms, and runs its own small blocking
connection so requests can be pipelined (several in flight, responses in order) without
kafka-python's event loop. The connection is built from one part per job: ``sockets`` opens
the socket (TCP, TLS), ``framed_socket`` frames requests onto it and reads the answers in order,
``shared_calls`` lets many threads' calls share it, ``api_versions`` chooses the versions and
``sasl_login`` logs in. The typed requests are in ``requests.py`` and the ``*_requests.py``
modules it combines.
"""

import select
import ssl
import time

from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from partsync._kafka.api_versions import REQUIRED, choose_versions
from partsync._kafka.codes import raise_for_code
from partsync._kafka.framed_socket import FramedSocket, Pending
from partsync._kafka.sasl_login import sasl_login
from partsync._kafka.shared_calls import SharedCalls
from partsync._kafka.sockets import open_socket
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


class BrokerConnection(FramedSocket, SharedCalls):
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
        # Sent with fetches (KIP-392): a leader with a rack-aware replica selector may point
        # this client at a replica in its rack.
        self.rack = rack
        self.timeout = timeout
        self._security = security or Security()
        self.last_throttle_ms = 0  # from the last Fetch answer (requests.Connection)
        # When a SASL session the broker limited (an OAUTHBEARER token's expiry, or
        # connections.max.reauth.ms) should be given up for a new connection; None: never.
        self._retire_at: float | None = None
        # ApiVersions' answer: (min, max) version by API key.
        self.offered: dict[int, tuple[int, int]] = {}
        sock = open_socket(
            host,
            port,
            cluster=cluster,
            security=self._security,
            timeout=timeout,
            connect_timeout=connect_timeout,
            buffer_bytes=socket_buffer_bytes,
        )
        FramedSocket.__init__(
            self, sock, host=host, port=port, cluster=cluster, client_id=client_id
        )
        SharedCalls.__init__(self)
        try:
            started = time.monotonic()
            self._negotiate_versions()
            # One small request's round trip: how far away the broker is (a LAN, or a long link).
            self.setup_rtt = time.monotonic() - started
            if self._security.uses_sasl:
                self._retire_at = sasl_login(self.call, self._security, host, cluster)
        except BaseException:
            self.close()
            raise

    def version(self, api: str) -> int:
        return self._versions[api]

    def supports(self, api: str) -> bool:
        """Whether the broker offers a version of ``api`` partsync speaks."""
        return api in self._versions

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

    def _negotiate_versions(self) -> None:
        """ApiVersions v0 (which every broker answers, whatever it speaks), then the newest
        version of each API both sides speak."""
        self._versions["ApiVersions"] = 0
        req = ApiVersionsRequest()
        self._pending.append(Pending(0, ApiVersionsResponse, 0, "ApiVersions", None))
        req.API_VERSION = 0
        req.with_header(correlation_id=0, client_id=self.client_id)
        self._sock.sendall(req.encode(header=True, framed=True))
        resp = self.receive()
        raise_for_code(resp.error_code, "ApiVersions", cluster=self.cluster)
        offered = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        self.offered = offered
        self._versions.update(choose_versions(offered))
        for needed in REQUIRED:
            if needed not in self._versions:
                raise ClusterError(
                    f"broker {self.host}:{self.port} does not support a {needed} version partsync "
                    "needs (record batch v2, Kafka >= 0.11)",
                    cluster=self.cluster,
                )
