"""Which version of each API partsync speaks with a broker: the versions it prefers, clamped to
what the broker's ApiVersions answer offers. Pure data and a pure function: the exchange itself is
``BrokerConnection``'s."""

from collections.abc import Mapping
from typing import Any

from kafka.protocol.admin.acl import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from kafka.protocol.admin.cluster import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from kafka.protocol.admin.configs import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from partsync._kafka.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

__all__ = ["PREFERRED", "REQUIRED", "choose_versions"]

# (request, response, lowest, highest) version partsync speaks, clamped to what each broker
# offers. The ranges are ones Apache Kafka 2.5 through 4.x accept (4.0 removed the oldest,
# KIP-896); InitProducerId starts at 3 in practice because Tansu rejects v0-2.
PREFERRED: dict[str, tuple[Any, Any, int, int]] = {
    # v10+ names each topic's id, which tells a topic deleted and created again from the old one.
    "Metadata": (MetadataRequest, MetadataResponse, 4, 12),
    "Fetch": (FetchRequest, FetchResponse, 4, 11),
    "Produce": (ProduceRequest, ProduceResponse, 3, 8),
    "ListOffsets": (ListOffsetsRequest, ListOffsetsResponse, 1, 5),
    "InitProducerId": (InitProducerIdRequest, InitProducerIdResponse, 0, 4),
    # Replaying a source's transactions (``--transactions replay``). Below AddPartitionsToTxn v4
    # and EndTxn v5 (and Produce v12) a Kafka 4 coordinator runs transactions as Kafka 3 does
    # (transaction version 1): partitions are added explicitly, the epoch stays across commits.
    "AddPartitionsToTxn": (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
    "EndTxn": (EndTxnRequest, EndTxnResponse, 0, 4),
    # A replay's transactions a run left open, resumed rather than aborted (KIP-664). Only
    # asked of a broker that offers all three of KIP-664's APIs (``Cluster
    # .can_resume_transactions``): ListTransactions is never sent, its offer is the sign.
    "DescribeProducers": (DescribeProducersRequest, DescribeProducersResponse, 0, 0),
    "DescribeTransactions": (DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0),
    "ListTransactions": (ListTransactionsRequest, ListTransactionsResponse, 0, 0),
    "CreateTopics": (CreateTopicsRequest, CreateTopicsResponse, 2, 4),
    "DescribeConfigs": (DescribeConfigsRequest, DescribeConfigsResponse, 1, 2),
    # A mirror topic's configs following its source's (``--sync-configs``).
    "IncrementalAlterConfigs": (
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
        0,
        1,
    ),
    # Growing a local topic when its sources gained partitions.
    "CreatePartitions": (CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
    # Moving the local log start when a mirror starts at its source's log start (Tansu has none).
    "DeleteRecords": (DeleteRecordsRequest, DeleteRecordsResponse, 0, 2),
    # ``partsync failback``: a diverged old primary's topic, deleted to be created again (no
    # client can cut a log's tail). v1-5 name topics (v6 adds ids).
    "DeleteTopics": (DeleteTopicsRequest, DeleteTopicsResponse, 1, 5),
    # ``failback --dry-run``: the bytes a topic created again copies again.
    "DescribeLogDirs": (DescribeLogDirsRequest, DescribeLogDirsResponse, 1, 4),
    # Group membership on the LOCAL cluster only (partsync never joins a source's groups).
    # JoinGroup >= 4 answers a new member MEMBER_ID_REQUIRED first; both paths are handled.
    "FindCoordinator": (FindCoordinatorRequest, FindCoordinatorResponse, 1, 6),
    "JoinGroup": (JoinGroupRequest, JoinGroupResponse, 2, 9),
    "SyncGroup": (SyncGroupRequest, SyncGroupResponse, 1, 5),
    "Heartbeat": (HeartbeatRequest, HeartbeatResponse, 1, 4),
    "LeaveGroup": (LeaveGroupRequest, LeaveGroupResponse, 1, 5),
    # KIP-848: no first-join delay, and a partition moves only after its owner released it.
    "ConsumerGroupHeartbeat": (ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0, 0),
    "ConsumerGroupDescribe": (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 0, 0),
    # Copying a consumer group's committed offsets (``partsync offsets``).
    "OffsetFetch": (OffsetFetchRequest, OffsetFetchResponse, 1, 7),
    "OffsetCommit": (OffsetCommitRequest, OffsetCommitResponse, 2, 8),
    "DescribeGroups": (DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
    # Whether a group exists at all (``partsync offsets``: a mistyped group is an error).
    "ListGroups": (ListGroupsRequest, ListGroupsResponse, 0, 4),
    # ``partsync check`` only: what this client may do (KIP-430), and the ACLs where permitted.
    "DescribeCluster": (DescribeClusterRequest, DescribeClusterResponse, 0, 1),
    "DescribeAcls": (DescribeAclsRequest, DescribeAclsResponse, 1, 3),
    # --sync-acls: copying the sources' ACLs onto the mirrors (KIP-290 pattern types: v1+).
    "CreateAcls": (CreateAclsRequest, CreateAclsResponse, 1, 3),
    "DeleteAcls": (DeleteAclsRequest, DeleteAclsResponse, 1, 3),
    "SaslHandshake": (SaslHandshakeRequest, SaslHandshakeResponse, 1, 1),
    "SaslAuthenticate": (SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 1),
}

# Without these partsync cannot copy at all (record batch v2, Kafka >= 0.11).
REQUIRED = ("Metadata", "Fetch", "Produce", "ListOffsets")


def choose_versions(offered: Mapping[int, tuple[int, int]]) -> dict[str, int]:
    """The newest version of each API in ``PREFERRED`` that both sides speak, given the broker's
    (min, max) by API key; an API with no such version is left out."""
    chosen: dict[str, int] = {}
    for api, (req_cls, _resp, lo, hi) in PREFERRED.items():
        rng = offered.get(req_cls.API_KEY)
        if rng is None:
            continue
        v = min(hi, rng[1])
        if v >= max(lo, rng[0]):
            chosen[api] = v
    return chosen
