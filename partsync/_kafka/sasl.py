"""kafka-python's SASL mechanisms (PLAIN, SCRAM, OAUTHBEARER) for ``Connection``.

Imported only when a cluster uses SASL: ``kafka.net.sasl`` pulls in kafka-python's whole
network client (its connection, its broker-version tables), about a tenth of a second of every
run's start-up that a run without SASL does not need.
"""

from __future__ import annotations

from typing import Any

from kafka.net.sasl import get_sasl_mechanism
from kafka.net.sasl.oauth import AbstractTokenProvider

from partsync.config import Security, read_secret_file
from partsync.errors import ClusterError, PartsyncError

__all__ = ["mechanism"]


class _Token(AbstractTokenProvider):  # type: ignore[misc]
    """An OAUTHBEARER token: the configured one, or the token file's content as it is now."""

    def __init__(self, sec: Security, cluster: str) -> None:
        super().__init__()
        self._sec = sec
        self._cluster = cluster

    def token(self) -> str:
        path = self._sec.sasl_oauthbearer_token_file
        if not path:
            return self._sec.sasl_oauthbearer_token or ""
        try:
            return read_secret_file(path, "sasl_oauthbearer_token_file")
        except PartsyncError as e:  # gone since start-up: this connection cannot log in
            raise ClusterError(f"OAUTHBEARER token: {e.reason}", cluster=self._cluster) from None


def mechanism(sec: Security, host: str, cluster: str) -> Any:
    """A fresh login of ``sec.sasl_mechanism`` (one per connection: SCRAM keeps state)."""
    return get_sasl_mechanism(sec.sasl_mechanism)(
        host=host,
        security_protocol=sec.security_protocol,
        sasl_mechanism=sec.sasl_mechanism,
        sasl_plain_username=sec.sasl_plain_username,
        sasl_plain_password=sec.sasl_plain_password,
        sasl_oauth_token_provider=_Token(sec, cluster),
    )
