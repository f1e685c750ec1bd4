"""KIP-392 bookkeeping of a source cluster (``Cluster`` with a ``client_rack``): where a
partition is fetched from, and whether those fetches carry the rack (``ReadRoutes``). A leader's "fetch from
replica N" holds; a replica that failed sends the partition to its leader WITHOUT the rack
for a while (with the rack, the leader would point at the same replica again at once); a
replica the metadata does not know is looked up once, then passed over."""

from __future__ import annotations

import pytest

from partsync._kafka import BrokerInfo, Metadata
from partsync.config import ClusterRef
from partsync.io.cluster import Cluster

LEADER = 1


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster(ClusterRef("src", (("127.0.0.1", 1),), client_rack="r2"))  # never connects
    brokers = {n: BrokerInfo(n, "127.0.0.1", 9000 + n) for n in (1, 2, 3)}
    refreshed = []

    def metadata(refresh: bool = False) -> Metadata:
        refreshed.append(refresh)
        return Metadata(brokers, {})

    monkeypatch.setattr(c.meta, "metadata", metadata)
    monkeypatch.setattr(c.meta, "leader", lambda topic, partition: LEADER)
    c.refreshed = refreshed  # type: ignore[attr-defined]
    return c


def test_the_leader_with_the_rack_until_it_points_elsewhere(cluster: Cluster) -> None:
    assert cluster.routes.route("t", 0) == (LEADER, True)
    cluster.prefer_read_replica("t", 0, 2)
    assert cluster.routes.route("t", 0) == (2, True)
    assert cluster.routes.route("t", 1) == (LEADER, True)  # each partition its own


def test_a_failed_replica_sends_the_partition_to_its_leader_without_the_rack(
    cluster: Cluster,
) -> None:
    cluster.prefer_read_replica("t", 0, 2)
    cluster.forget_read_replica("t", 0, 3)  # an answer from another replica, from before
    assert cluster.routes.route("t", 0) == (2, True)
    cluster.forget_read_replica("t", 0, 2)
    assert cluster.routes.route("t", 0) == (LEADER, False)
    cluster.prefer_read_replica("t", 0, 2)  # a late pointer from the leader: passed over
    assert cluster.routes.route("t", 0) == (LEADER, False)


def test_a_replica_the_metadata_does_not_know_is_looked_up_then_passed_over(
    cluster: Cluster,
) -> None:
    cluster.prefer_read_replica("t", 0, 7)
    assert True in cluster.refreshed  # type: ignore[attr-defined]
    assert cluster.routes.route("t", 0) == (LEADER, False)


def test_without_a_client_rack_the_leader_serves() -> None:
    c = Cluster(ClusterRef("src", (("127.0.0.1", 1),)))
    c.meta.leader = lambda topic, partition: LEADER  # type: ignore[method-assign]
    assert c.routes.route("t", 0) == (LEADER, False)
