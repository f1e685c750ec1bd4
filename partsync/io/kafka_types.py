"""The adapter's types that layers above ``io`` hold: io's public surface of ``_kafka``.

``copy`` and ``run`` keep connections, fetch answers and transaction states that ``io`` hands
them, but import kafka-python's adapter (``partsync._kafka``) nowhere: that package is ``io``'s
to build on, so a change in it stops at ``io`` (``tests/unit/test_layering.py`` checks that no
module above ``io`` imports it). Re-exported as they are, not wrapped: no behaviour of its own.
"""

from __future__ import annotations

from partsync._kafka import THROTTLE_WAIT_LIMIT_S, Connection, FetchedPartition, TxnState

__all__ = ["THROTTLE_WAIT_LIMIT_S", "Connection", "FetchedPartition", "TxnState"]
