"""A SASL login on a new connection (SaslHandshake, then SaslAuthenticate until the mechanism is
done), and the one warning per cluster where a secret crosses the wire unencrypted."""

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from partsync._kafka.codes import error_name, raise_for_code
from partsync.config import Security
from partsync.errors import ClusterError

__all__ = ["sasl_identity", "sasl_login"]

# The logger this warning has always come from (a name in every log line, and in filters).
log = logging.getLogger("partsync._kafka.connection")


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


def _warn_once_in_clear(sec: Security, cluster: str) -> None:
    if sec.sasl_mechanism not in ("PLAIN", "OAUTHBEARER") or sec.uses_ssl:
        return
    with _warned_lock:
        first = cluster not in _warned_in_clear
        _warned_in_clear.add(cluster)
    if first:
        what = "password" if sec.sasl_mechanism == "PLAIN" else "token"
        log.warning(
            "cluster %s: SASL %s without TLS sends the %s unencrypted (use SASL_SSL%s)",
            cluster,
            sec.sasl_mechanism,
            what,
            ", or SCRAM" if what == "password" else "",
        )


def sasl_login(
    call: Callable[[str, Any], Any], sec: Security, host: str, cluster: str
) -> float | None:
    """Log in over ``call`` (a new connection's, before any other request) as ``sec`` says.
    Returns when the session should be given up for a new connection (``time.monotonic()``,
    at 80% of the lifetime the broker gave it, KIP-368), or None where it set none."""
    _warn_once_in_clear(sec, cluster)
    resp = call("SaslHandshake", SaslHandshakeRequest(mechanism=sec.sasl_mechanism))
    raise_for_code(resp.error_code, f"SASL handshake ({sec.sasl_mechanism})", cluster=cluster)
    from partsync._kafka.sasl import mechanism  # only where SASL is used: see there

    retire_at: float | None = None
    mech = mechanism(sec, host, cluster)
    while not mech.is_done():
        auth = call("SaslAuthenticate", SaslAuthenticateRequest(auth_bytes=mech.auth_bytes()))
        if auth.error_code:
            # The broker's message may say why; it never contains our password.
            raise ClusterError(
                f"SASL authentication as {sasl_identity(sec)} failed: "
                f"{error_name(auth.error_code)} {auth.error_message or ''}".strip(),
                cluster=cluster,
            )
        mech.receive(auth.auth_bytes)
        lifetime_ms = int(getattr(auth, "session_lifetime_ms", 0) or 0)
        if lifetime_ms > 0:  # retired at 80% of it, before the broker cuts it off
            retire_at = time.monotonic() + 0.8 * lifetime_ms / 1000
    if not mech.is_authenticated():
        raise ClusterError(f"SASL authentication as {sasl_identity(sec)} failed", cluster=cluster)
    return retire_at
