"""A consumer group's committed offsets, read and written as a standalone client (``partsync
offsets``, consumer group failover), and what its coordinator says of the group (a mixin of
``Connection``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin.groups import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest

from partsync._kafka.codes import ErrorCode

if TYPE_CHECKING:
    from partsync._kafka.group_requests import DescribedGroup

__all__ = ["CommittedOffset", "GroupOffsetRequests"]


@dataclass(frozen=True)
class CommittedOffset:
    """A group's committed offset for one partition (offset -1: none)."""

    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    error_code: int


class GroupOffsetRequests:
    """DescribeGroups, ListGroups, OffsetFetch and OffsetCommit over ``call`` (from
    ``BrokerConnection``); a KIP-848 group is described by ``GroupRequests``."""

    if TYPE_CHECKING:

        def call(self, api: str, request: Any) -> Any: ...

        def supports(self, api: str) -> bool: ...

        def consumer_group_describe(self, group: str) -> DescribedGroup: ...

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
