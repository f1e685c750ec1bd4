"""Broker error codes as layers above ``io`` decide on them: io's public surface of the
adapter's error classification (``partsync._kafka.codes``).

A copy tells a fenced writer from a refused batch or an append of unknown outcome, and a group
command asks a coordinator again while it is not ready; those classes of codes, a code's name,
and the one mapping from a code to a ``BrokerError`` are the adapter's, reached through here so
that nothing above ``io`` imports ``partsync._kafka`` (``tests/unit/test_layering.py``).
"""

from __future__ import annotations

from partsync._kafka import (
    COORDINATOR_RETRY_CODES,
    FENCED_CODES,
    REFUSED_RECORD_CODES,
    UNKNOWN_OUTCOME_CODES,
    broker_error,
    error_name,
)

__all__ = [
    "COORDINATOR_RETRY_CODES",
    "FENCED_CODES",
    "REFUSED_RECORD_CODES",
    "UNKNOWN_OUTCOME_CODES",
    "broker_error",
    "error_name",
]
