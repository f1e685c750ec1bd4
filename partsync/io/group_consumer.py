"""KIP-848's consumer group protocol (ConsumerGroupHeartbeat) for ``GroupMember``, where the
local cluster offers it (Kafka 4.0+, or 3.9 with the protocol enabled).

Why it is preferred: the coordinator assigns at once (no ``group.initial.rebalance.delay.ms``
wait on a first join, 3 s by default, which every cron run with work paid), and a partition moves
to a member only after its previous owner said, in a heartbeat, that it no longer holds it. So
ownership stays exclusive as in the classic protocol: a member stops writing a partition (its
in-flight appends confirmed) before it reports the partition released.

What differs: the session timeout is the broker's (``group.consumer.session.timeout.ms``, 45 s
by default), not the client's, so the lease is sized from the broker's configs; a member that
is told nothing new cannot tell whether partitions are still on their way to it, so it asks
(ConsumerGroupDescribe) until its assignment equals its target.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING

from partsync._kafka import COORDINATOR_RETRY_CODES, ErrorCode, error_name
from partsync._kafka.group_requests import HeartbeatResult
from partsync.errors import GroupError

if TYPE_CHECKING:
    from partsync._kafka import Connection
    from partsync.io.group import GroupMember

__all__ = ["ConsumerSession", "FallBackToClassic"]

log = logging.getLogger(__name__)

_FENCED = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
# Answers to a first heartbeat that mean the broker does not run the protocol after all.
_NOT_SERVED = frozenset({ErrorCode.UNSUPPORTED_VERSION})
_JOIN, _LEAVE = 0, -1
# While partitions may still be on their way (or a release must be reported), ask this often.
_FAST_S = 0.2
_SESSION_KEYS = ["group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms"]


class FallBackToClassic(Exception):
    """The broker advertised the protocol but does not serve it (not enabled)."""


class ConsumerSession:
    name = "consumer"

    def __init__(self, member: GroupMember) -> None:
        self.m = member
        self.epoch = _JOIN
        self._interval = member.heartbeat_interval
        self._ids: dict[uuid.UUID, str] = {}
        self._lease_sized = False
        self._lease_from_heartbeat = False
        self._converged = False

    def resubscribe(self) -> None:
        # The coordinator sees new partitions of subscribed topics itself; the runner needs the
        # current assignment again now that it has tasks for them. Done by the heartbeat thread
        # (the only one that grants and revokes), woken by this.
        self.m.rejoin.set()

    # -- the session --------------------------------------------------------------------------

    def run(self) -> None:
        """Join (epoch 0), then heartbeat until fenced or stopped; the caller rejoins.

        Every heartbeat is a full one (rebalance timeout, topics and owned partitions set), so
        the coordinator answers each with the whole assignment and a member that stopped its
        writes on its own (lease) gets them back as soon as the group answers again."""
        m = self.m
        m.joined.clear()
        self.epoch = _JOIN
        self._converged = False
        waiting_since = time.monotonic()
        while not m.stopping.is_set():
            if self._converged:
                waiting_since = time.monotonic()
            else:
                m.check_join_timeout(waiting_since)
            if m.lease.lost.is_set():
                # The watchdog stopped the writes: wait for them, then let the next answer
                # hand the partitions back (or say the coordinator expired us).
                m.lease.lost.clear()
                m.lease.revoke_all(wait=True)
                self._converged = False
            if m.rejoin.is_set():
                m.rejoin.clear()
                if m.lease.owned:
                    m.listener.assigned(m.lease.owned, self.epoch)
            conn = m.coordinator()
            if not self._lease_sized:
                self._size_lease(conn)
            sent = time.monotonic()
            res = self._heartbeat(conn)
            if res is None:
                continue
            if res.member_id:
                m.member_id = res.member_id
            self.epoch = res.member_epoch
            if res.heartbeat_interval_ms > 0 and self._lease_from_heartbeat:
                m.lease.shorten(res.heartbeat_interval_ms)
            if res.heartbeat_interval_ms > 0:
                self._interval = min(m.heartbeat_interval, m.lease.span / 4,
                                     res.heartbeat_interval_ms / 1000)  # fmt: skip
            m.lease.renew(sent)
            if res.assignment is not None:
                self._apply(res.assignment, sent)
            if not self._converged:
                self._converged = self._check_converged(conn)
                if self._converged:
                    m.joined.set()
            self._sleep(self._interval if self._converged else _FAST_S)

    def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if stopped or woken by ``resubscribe``."""
        m = self.m
        deadline = time.monotonic() + seconds
        while not m.stopping.is_set() and not m.rejoin.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            m.stopping.wait(min(left, 0.05))

    def _heartbeat(self, conn: Connection) -> HeartbeatResult | None:
        m = self.m
        res = conn.consumer_group_heartbeat(
            m.group,
            m.member_id,
            self.epoch,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            topics=list(m.topics),
            owned=self._owned_ids(),
        )
        code = res.error_code
        if not code:
            return res
        if code in COORDINATOR_RETRY_CODES:
            m.close_conn()
            m.stopping.wait(_FAST_S)
            return None
        if code in _FENCED:
            # The coordinator no longer counts us: it may have handed our partitions on.
            log.info("group %s: %s; stopping writes and rejoining", m.group, error_name(code))
            m.joined.clear()
            m.lease.revoke_all(wait=True)
            m.member_id = ""
            self.epoch = _JOIN
            self._converged = False
            return None
        if self.epoch == _JOIN and code in _NOT_SERVED and m.protocol == "auto":
            raise FallBackToClassic(error_name(code))
        raise m.fatal(code, "heartbeat", res.error_message)

    def _apply(self, assignment: dict[uuid.UUID, tuple[int, ...]], sent: float) -> None:
        m = self.m
        new = sorted((self._topic_name(tid), p) for tid, ps in assignment.items()
                     for p in ps)  # fmt: skip
        old = m.lease.owned
        gone = sorted(set(old) - set(new))
        if gone:
            # Stopped (in-flight appends confirmed) before the next heartbeat reports them
            # released: only then may the coordinator give them to another member.
            log.info("group %s: releasing %s", m.group, gone)
            m.lease.revoke(gone, wait=True)
        if new != old:
            m.generation = self.epoch
            m.rebalances += 1
            log.info("group %s epoch %d: member %s owns %s", m.group, self.epoch, m.member_id,
                     new)  # fmt: skip
        m.lease.grant(new, sent)
        if set(new) - set(old):
            m.listener.assigned(new, self.epoch)
        if gone or set(new) != set(old):
            self._converged = False  # report the release at once, then look again

    def _check_converged(self, conn: Connection) -> bool:
        """Whether this member holds everything the coordinator targets for it (partitions
        still being released by another member arrive later)."""
        m = self.m
        code, members = conn.consumer_group_describe(m.group)
        if code in COORDINATOR_RETRY_CODES:
            return False
        if code:
            # Not allowed to describe: count what we were given as all there is.
            log.debug("group %s: describe: %s", m.group, error_name(code))
            return True
        me = members.get(m.member_id)
        return me is not None and me.target == frozenset(m.lease.owned)

    def leave(self) -> None:
        m = self.m
        res = m.coordinator().consumer_group_heartbeat(m.group, m.member_id, _LEAVE)
        if res.error_code and res.error_code not in _FENCED:
            log.warning("group %s: leaving: %s", m.group, error_name(res.error_code))

    # -- helpers ------------------------------------------------------------------------------

    def _size_lease(self, conn: Connection) -> None:
        """The coordinator expires a member after ``group.consumer.session.timeout.ms`` (a group
        may override it, but never below ``group.consumer.min.session.timeout.ms``): the lease
        stays below the smallest of those we can read. Unreadable (no DESCRIBE_CONFIGS), the
        heartbeat interval, which Kafka requires to be below the session timeout, bounds it."""
        m = self.m
        self._lease_sized = True
        node = m.coordinator_node
        code, values = (
            (-1, {}) if node is None else conn.describe_broker_configs(node, _SESSION_KEYS)
        )
        limits = [int(v) for k, v in values.items() if k in _SESSION_KEYS and v.isdigit()]
        if limits:
            m.lease.shorten(min(limits))
            m.extend_join_timeout(2 * max(limits) / 1000 + 10)
            return
        log.debug("group %s: broker session timeouts unreadable (%s); leasing for less than "
                  "the heartbeat interval", m.group, error_name(code))  # fmt: skip
        self._lease_from_heartbeat = True

    def _owned_ids(self) -> dict[uuid.UUID, list[int]]:
        owned: dict[uuid.UUID, list[int]] = {}
        names = {name: tid for tid, name in self._ids.items()}
        for topic, p in self.m.lease.owned:
            tid = names.get(topic)
            if tid is None:
                raise GroupError(f"group {self.m.group!r}: no topic id known for owned {topic!r}",
                                 cluster=self.m.local.name)  # fmt: skip
            owned.setdefault(tid, []).append(p)
        return owned

    def _learn_ids(self) -> None:
        m = self.m
        for topic in m.topics:
            info = m.local.topic(topic, refresh=True)
            if info is not None and info.topic_id:
                self._ids[uuid.UUID(info.topic_id)] = topic

    def _topic_name(self, tid: uuid.UUID) -> str:
        name = self._ids.get(tid)
        if name is None:
            m = self.m
            self._learn_ids()
            name = self._ids.get(tid)
            if name is None:
                raise GroupError(
                    f"group {m.group!r}: assigned topic id {tid}, which is none of {list(m.topics)}",
                    cluster=m.local.name,
                )
        return name
