"""Group membership and coordinator requests (the LOCAL cluster only; partsync never joins a
source's groups)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin.groups import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

from partsync._kafka.codes import ErrorCode
from partsync._kafka.connection import GROUP_KEY
from partsync._kafka.messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest

__all__ = [
    "BrokerInfo",
    "CommittedOffset",
    "DescribedGroup",
    "DescribedMember",
    "GroupRequests",
    "HeartbeatResult",
    "JoinResult",
]


@dataclass(frozen=True)
class CommittedOffset:
    """A group's committed offset for one partition (offset -1: none)."""

    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    error_code: int


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
    """FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup over ``call`` (a mixin of
    ``Connection``; ``call`` and ``version`` come from ``BrokerConnection``)."""

    if TYPE_CHECKING:

        def call(self, api: str, request: Any) -> Any: ...

        def version(self, api: str) -> int: ...

        def supports(self, api: str) -> bool: ...

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

    # -- committed offsets (consumer group failover) ----------------------------------------

    def describe_group(self, group: str) -> tuple[int, str, int]:
        """(error code, state, live members) of a group, from its coordinator: a classic group,
        or a KIP-848 consumer group (which DescribeGroups reports as Dead, without members)."""
        resp = self.call("DescribeGroups", DescribeGroupsRequest(groups=[group]))
        g = resp.groups[0]
        code, state, members = int(g.error_code), str(g.group_state), len(g.members)
        if not code and state.lower() == "dead" and self.supports("ConsumerGroupDescribe"):
            cg = self.consumer_group_describe(group)
            # Not a consumer group, or a broker that advertises the API without serving it
            # (Kafka 3.9 with the protocol off): the classic answer stands.
            if cg.error_code not in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
                return cg.error_code, cg.state, len(cg.members)
        return code, state, members

    def list_groups(self) -> tuple[int, set[str]]:
        """(error code, ids of the groups this broker coordinates), as ListGroups lists them."""
        resp = self.call("ListGroups", ListGroupsRequest(states_filter=[], types_filter=[]))
        return int(resp.error_code), {str(g.group_id) for g in resp.groups}

    def offset_fetch(
        self, group: str, topic: str, partitions: list[int]
    ) -> tuple[int, dict[int, CommittedOffset]]:
        """(group error code, committed offsets) for ``partitions`` of ``topic``."""
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        req = OffsetFetchRequest(
            group_id=group, topics=[T(name=topic, partition_indexes=partitions)]
        )
        resp = self.call("OffsetFetch", req)
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                out[p.partition_index] = CommittedOffset(
                    p.partition_index,
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.metadata,
                    int(p.error_code),
                )
        return int(getattr(resp, "error_code", 0) or 0), out

    def offset_commit(
        self, group: str, topic: str, offsets: dict[int, tuple[int, str | None]]
    ) -> dict[int, int]:
        """Commit ``{partition: (offset, metadata)}`` as a standalone client (no generation,
        no member: only an empty group takes it), with the leader epoch left unknown (-1).
        Returns each partition's error code."""
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        P = T.OffsetCommitRequestPartition
        req = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                T(
                    name=topic,
                    partitions=[
                        P(
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=-1,
                            committed_metadata=m or "",
                        )
                        for p, (o, m) in sorted(offsets.items())
                    ],
                )
            ],
        )
        resp = self.call("OffsetCommit", req)
        return {p.partition_index: int(p.error_code) for t in resp.topics for p in t.partitions}
