"""The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) for ``GroupMember``:
every broker speaks it. Rebalances are eager: on a rebalance a member first stops writing every
partition it owns (after its in-flight appends are confirmed), then rejoins; the leader member
computes the assignment (``plan.assign``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from partsync._kafka import COORDINATOR_RETRY_CODES, ErrorCode, error_name
from partsync.errors import GroupError
from partsync.io.cluster import Cluster
from partsync.io.group_session import Member
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

__all__ = ["ClassicSession", "leader_assignments"]

log = logging.getLogger(__name__)

_MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED
_UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
_ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
_REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS


class ClassicSession:
    name = "classic"

    def __init__(self, member: Member) -> None:
        self.m = member

    def run(self) -> None:
        """Join, then heartbeat until the member must rejoin (or stops)."""
        self._join_and_sync()
        self._heartbeat_until_rejoin()

    def _join_and_sync(self) -> None:
        m = self.m
        m.joined.clear()
        started = time.monotonic()
        while not m.stopping.is_set():
            m.check_join_timeout(started)
            conn = m.coordinator()
            sent = time.monotonic()
            res = conn.join_group(
                m.group,
                m.member_id,
                PROTOCOL_TYPE,
                [(PROTOCOL, encode_subscription(m.subscription))],
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
            )
            if res.error_code == _MEMBER_ID_REQUIRED:
                m.member_id = res.member_id
                continue
            if res.error_code == _UNKNOWN_MEMBER_ID:
                m.member_id = ""
                continue
            if res.error_code == _REBALANCE_IN_PROGRESS:
                continue
            if res.error_code in COORDINATOR_RETRY_CODES:
                m.close_conn()
                m.stopping.wait(0.2)
                continue
            if res.error_code:
                raise m.fatal(res.error_code, "joining")
            m.member_id = res.member_id
            log.debug(
                "group %s: joined generation %d as %s, leader %s, members %s",
                m.group,
                res.generation,
                res.member_id,
                res.leader,
                [mid for mid, _ in res.members],
            )
            assignments: dict[str, bytes] = {}
            if res.leader == res.member_id:
                assignments = leader_assignments(m.local, m.group, res.members)
            code, data = conn.sync_group(
                m.group, res.generation, m.member_id, PROTOCOL_TYPE, PROTOCOL, assignments
            )
            if code == _UNKNOWN_MEMBER_ID:
                m.member_id = ""
                continue
            if code in (_REBALANCE_IN_PROGRESS, _ILLEGAL_GENERATION):
                continue
            if code in COORDINATOR_RETRY_CODES:
                m.close_conn()
                continue
            if code:
                raise m.fatal(code, "syncing")
            parts = decode_assignment(data)
            m.generation = res.generation
            if not m.lease.grant(parts, sent):
                log.warning(
                    "group %s: the assignment came after the lease it gives ran out; rejoining",
                    m.group,
                )
                continue
            m.rebalances += 1
            log.info(
                "group %s generation %d: member %s owns %s",
                m.group,
                res.generation,
                m.member_id,
                parts,
            )
            m.listener.assigned(parts, res.generation)
            m.joined.set()
            return

    def _heartbeat_until_rejoin(self) -> None:
        m = self.m
        # The first heartbeat goes at once: the lease a join grants counts from the JoinGroup
        # request (the coordinator may have held it for group.initial.rebalance.delay.ms), so
        # little of it may be left; a heartbeat renews it from its own sending.
        wait = 0.0
        while not m.stopping.wait(wait):
            wait = m.heartbeat_interval
            if m.rejoin.is_set():
                m.rejoin.clear()
                log.info("group %s: the job's topics grew; rejoining", m.group)
                m.joined.clear()
                m.lease.revoke_all(wait=True)
                return
            if m.lease.lost.is_set():
                m.lease.revoke_all(wait=True)
                m.lease.lost.clear()
                return
            conn = m.coordinator()
            sent = time.monotonic()
            code = conn.heartbeat(m.group, m.generation, m.member_id)
            if not code:
                m.lease.renew(sent)
                continue
            if code in COORDINATOR_RETRY_CODES:
                m.close_conn()
                continue
            if code in (_REBALANCE_IN_PROGRESS, _ILLEGAL_GENERATION, _UNKNOWN_MEMBER_ID):
                log.info("group %s: %s; stopping writes and rejoining", m.group, error_name(code))
                if code == _UNKNOWN_MEMBER_ID:
                    m.member_id = ""
                m.joined.clear()
                m.lease.revoke_all(wait=True)
                return
            raise m.fatal(code, "heartbeat")

    def leave(self) -> None:
        m = self.m
        code = m.coordinator().leave_group(m.group, m.member_id)
        if code and code != _UNKNOWN_MEMBER_ID:
            log.warning("group %s: leaving: %s", m.group, error_name(code))


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
