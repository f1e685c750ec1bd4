"""Membership in a partsync group on the LOCAL cluster: which process writes which partition.

partsync processes of one job (follow mode, or overlapping cron runs) join one group on the
local cluster's group coordinator, exactly like consumers would, with partsync's own protocol
type. There is no coordination, group or offset traffic with any source cluster, and no offsets
are committed anywhere: the local log end is the position.

Rebalances are eager: on a rebalance a member first stops writing every partition it owns (after
its in-flight appends are confirmed), then rejoins. Ownership is also a lease: a member whose
last successful heartbeat is older than most of the session timeout stops writing on its own,
before the coordinator can hand its partitions to someone else. Producer-epoch fencing and the
base-offset check of every append back this up (see docs/how-it-works.md).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from partsync._kafka import COORDINATOR_RETRY_CODES, GROUP_KEY, Connection, ErrorCode, error_name
from partsync.errors import ClusterError, GroupError, PartsyncError
from partsync.io.cluster import Cluster
from partsync.plan.assign import (
    PROTOCOL,
    PROTOCOL_TYPE,
    Subscription,
    assign,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from partsync.retry import Backoff

__all__ = ["GroupListener", "GroupMember"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED
_UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
_ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
_REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
# Stop writing when this much of the session timeout has passed since the last heartbeat that
# succeeded: the coordinator only gives the partitions away after all of it has passed.
_LEASE_FRACTION = 0.8
# What to do about a group error that needs a person.
_HINTS: dict[int, str] = {
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "; grant the partsync principal READ on the group",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: (
        "; another kind of group (e.g. consumers) already uses this name"
    ),
    ErrorCode.INVALID_GROUP_ID: "; group ids must not be empty",
    ErrorCode.INVALID_SESSION_TIMEOUT: (
        "; the broker's group.min/max.session.timeout.ms do not allow this session timeout"
    ),
}


class GroupListener(Protocol):
    def assigned(self, parts: list[TopicPartition], generation: int) -> None:
        """This member now owns ``parts`` (start writing them)."""

    def revoke(self, parts: list[TopicPartition], wait: bool) -> None:
        """Stop writing ``parts``; with ``wait``, return only once their in-flight appends are
        confirmed and nothing more will be sent."""


class _Ownership:
    """The partitions a member owns, held as a lease: it runs out when the last heartbeat that
    succeeded is older than most of the session timeout, and a watchdog then stops the writes
    (before the coordinator, which waits the whole session timeout, can give them away)."""

    def __init__(
        self,
        group: str,
        listener: GroupListener,
        session_timeout_ms: int,
        stopping: threading.Event,
        on_lost: Callable[[], None],
    ) -> None:
        self.group = group
        self.listener = listener
        self._span = _LEASE_FRACTION * session_timeout_ms / 1000
        self._stopping = stopping
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._owned: list[TopicPartition] = []
        self._until = 0.0
        # Set by the watchdog when the lease ran out: rejoin to get partitions back.
        self.lost = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name=f"lease-{group}", daemon=True)

    @property
    def owned(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._owned)

    def grant(self, parts: list[TopicPartition], sent: float) -> None:
        """Own ``parts`` from a SyncGroup sent at ``sent`` (monotonic clock)."""
        with self._lock:
            self._owned = parts
            self._until = sent + self._span

    def renew(self, sent: float) -> None:
        with self._lock:
            self._until = sent + self._span

    def revoke_all(self, wait: bool) -> None:
        with self._lock:
            parts, self._owned = self._owned, []
        if parts or wait:
            self.listener.revoke(parts, wait)

    def start(self) -> None:
        self._watchdog.start()

    def join(self, timeout: float) -> None:
        self._watchdog.join(timeout)

    def _watch(self) -> None:
        while not self._stopping.wait(0.1):
            with self._lock:
                expired = bool(self._owned) and time.monotonic() > self._until
            if expired:
                log.warning(
                    "group %s: no successful heartbeat for %.0f%% of the session timeout; "
                    "stopping writes until the group answers again",
                    self.group,
                    _LEASE_FRACTION * 100,
                )
                self._on_lost()
                self.lost.set()
                self.revoke_all(wait=False)


class GroupMember:
    def __init__(
        self,
        local: Cluster,
        group: str,
        topics: Sequence[str],
        listener: GroupListener,
        *,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        heartbeat_interval_ms: int | None = None,
        join_timeout: float | None = None,
    ) -> None:
        self.local = local
        self.group = group
        self.topics = tuple(topics)
        self.listener = listener
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = (
            heartbeat_interval_ms or max(200, session_timeout_ms // 5)
        ) / 1000
        # Give up (GroupError) when no assignment arrives in this long; None: keep trying.
        self.join_timeout = join_timeout
        self.subscription = Subscription(self.topics, f"{socket.gethostname()}:{os.getpid()}")
        self.member_id = ""
        self.generation = -1
        self.rebalances = 0
        self.error: PartsyncError | None = None
        self.joined = threading.Event()  # set after the first assignment arrived
        self._stopping = threading.Event()
        self._rejoin = threading.Event()
        self._own = _Ownership(group, listener, session_timeout_ms, self._stopping,
                               on_lost=self.joined.clear)  # fmt: skip
        self._conn: Connection | None = None
        self._thread = threading.Thread(target=self._run, name=f"group-{group}", daemon=True)

    # -- public ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._own.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop writing (in-flight appends confirmed), leave the group, return."""
        self._stopping.set()
        conn = self._conn
        if conn is not None and not self.joined.is_set():
            conn.close()  # interrupt a JoinGroup that waits for other members
        self._thread.join(timeout)
        self._own.join(2)

    def resubscribe(self, partitions: dict[str, int]) -> None:
        """The job's topics grew to ``partitions``: rejoin with a subscription that says so, which
        makes the coordinator rebalance the group (a member rejoining unchanged would get its
        old assignment back) and the leader hand out the new partitions."""
        counts = dict(self.subscription.partitions)
        counts.update(partitions)
        self.subscription = dataclasses.replace(
            self.subscription, partitions=tuple(sorted(counts.items()))
        )
        self._rejoin.set()

    @property
    def owned(self) -> list[TopicPartition]:
        return self._own.owned

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the member thread ----------------------------------------------------------------

    def _run(self) -> None:
        backoff = Backoff(0.2, 5.0, cancel=self._stopping)
        try:
            while not self._stopping.is_set():
                try:
                    self._join_and_sync()
                    backoff = Backoff(0.2, 5.0, cancel=self._stopping)
                    self._heartbeat_until_rejoin()
                except GroupError:
                    raise
                except ClusterError as e:
                    if self._stopping.is_set():
                        break  # stop() closed the connection to end a blocking JoinGroup
                    # The coordinator went away or moved: find it again. Owned partitions keep
                    # their lease until it runs out; the watchdog stops them then.
                    log.warning("group %s: %s; reconnecting", self.group, e)
                    self._close_conn()
                    backoff.wait()
        except PartsyncError as e:
            self.error = e
            log.error("group %s: %s", self.group, e)
        except Exception as e:  # pragma: no cover - a bug; stop writing rather than guess
            log.exception("group member crashed")
            self.error = GroupError(f"group member crashed: {e!r}", cluster=self.local.name)
        finally:
            self._own.revoke_all(wait=True)
            self._leave()
            self._stopping.set()

    def _coordinator(self) -> Connection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        code, coord = self.local.find_coordinator(
            self.group, GROUP_KEY, timeout=self.session_timeout_ms / 1000
        )
        if code or coord is None:
            raise _fatal(self.local, self.group, code, "finding the group coordinator")
        # A connection of its own: JoinGroup blocks until every member rejoined (up to the
        # rebalance timeout), which must not hold up other requests to that broker.
        self._conn = self.local.connect_to(coord, timeout=self.rebalance_timeout_ms / 1000 + 10)
        return self._conn

    def _close_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _join_and_sync(self) -> None:
        self.joined.clear()
        started = time.monotonic()
        while not self._stopping.is_set():
            if self.join_timeout is not None and time.monotonic() - started > self.join_timeout:
                raise GroupError(
                    f"group {self.group!r}: no assignment within {self.join_timeout:g}s (a member "
                    "that died may still be registered; rerun, or use --no-group if no other "
                    "partsync process writes these topics)",
                    cluster=self.local.name,
                )
            conn = self._coordinator()
            sent = time.monotonic()
            res = conn.join_group(
                self.group,
                self.member_id,
                PROTOCOL_TYPE,
                [(PROTOCOL, encode_subscription(self.subscription))],
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
            )
            if res.error_code == _MEMBER_ID_REQUIRED:
                self.member_id = res.member_id
                continue
            if res.error_code == _UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if res.error_code == _REBALANCE_IN_PROGRESS:
                continue
            if res.error_code in COORDINATOR_RETRY_CODES:
                self._close_conn()
                self._stopping.wait(0.2)
                continue
            if res.error_code:
                raise _fatal(self.local, self.group, res.error_code, "joining")
            self.member_id = res.member_id
            log.debug(
                "group %s: joined generation %d as %s, leader %s, members %s",
                self.group,
                res.generation,
                res.member_id,
                res.leader,
                [m for m, _ in res.members],
            )
            assignments: dict[str, bytes] = {}
            if res.leader == res.member_id:
                assignments = leader_assignments(self.local, self.group, res.members)
            code, data = conn.sync_group(
                self.group, res.generation, self.member_id, PROTOCOL_TYPE, PROTOCOL, assignments
            )
            if code == _UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code in (_REBALANCE_IN_PROGRESS, _ILLEGAL_GENERATION):
                continue
            if code in COORDINATOR_RETRY_CODES:
                self._close_conn()
                continue
            if code:
                raise _fatal(self.local, self.group, code, "syncing")
            parts = decode_assignment(data)
            self.generation = res.generation
            self._own.grant(parts, sent)
            self.rebalances += 1
            log.info(
                "group %s generation %d: member %s owns %s",
                self.group,
                res.generation,
                self.member_id,
                parts,
            )
            self.listener.assigned(parts, res.generation)
            self.joined.set()
            return

    def _heartbeat_until_rejoin(self) -> None:
        while not self._stopping.wait(self.heartbeat_interval):
            if self._rejoin.is_set():
                self._rejoin.clear()
                log.info("group %s: the job's topics grew; rejoining", self.group)
                self.joined.clear()
                self._own.revoke_all(wait=True)
                return
            if self._own.lost.is_set():
                self._own.lost.clear()
                self._own.revoke_all(wait=True)
                return
            conn = self._coordinator()
            sent = time.monotonic()
            code = conn.heartbeat(self.group, self.generation, self.member_id)
            if not code:
                self._own.renew(sent)
                continue
            if code in COORDINATOR_RETRY_CODES:
                self._close_conn()
                continue
            if code in (_REBALANCE_IN_PROGRESS, _ILLEGAL_GENERATION, _UNKNOWN_MEMBER_ID):
                log.info(
                    "group %s: %s; stopping writes and rejoining", self.group, error_name(code)
                )
                if code == _UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.joined.clear()
                self._own.revoke_all(wait=True)
                return
            raise _fatal(self.local, self.group, code, "heartbeat")

    def _leave(self) -> None:
        if not self.member_id:
            return
        try:
            conn = self._coordinator()
            code = conn.leave_group(self.group, self.member_id)
            if code and code != _UNKNOWN_MEMBER_ID:
                log.warning("group %s: leaving: %s", self.group, error_name(code))
        except PartsyncError as e:
            log.warning(
                "group %s: leaving failed (%s); the session timeout will expire us", self.group, e
            )
        finally:
            self._close_conn()


def _fatal(local: Cluster, group: str, code: int, what: str) -> GroupError:
    return GroupError(
        f"group {group!r}: {what} failed: {error_name(code)} ({code}){_HINTS.get(code, '')}",
        cluster=local.name,
    )


def leader_assignments(
    local: Cluster, group: str, members: Sequence[tuple[str, bytes]]
) -> dict[str, bytes]:
    """What the group's leader hands each member: every subscribed topic's local partitions
    spread over the members subscribed to it (``plan.assign``)."""
    subs: dict[str, Subscription] = {}
    for mid, meta in members:
        try:
            subs[mid] = decode_subscription(meta)
        except ValueError as e:
            raise GroupError(f"group {group!r}: member {mid}: {e}", cluster=local.name) from e
    counts: dict[str, int] = {}
    for t in sorted({t for s in subs.values() for t in s.topics}):
        info = local.topic(t, refresh=True)
        if info is not None:
            counts[t] = info.partitions
    return {m: encode_assignment(ps) for m, ps in assign(subs, counts).items()}
