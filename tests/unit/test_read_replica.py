"""KIP-392 bookkeeping of a source cluster (``Cluster.prefer_read_replica``): a leader's
"fetch from replica N" holds until that replica fails, after which the leader serves for a
while and its pointer is declined (the caller then reports it, rather than bounce between the
two)."""

from __future__ import annotations

from partsync.config import ClusterRef
from partsync.io.cluster import Cluster


def test_a_replica_that_failed_is_not_taken_again_for_a_while() -> None:
    c = Cluster(ClusterRef("src", (("127.0.0.1", 1),), client_rack="r1"))  # never connects
    assert c.forget_read_replica("t", 0) is False  # read from its leader: nothing to forget
    assert c.prefer_read_replica("t", 0, 2) is True
    assert c.prefer_read_replica("t", 0, 2) is True  # renewed, not declined
    assert c.forget_read_replica("t", 0) is True
    assert c.forget_read_replica("t", 0) is False
    assert c.prefer_read_replica("t", 0, 2) is False  # failed moments ago
    assert c.prefer_read_replica("t", 1, 3) is True  # other partitions are their own
