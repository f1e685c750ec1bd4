"""The live endpoint of a follower: ``serve_metrics`` serves a ``LiveMetrics`` at ``/metrics``
(prometheus_client's app) and answers ``/healthz`` and ``/readyz`` with what ``ui.health``
decides from its facts, on a daemon thread of its own.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import make_wsgi_app

from partsync.ui.live_metrics import LiveMetrics

__all__ = ["MetricsServer", "serve_metrics"]


class MetricsServer:
    """The HTTP server ``serve_metrics`` started: ``server_address`` is where it listens (the
    bound port even if port 0 was asked for), ``shutdown()`` stops it and closes its socket."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def server_address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]  # IPv6 addresses have 4 fields
        return (str(host), int(port))

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds up shutdown


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per scrape on stderr


_Start = Callable[[str, list[tuple[str, str]]], Any]


def _app(metrics: LiveMetrics) -> Callable[[dict[str, Any], _Start], list[bytes]]:
    """``/metrics`` (prometheus_client's app), ``/healthz`` and ``/readyz`` (200 "ok", or 503
    with the reason), as plain text."""
    prom = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, Any], start: _Start) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in ("/healthz", "/readyz"):
            return prom(environ, start)  # type: ignore[no-any-return]
        h = metrics.health()
        ok, reason = (h.live, h.live_reason) if path == "/healthz" else (h.ready, h.ready_reason)
        body = (reason + "\n").encode()
        start(
            "200 OK" if ok else "503 Service Unavailable",
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return app


def serve_metrics(metrics: LiveMetrics, port: int, host: str = "0.0.0.0") -> MetricsServer:
    """Serve ``metrics`` at http://host:port/metrics, and ``/healthz`` and ``/readyz``, from a
    daemon thread; ``shutdown()`` stops."""
    cls = _Server6 if ":" in host else _Server
    server = make_server(host, port, _app(metrics), cls, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True)
    thread.start()
    return MetricsServer(server, thread)
