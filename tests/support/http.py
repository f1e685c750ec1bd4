"""A plain HTTP GET for tests of partsync's metrics server (``/metrics``, ``/healthz``,
``/readyz``) and of a Prometheus beside it."""

from __future__ import annotations

import urllib.error
import urllib.request

__all__ = ["http_get"]


def http_get(url: str) -> tuple[int, str]:
    """(status, body); an error status with its body; (0, the error) where nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)
