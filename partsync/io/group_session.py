"""What a group member (``io.group.GroupMember``) and its protocol session (``io.group_classic``,
``io.group_consumer``) see of each other.

The member picks a session and runs it on its thread; the session drives the protocol's requests
through the member's state and connection. Both sides are described here, below both, so a
session needs only this module, not the member that picks it.
"""

from __future__ import annotations

import threading
from typing import Protocol

from partsync._kafka import Connection
from partsync.errors import GroupError
from partsync.io.cluster import Cluster
from partsync.io.group_lease import GroupListener, Lease
from partsync.plan.assign import Subscription

__all__ = ["Member", "Session"]


class Session(Protocol):
    """One group protocol, run by the member's thread."""

    name: str

    def run(self) -> None:
        """Join, then keep the membership until the member must rejoin, stops, or a connection
        error (``ClusterError``) makes it reconnect and call this again."""

    def leave(self) -> None: ...


class Member(Protocol):
    """The member's state and services a session uses (``io.group.GroupMember`` has them)."""

    local: Cluster
    group: str
    topics: tuple[str, ...]
    listener: GroupListener
    protocol: str  # --group-protocol: auto, consumer or classic
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval: float  # seconds
    subscription: Subscription
    member_id: str
    generation: int
    rebalances: int
    coordinator_node: int | None
    lease: Lease
    joined: threading.Event
    stopping: threading.Event
    rejoin: threading.Event

    def coordinator(self) -> Connection:
        """The connection to the group coordinator, found and opened when needed."""
        ...

    def close_conn(self) -> None: ...

    def check_join_timeout(self, started: float) -> None: ...

    def extend_join_timeout(self, seconds: float) -> None: ...

    def fatal(self, code: int, what: str, message: str | None = None) -> GroupError: ...
