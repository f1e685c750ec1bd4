"""Opening a broker's socket: TCP with big buffers, then TLS where the cluster uses it, from a
TLS context built once per cluster's settings and files."""

import os
import socket
import ssl
import threading

from partsync.config import Security
from partsync.errors import ClusterError

__all__ = ["open_socket", "ssl_context"]

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


def ssl_context(sec: Security) -> ssl.SSLContext:
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


def open_socket(
    host: str,
    port: int,
    *,
    cluster: str,
    security: Security,
    timeout: float,
    connect_timeout: float | None,
    buffer_bytes: int,
) -> socket.socket:
    """A connected socket to ``host:port``, TLS already shaken hands where ``security`` says,
    each read and write limited to ``timeout`` seconds (``connect_timeout``, default
    ``timeout``, for the TCP connection and the TLS handshake)."""
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
            sock.setsockopt(socket.SOL_SOCKET, opt, buffer_bytes)
        except OSError:
            pass
    if security.uses_ssl:
        try:
            sock = ssl_context(security).wrap_socket(sock, server_hostname=host)
        except (ssl.SSLError, OSError) as e:
            sock.close()
            raise ClusterError(
                f"TLS handshake with {host}:{port} failed: {e}", cluster=cluster
            ) from e
    sock.settimeout(timeout)
    return sock
