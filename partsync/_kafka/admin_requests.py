"""Topic administration requests: CreateTopics, CreatePartitions, DeleteRecords, DeleteTopics,
DescribeConfigs and IncrementalAlterConfigs (a mixin of ``Connection``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin.cluster import DescribeLogDirsRequest
from kafka.protocol.admin.configs import DescribeConfigsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
)

from partsync._kafka.codes import raise_for_code

__all__ = ["AdminRequests"]


TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
_SET = 0  # IncrementalAlterConfigs' operation: set the value
GROUP_RESOURCE = 32
_DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' config source of a topic's own setting


class AdminRequests:
    """CreateTopics and DescribeConfigs over ``call`` (from ``BrokerConnection``)."""

    cluster: str

    if TYPE_CHECKING:

        def call(self, api: str, request: Any) -> Any: ...

    def create_topic(
        self,
        topic: str,
        partitions: int,
        replication: int,
        configs: dict[str, str],
        timeout_ms: int = 30_000,
    ) -> None:
        T = CreateTopicsRequest.CreatableTopic
        req = CreateTopicsRequest(
            topics=[
                T(
                    name=topic,
                    num_partitions=partitions,
                    replication_factor=replication,
                    assignments=[],
                    configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
                )
            ],
            timeout_ms=timeout_ms,
            validate_only=False,
        )
        resp = self.call("CreateTopics", req)
        for t in resp.topics:
            if t.error_code:
                msg = getattr(t, "error_message", None)
                raise_for_code(
                    t.error_code,
                    f"creating topic ({msg})" if msg else "creating topic",
                    cluster=self.cluster,
                    topic=topic,
                )

    def create_partitions(
        self, topic: str, count: int, timeout_ms: int = 30_000
    ) -> tuple[int, str | None]:
        """Grow ``topic`` to ``count`` partitions: returns the error code (0 on success;
        INVALID_PARTITIONS when it already has that many, e.g. another process grew it) and
        the broker's message."""
        T = CreatePartitionsRequest.CreatePartitionsTopic
        req = CreatePartitionsRequest(
            topics=[T(name=topic, count=count, assignments=None)],
            timeout_ms=timeout_ms,
            validate_only=False,
        )
        resp = self.call("CreatePartitions", req)
        for r in resp.results:
            if r.name == topic:
                return int(r.error_code), r.error_message
        return -1, "no result for the topic"

    def delete_records(
        self, topic: str, partition: int, before: int, timeout_ms: int = 30_000
    ) -> tuple[int, int]:
        """Move a partition's log start to ``before`` (DeleteRecords, to the leader): returns
        (error code, the new low watermark)."""
        T = DeleteRecordsRequest.DeleteRecordsTopic
        req = DeleteRecordsRequest(
            topics=[
                T(
                    name=topic,
                    partitions=[T.DeleteRecordsPartition(partition_index=partition, offset=before)],
                )
            ],
            timeout_ms=timeout_ms,
        )
        resp = self.call("DeleteRecords", req)
        for t in resp.topics:
            for p in t.partitions:
                if p.partition_index == partition:
                    return int(p.error_code), int(p.low_watermark)
        return -1, -1

    def delete_topic(self, topic: str, timeout_ms: int = 30_000) -> tuple[int, str | None]:
        """Delete ``topic`` (DeleteTopics, to the controller through any broker): returns
        (error code, message)."""
        req = DeleteTopicsRequest(topic_names=[topic], timeout_ms=timeout_ms)
        resp = self.call("DeleteTopics", req)
        for r in resp.responses:
            if r.name == topic:
                return int(r.error_code), getattr(r, "error_message", None)
        return -1, "no result for the topic"

    def log_dir_sizes(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """The bytes this broker stores for each of ``partitions`` it holds a replica of
        (DescribeLogDirs; a replica moving between its log dirs counted once)."""
        T = DescribeLogDirsRequest.DescribableLogDirTopic
        resp = self.call(
            "DescribeLogDirs",
            DescribeLogDirsRequest(topics=[T(topic=topic, partitions=partitions)]),
        )
        out: dict[int, int] = {}
        for result in resp.results:
            if result.error_code:
                continue
            for t in result.topics:
                if t.name != topic:
                    continue
                for p in t.partitions:
                    if not p.is_future_key:
                        out[int(p.partition_index)] = int(p.partition_size)
        return out

    def _topic_config_entries(self, topic: str) -> list[Any]:
        R = DescribeConfigsRequest.DescribeConfigsResource
        req = DescribeConfigsRequest(
            resources=[
                R(resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None)
            ],
            include_synonyms=False,
        )
        out = []
        for r in self.call("DescribeConfigs", req).results:
            raise_for_code(r.error_code, "DescribeConfigs", cluster=self.cluster, topic=topic)
            out.extend(r.configs)
        return out

    def describe_topic_configs(self, topic: str) -> dict[str, str | None]:
        return {c.name: c.value for c in self._topic_config_entries(topic)}

    def describe_topic_overrides(self, topic: str) -> dict[str, str]:
        """The configs set on ``topic`` itself (DescribeConfigs v1+: config source
        DYNAMIC_TOPIC_CONFIG), not the broker's defaults it inherits."""
        return {
            c.name: c.value
            for c in self._topic_config_entries(topic)
            if getattr(c, "config_source", -1) == _DYNAMIC_TOPIC_CONFIG and c.value is not None
        }

    def describe_topics_configs(
        self, topics: list[str]
    ) -> dict[str, tuple[int, dict[str, str | None]]]:
        """(error code, every config) of each topic, in one DescribeConfigs request."""
        R = DescribeConfigsRequest.DescribeConfigsResource
        req = DescribeConfigsRequest(
            resources=[
                R(resource_type=TOPIC_RESOURCE, resource_name=t, configuration_keys=None)
                for t in topics
            ],
            include_synonyms=False,
        )
        out: dict[str, tuple[int, dict[str, str | None]]] = {}
        for r in self.call("DescribeConfigs", req).results:
            out[r.resource_name] = (int(r.error_code), {c.name: c.value for c in r.configs})
        return out

    def set_topic_configs(self, topic: str, configs: dict[str, str]) -> None:
        """Set ``configs`` on ``topic`` and leave its other configs as they are
        (IncrementalAlterConfigs, operation SET); raises the broker's error."""
        R = IncrementalAlterConfigsRequest.AlterConfigsResource
        req = IncrementalAlterConfigsRequest(
            resources=[
                R(
                    resource_type=TOPIC_RESOURCE,
                    resource_name=topic,
                    configs=[
                        R.AlterableConfig(name=k, config_operation=_SET, value=v)
                        for k, v in sorted(configs.items())
                    ],
                )
            ],
            validate_only=False,
        )
        resp = self.call("IncrementalAlterConfigs", req)
        for r in resp.responses:
            msg = f" ({r.error_message})" if r.error_message else ""
            raise_for_code(
                r.error_code, f"IncrementalAlterConfigs{msg}", cluster=self.cluster, topic=topic
            )

    def describe_configs(
        self, resource_type: int, name: str, keys: list[str]
    ) -> tuple[int, dict[str, str]]:
        """(error code, values) of a resource's configs (``BROKER_RESOURCE``: a broker's node id;
        ``GROUP_RESOURCE``: a group, Kafka 3.9+); an error (e.g. no DESCRIBE_CONFIGS, or a
        resource type the broker does not know) is returned, not raised: callers fall back to
        what they can assume."""
        R = DescribeConfigsRequest.DescribeConfigsResource
        req = DescribeConfigsRequest(
            resources=[R(resource_type=resource_type, resource_name=name, configuration_keys=keys)],
            include_synonyms=False,
        )
        r = self.call("DescribeConfigs", req).results[0]
        if r.error_code:
            return int(r.error_code), {}
        return 0, {c.name: c.value for c in r.configs if c.value is not None}

    # -- group membership (local cluster) ---------------------------------------------------
