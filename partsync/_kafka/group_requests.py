"""Group membership and coordinator requests (the LOCAL cluster only; partsync never joins a
source's groups)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

from partsync._kafka.codes import ErrorCode
from partsync._kafka.connection import GROUP_KEY
from partsync._kafka.messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest

__all__ = [
    "BrokerInfo",
    "DescribedGroup",
    "DescribedMember",
    "GroupRequests",
    "HeartbeatResult",
    "JoinResult",
]


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class JoinResult:
    error_code: int
    generation: int
    member_id: str
    leader: str
    protocol: str | None
    # (member id, metadata) of every member; only the leader gets them.
    members: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class HeartbeatResult:
    """A ConsumerGroupHeartbeat answer. ``assignment`` is None when unchanged since the last
    heartbeat, else every partition the member may use now, by topic id."""

    error_code: int
    error_message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: dict[uuid.UUID, tuple[int, ...]] | None


@dataclass(frozen=True)
class DescribedMember:
    """One member of a KIP-848 group: what it owns now and what the coordinator targets for it,
    as (topic name, partition) pairs."""

    member_id: str
    assigned: frozenset[tuple[str, int]]
    target: frozenset[tuple[str, int]]
    client_id: str = ""
    subscribed: tuple[str, ...] = ()


@dataclass(frozen=True)
class DescribedGroup:
    """A KIP-848 group: ``assignment_epoch`` below ``group_epoch`` means the targets are stale
    (the coordinator recomputes them at a member's next heartbeat)."""

    error_code: int
    group_epoch: int
    assignment_epoch: int
    members: dict[str, DescribedMember]
    state: str = ""


class GroupRequests:
    """FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup and KIP-848's
    ConsumerGroupHeartbeat and ConsumerGroupDescribe over ``call`` (a mixin of ``Connection``;
    ``call`` and ``version`` come from ``BrokerConnection``). A group's committed offsets are
    ``GroupOffsetRequests``'."""

    if TYPE_CHECKING:

        def call(self, api: str, request: Any) -> Any: ...

        def version(self, api: str) -> int: ...

    def find_coordinator(
        self, key: str, key_type: int = GROUP_KEY
    ) -> tuple[int, BrokerInfo | None]:
        """(error code, coordinator) for a group (``GROUP_KEY``) or transactional id (``TXN_KEY``)."""
        return self.find_coordinators([key], key_type)[key]

    def find_coordinators(
        self, keys: list[str], key_type: int = GROUP_KEY
    ) -> dict[str, tuple[int, BrokerInfo | None]]:
        """``find_coordinator`` for several keys: one request where the broker takes a batch
        (FindCoordinator v4+, KIP-699), else one request per key."""
        out: dict[str, tuple[int, BrokerInfo | None]] = {}
        if self.version("FindCoordinator") >= 4:
            resp = self.call(
                "FindCoordinator", FindCoordinatorRequest(key_type=key_type, coordinator_keys=keys)
            )
            for c in resp.coordinators:
                found = BrokerInfo(c.node_id, c.host, c.port) if not c.error_code else None
                # One key asked: its answer, whatever key the broker echoes.
                out[keys[0] if len(keys) == 1 else c.key] = (c.error_code, found)
            for k in keys:  # a key left out of the answer: a coordinator not available
                out.setdefault(k, (ErrorCode.COORDINATOR_NOT_AVAILABLE, None))
            return out
        for k in keys:
            resp = self.call("FindCoordinator", FindCoordinatorRequest(key=k, key_type=key_type))
            code, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
            out[k] = (code, BrokerInfo(node, host, port) if not code else None)
        return out

    def join_group(
        self,
        group: str,
        member_id: str,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinResult:
        P = JoinGroupRequest.JoinGroupRequestProtocol
        resp = self.call(
            "JoinGroup",
            JoinGroupRequest(
                group_id=group,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                member_id=member_id,
                group_instance_id=None,
                protocol_type=protocol_type,
                protocols=[P(name=n, metadata=m) for n, m in protocols],
                reason=None,
            ),
        )
        return JoinResult(
            resp.error_code,
            resp.generation_id,
            resp.member_id,
            resp.leader,
            resp.protocol_name or None,
            tuple((m.member_id, bytes(m.metadata)) for m in resp.members),
        )

    def consumer_group_heartbeat(
        self,
        group: str,
        member_id: str,
        member_epoch: int,
        *,
        rebalance_timeout_ms: int = -1,
        topics: list[str] | None = None,
        owned: dict[uuid.UUID, list[int]] | None = None,
    ) -> HeartbeatResult:
        """One KIP-848 heartbeat: epoch 0 joins, -1 leaves. ``topics`` and ``owned`` (the
        partitions this member still writes) are sent when given, else left unchanged (null)."""
        T = ConsumerGroupHeartbeatRequest.TopicPartitions
        resp = self.call(
            "ConsumerGroupHeartbeat",
            ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=member_id,
                member_epoch=member_epoch,
                rebalance_timeout_ms=rebalance_timeout_ms,
                subscribed_topic_names=topics,
                topic_partitions=None
                if owned is None
                else [T(topic_id=t, partitions=ps) for t, ps in sorted(owned.items())],
            ),
        )
        assignment = None
        if resp.assignment is not None:
            assignment = {
                tp.topic_id: tuple(sorted(tp.partitions)) for tp in resp.assignment.topic_partitions
            }
        return HeartbeatResult(
            int(resp.error_code),
            resp.error_message,
            resp.member_id,
            int(resp.member_epoch),
            int(resp.heartbeat_interval_ms),
            assignment,
        )

    def consumer_group_describe(self, group: str) -> DescribedGroup:
        """A KIP-848 group's epochs and members."""
        resp = self.call(
            "ConsumerGroupDescribe",
            ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
        )
        g = resp.groups[0]

        def pairs(a: Any) -> frozenset[tuple[str, int]]:
            return frozenset((t.topic_name, p) for t in a.topic_partitions for p in t.partitions)

        members = {
            m.member_id: DescribedMember(
                m.member_id,
                pairs(m.assignment),
                pairs(m.target_assignment),
                m.client_id,
                tuple(sorted(m.subscribed_topic_names)),
            )
            for m in g.members
        }
        return DescribedGroup(
            int(g.error_code), int(g.group_epoch), int(g.assignment_epoch), members, g.group_state
        )

    def sync_group(
        self,
        group: str,
        generation: int,
        member_id: str,
        protocol_type: str,
        protocol: str,
        assignments: dict[str, bytes],
    ) -> tuple[int, bytes]:
        A = SyncGroupRequest.SyncGroupRequestAssignment
        resp = self.call(
            "SyncGroup",
            SyncGroupRequest(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=None,
                protocol_type=protocol_type,
                protocol_name=protocol,
                assignments=[A(member_id=m, assignment=a) for m, a in assignments.items()],
            ),
        )
        return resp.error_code, bytes(resp.assignment or b"")

    def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        resp = self.call(
            "Heartbeat",
            HeartbeatRequest(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=None,
            ),
        )
        return int(resp.error_code)

    def leave_group(self, group: str, member_id: str) -> int:
        if self.version("LeaveGroup") >= 3:
            M = LeaveGroupRequest.MemberIdentity
            req = LeaveGroupRequest(
                group_id=group,
                members=[M(member_id=member_id, group_instance_id=None, reason=None)],
            )
        else:
            req = LeaveGroupRequest(group_id=group, member_id=member_id)
        return int(self.call("LeaveGroup", req).error_code)
