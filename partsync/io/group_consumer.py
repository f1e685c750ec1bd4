"""KIP-848's consumer group protocol (ConsumerGroupHeartbeat) for ``GroupMember``, where the
local cluster offers it (Kafka 4.0+, or 3.9 with the protocol enabled).

Why it is preferred: the coordinator assigns at once (no ``group.initial.rebalance.delay.ms``
wait on a first join, 3 s by default, which every cron run with work paid), and a partition moves
to a member only after its previous owner said, in a heartbeat, that it no longer holds it. So
ownership stays exclusive as in the classic protocol: a member reports a partition released
only after its copy stopped and its in-flight appends were confirmed. The owned partitions a
heartbeat reports are the lease's, which only this session's thread shrinks, and only after
the writers were waited for.

A consumer group takes any member that subscribes: the classic protocol's protocol type kept
consumer applications out of a partsync group, this protocol does not. So a member checks, from
ConsumerGroupDescribe, that every other member is a partsync process (every member's group
connection uses the client id ``group.MEMBER_CLIENT_ID``, whatever the cluster's ``client_id``)
before it joins and whenever its assignment changes, and steps aside (exit 1) if one is not: a
partsync run must never take partitions from somebody's consumers. It does not tell jobs apart:
another partsync job in the same group only gets partitions of the topics it subscribes to.

What differs: the session timeout is the broker's (``group.consumer.session.timeout.ms``, 45 s
by default), not the client's, so the lease is sized from the broker's configs; and a member that
is told nothing new cannot tell whether partitions are still on their way to it, so it asks
(ConsumerGroupDescribe) until its assignment equals its target.
"""

from __future__ import annotations

import logging
import time
import uuid

from partsync._kafka import COORDINATOR_RETRY_CODES, Connection, ErrorCode, error_name
from partsync._kafka.admin_requests import BROKER_RESOURCE, GROUP_RESOURCE
from partsync._kafka.group_requests import DescribedGroup, HeartbeatResult
from partsync.errors import GroupError
from partsync.io.group_session import Member
from partsync.io.group_topic_ids import TopicIds

# The client id of every member's group connection (io.group), whatever the cluster's
# client_id, which hosts may set differently: how members tell partsync processes from consumers.
MEMBER_CLIENT_ID = "partsync-group-member"

__all__ = ["ConsumerSession", "FallBackToClassic"]

log = logging.getLogger(__name__)

# The coordinator no longer counts this member (its session expired, it was fenced for a slow
# release, or its emptied group was cleaned up): its partitions may be someone else's now.
_FENCED = frozenset(
    {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND}
)
# Answers to a first heartbeat that mean the broker does not run the protocol after all.
_NOT_SERVED = frozenset({ErrorCode.UNSUPPORTED_VERSION})
_JOIN, _LEAVE = 0, -1
# While partitions may still be on their way (or a release must be reported), ask this often.
_FAST_S = 0.2
# Kafka's default group.consumer.session.timeout.ms, assumed when the configs are unreadable.
_DEFAULT_SESSION_MS = 45_000
_BROKER_KEYS = ["group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms"]
_GROUP_KEYS = ["consumer.session.timeout.ms"]


class FallBackToClassic(Exception):
    """The broker advertised the protocol but does not serve it (not enabled)."""


class ConsumerSession:
    name = "consumer"

    def __init__(self, member: Member) -> None:
        self.m = member
        # Kept across connection errors: after one, the member goes on with the same id and
        # epoch (a full heartbeat), as Kafka expects; only a fence starts it over.
        self.epoch = _JOIN
        self._interval = member.heartbeat_interval
        self._ids = TopicIds(member)
        self._lease_sized = False
        self._lease_from_heartbeat = False
        self._converged = False

    # -- the session --------------------------------------------------------------------------

    def run(self) -> None:
        """Heartbeat (joining first, at epoch 0) until stopped; a connection error raises
        ``ClusterError`` and the member calls this again once reconnected.

        Every heartbeat is a full one (rebalance timeout, topics and owned partitions set), so
        the coordinator answers each with the whole assignment, and a member that stopped its
        writes on its own (lease) gets them back as soon as the group answers again."""
        m = self.m
        waiting_since = time.monotonic()
        while not m.stopping.is_set():
            if self._converged:
                waiting_since = time.monotonic()
            else:
                m.check_join_timeout(waiting_since)
            if m.lease.lost.is_set():
                # The watchdog stopped the writes: wait for them, then report the partitions
                # released; the next answer hands them back (or says we were expired).
                m.lease.revoke_all(wait=True)
                m.lease.lost.clear()
                self._converged = False
            if m.rejoin.is_set():
                m.rejoin.clear()
                if m.lease.owned:
                    m.listener.assigned(m.lease.owned, self.epoch)
            conn = m.coordinator()
            if not self._lease_sized:
                self._size_lease(conn)
            if self.epoch == _JOIN and self._describe(conn) is None:
                m.stopping.wait(_FAST_S)
                continue
            sent = time.monotonic()
            res = self._heartbeat(conn)
            if res is None:
                continue
            if res.member_id:
                m.member_id = res.member_id
            self.epoch = res.member_epoch
            if res.heartbeat_interval_ms > 0:
                if self._lease_from_heartbeat:
                    m.lease.shorten(res.heartbeat_interval_ms)
                self._interval = min(
                    m.heartbeat_interval, m.lease.span / 4, res.heartbeat_interval_ms / 1000
                )
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
            owned=self._ids.owned(m.lease.owned),
        )
        code = res.error_code
        if not code:
            return res
        if code in COORDINATOR_RETRY_CODES:
            m.close_conn()
            m.stopping.wait(_FAST_S)
            return None
        if code in _FENCED and self.epoch != _JOIN:
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
        new = sorted((self._ids.name(tid), p) for tid, ps in assignment.items() for p in ps)
        old = m.lease.owned
        gone = sorted(set(old) - set(new))
        if gone:
            # Stopped (in-flight appends confirmed) before the next heartbeat reports them
            # released: only then may the coordinator give them to another member.
            log.info("group %s: releasing %s", m.group, gone)
            m.lease.revoke(gone, wait=True)
            self._converged = False  # report the release at once, then look again
        if not m.lease.grant(new, sent):
            # Answered after the lease it gives ran out: write nothing on it; ask again.
            log.warning(
                "group %s: the group answered too late to keep writing; asking again", m.group
            )
            self._converged = False
            return
        if new != old:
            m.generation = self.epoch
            m.rebalances += 1
            self._converged = False
            log.info("group %s epoch %d: member %s owns %s", m.group, self.epoch, m.member_id, new)
        if set(new) - set(old):
            m.listener.assigned(new, self.epoch)

    def _check_converged(self, conn: Connection) -> bool:
        """Whether this member holds everything the coordinator targets for it: the targets are
        current (assignment epoch = group epoch) and this member's target, its assignment and
        the partitions it writes are the same. Partitions still being released by another
        member are in the target, not in the assignment."""
        g = self._describe(conn)
        return g is not None and converged(g, self.m.member_id, frozenset(self.m.lease.owned))

    def _describe(self, conn: Connection) -> DescribedGroup | None:
        """The group, after checking its members; None when the coordinator said ask again.
        A group that does not exist yet has no members; any other error is fatal (a member
        with READ on the group may describe it): the check must not pass by failing."""
        m = self.m
        g = conn.consumer_group_describe(m.group)
        if g.error_code in COORDINATOR_RETRY_CODES:
            m.close_conn()
            return None
        if self.epoch == _JOIN and g.error_code in _NOT_SERVED and m.protocol == "auto":
            # Advertised but not served (Kafka 3.9 with the protocol off).
            raise FallBackToClassic(error_name(g.error_code))
        if g.error_code and g.error_code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise m.fatal(g.error_code, "describing the group")
        check_members(g, m.member_id, m.group, m.local.name)
        return g

    def leave(self) -> None:
        m = self.m
        res = m.coordinator().consumer_group_heartbeat(m.group, m.member_id, _LEAVE)
        if res.error_code and res.error_code not in _FENCED:
            log.warning("group %s: leaving: %s", m.group, error_name(res.error_code))

    # -- helpers ------------------------------------------------------------------------------

    def _size_lease(self, conn: Connection) -> None:
        """The coordinator expires a member after ``group.consumer.session.timeout.ms`` or the
        group's own ``consumer.session.timeout.ms`` (which Kafka validates against
        ``group.consumer.min.session.timeout.ms``): the lease stays below the smallest of those
        it can read. With none readable (no DESCRIBE_CONFIGS), the heartbeat interval, which
        Kafka requires to be below the session timeout, bounds it."""
        m = self.m
        self._lease_sized = True
        limits = session_timeouts(conn, m.coordinator_node, m.group)
        if limits:
            m.lease.shorten(min(limits))
            longest = max(limits)
        else:
            log.debug(
                "group %s: session timeouts unreadable; leasing for less than the "
                "heartbeat interval",
                m.group,
            )
            self._lease_from_heartbeat = True
            longest = _DEFAULT_SESSION_MS
        # A member that died keeps its partitions for the broker's session timeout.
        m.extend_join_timeout(2 * longest / 1000 + 10)


def session_timeouts(conn: Connection, coordinator: int | None, group: str) -> list[int]:
    """The session timeouts (ms) readable from the coordinator's configs
    (``group.consumer.session.timeout.ms``, ``group.consumer.min.session.timeout.ms``; with
    ``coordinator`` known) and the group's own (``consumer.session.timeout.ms``)."""
    limits: list[int] = []
    if coordinator is not None:
        _code, values = conn.describe_configs(BROKER_RESOURCE, str(coordinator), _BROKER_KEYS)
        limits += [int(v) for v in values.values() if v.isdigit()]
    _code, values = conn.describe_configs(GROUP_RESOURCE, group, _GROUP_KEYS)
    limits += [int(v) for v in values.values() if v.isdigit()]
    return limits


def converged(g: DescribedGroup, member_id: str, owned: frozenset[tuple[str, int]]) -> bool:
    """Whether the group's targets are current (assignment epoch = group epoch) and member
    ``member_id``'s target, its assignment and the partitions it writes (``owned``) are the
    same."""
    me = g.members.get(member_id)
    return (
        me is not None and g.assignment_epoch == g.group_epoch and me.target == me.assigned == owned
    )


def check_members(g: DescribedGroup, member_id: str, group: str, cluster: str) -> None:
    """Refuse to share the group with anything but partsync processes: every member but
    ``member_id`` must use the client id ``MEMBER_CLIENT_ID``."""
    for member in g.members.values():
        if member.member_id != member_id and member.client_id != MEMBER_CLIENT_ID:
            raise GroupError(
                f"group {group!r} has a member that is not a partsync process (client id "
                f"{member.client_id!r}, topics {list(member.subscribed)}); partsync does not "
                "take partitions from a consumer group's consumers: name another --group",
                cluster=cluster,
            )
