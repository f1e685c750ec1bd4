"""Transactional ids' coordinators looked up ahead (``Coordinators.prefetch_txn_coordinators``) are
only a routing hint: a coordinator that moved answers NOT_COORDINATOR, and fencing then looks
the id up afresh and asks the right broker. Connections are stand-ins that answer by node; the
wire path is covered by the integration tests (``test_kafka_rules``)."""

from __future__ import annotations

from typing import Any

import pytest

from partsync._kafka import BrokerInfo
from partsync._kafka.codes import ErrorCode
from partsync.config import ClusterRef
from partsync.errors import BrokerError, ClusterError
from partsync.io.cluster import Cluster

OLD, NEW = BrokerInfo(1, "h1", 1), BrokerInfo(2, "h2", 2)


class Node:
    """A broker that is (or is no longer) the coordinator of every id."""

    def __init__(self, coordinator: bool, down: bool = False) -> None:
        self.coordinator, self.down = coordinator, down
        self.asked: list[str] = []

    def try_init_producer_id(
        self, tid: str, timeout_ms: int = 60_000, current: Any = None
    ) -> tuple[int, int, int]:
        self.asked.append(tid)
        if self.down:
            raise ClusterError("connection refused")
        if not self.coordinator:
            return ErrorCode.NOT_COORDINATOR, -1, -1
        return 0, 42, 3


def _cluster(nodes: dict[int, Node], found: BrokerInfo) -> tuple[Cluster, list[str]]:
    c = Cluster(ClusterRef("local", (("127.0.0.1", 9),)))
    lookups: list[str] = []

    def find(key: str, key_type: int, *, timeout: float = 30.0) -> tuple[int, BrokerInfo]:
        lookups.append(key)
        return 0, found

    c.coordinators.find_coordinator = find  # type: ignore[method-assign]
    c.conns.broker_conn = lambda node_id, lane=0: nodes[node_id]  # type: ignore[method-assign,assignment,return-value]
    return c, lookups


def test_a_moved_coordinator_is_looked_up_again_and_the_right_one_fences() -> None:
    nodes = {1: Node(coordinator=False), 2: Node(coordinator=True)}
    c, lookups = _cluster(nodes, NEW)
    c.coordinators.txn_coordinators["partsync:t:0"] = OLD  # prefetched before the coordinator moved
    assert c.init_producer_id("partsync:t:0") == (42, 3)
    assert nodes[1].asked == ["partsync:t:0"] and nodes[2].asked == ["partsync:t:0"]
    assert lookups == ["partsync:t:0"]
    assert c.coordinators.txn_coordinators["partsync:t:0"] == NEW  # remembered for the next round


def test_a_known_coordinator_is_asked_without_a_lookup() -> None:
    nodes = {2: Node(coordinator=True)}
    c, lookups = _cluster(nodes, NEW)
    c.coordinators.txn_coordinators["partsync:t:1"] = NEW
    assert c.init_producer_id("partsync:t:1") == (42, 3)
    assert lookups == []


def test_a_remembered_coordinator_that_cannot_be_reached_is_looked_up_afresh() -> None:
    """E.g. a rolling restart moved the coordinator between the prefetch and the fence."""
    nodes = {1: Node(coordinator=True, down=True), 2: Node(coordinator=True)}
    c, lookups = _cluster(nodes, NEW)
    c.coordinators.txn_coordinators["partsync:t:2"] = OLD
    assert c.init_producer_id("partsync:t:2") == (42, 3)
    assert lookups == ["partsync:t:2"] and nodes[2].asked == ["partsync:t:2"]


def test_a_renewal_is_not_repeated_after_a_broken_connection() -> None:
    """The broker may have bumped the epoch before the connection broke: asking again with the
    old epoch would be refused as fenced. The error goes up (a retriable round failure), and the
    coordinator is forgotten for the next attempt."""
    nodes = {1: Node(coordinator=True, down=True), 2: Node(coordinator=True)}
    c, lookups = _cluster(nodes, NEW)
    c.coordinators.txn_coordinators["partsync:t:3"] = OLD
    with pytest.raises(ClusterError):
        c.init_producer_id("partsync:t:3", current=(42, 2))
    assert lookups == [] and nodes[2].asked == []
    assert "partsync:t:3" not in c.coordinators.txn_coordinators


_TXN_ID_DENIED = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED: not worth asking again


class Bootstrap:
    """A bootstrap broker whose transaction coordinators become available after ``busy``
    lookups (a cluster's first transactional ids create ``__transaction_state``)."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.requests: list[list[str]] = []

    def supports(self, api: str) -> bool:
        return True

    def version(self, api: str) -> int:
        return 4

    def find_coordinators(self, keys: list[str], key_type: int) -> dict[str, Any]:
        self.requests.append(list(keys))
        if len(self.requests) <= self.busy:
            return {k: (ErrorCode.COORDINATOR_NOT_AVAILABLE, None) for k in keys}
        # One id's coordinator keeps failing for good: it is left to its partition.
        return {k: (_TXN_ID_DENIED, None) if k == "denied" else (0, NEW) for k in keys}


def test_ids_whose_coordinator_is_not_available_yet_are_looked_up_again_together() -> None:
    c = Cluster(ClusterRef("local", (("127.0.0.1", 9),)))
    broker = Bootstrap(busy=2)
    c.conns.bootstrap_call = lambda fn: fn(broker)  # type: ignore[method-assign,assignment]
    ids = [f"partsync:t:{p}" for p in range(50)]
    c.prefetch_txn_coordinators([*ids, "denied"], wait=10.0)
    assert len(broker.requests) == 3  # each attempt one request for every id still missing
    assert all(len(r) == 51 for r in broker.requests)
    assert all(c.coordinators.txn_coordinators[i] == NEW for i in ids)
    assert "denied" not in c.coordinators.txn_coordinators


def test_looking_up_ahead_gives_up_after_its_wait() -> None:
    c = Cluster(ClusterRef("local", (("127.0.0.1", 9),)))
    broker = Bootstrap(busy=10**6)
    c.conns.bootstrap_call = lambda fn: fn(broker)  # type: ignore[method-assign,assignment]
    c.prefetch_txn_coordinators(["partsync:t:0", "partsync:t:1"], wait=0.5)
    assert 1 <= len(broker.requests) <= 4 and not c.coordinators.txn_coordinators


class Staggered(Bootstrap):
    """Odd-numbered ids' coordinators become available one lookup later than the others."""

    def find_coordinators(self, keys: list[str], key_type: int) -> dict[str, Any]:
        self.requests.append(list(keys))
        late = len(self.requests) == 1
        return {
            k: (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None)
            if late and int(k.rsplit(":", 1)[1]) % 2
            else (0, NEW)
            for k in keys
        }


def test_only_the_keys_still_missing_are_asked_again() -> None:
    c = Cluster(ClusterRef("local", (("127.0.0.1", 9),)))
    broker = Staggered(busy=0)
    c.conns.bootstrap_call = lambda fn: fn(broker)  # type: ignore[method-assign,assignment]
    ids = [f"partsync:t:{p}" for p in range(6)]
    found = c.coordinators.find_coordinators(ids, 1, timeout=10.0)
    assert broker.requests == [ids, ids[1::2]]
    assert found == {i: (0, NEW) for i in ids}
    # One key is the same lookup; a key that never becomes available returns its last error.
    assert c.find_coordinator("partsync:t:7", 1, timeout=10.0) == (0, NEW)
    stuck = Cluster(ClusterRef("local", (("127.0.0.1", 9),)))
    busy = Bootstrap(busy=10**6)
    stuck.conns.bootstrap_call = lambda fn: fn(busy)  # type: ignore[method-assign,assignment]
    unavailable = (ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
    assert stuck.find_coordinator("g", 0, timeout=0.3) == unavailable
    assert 1 < len(busy.requests) <= 4


class Pipelined(Node):
    """A coordinator that also takes many ids at once (``try_init_producer_ids``)."""

    def __init__(self, coordinator: bool, down: bool = False) -> None:
        super().__init__(coordinator, down)
        self.batches: list[list[str]] = []

    def try_init_producer_ids(self, tids: list[str]) -> list[Any]:
        self.batches.append(list(tids))
        return [self.try_init_producer_id(t) for t in tids]


def _lanes(nodes: dict[int, Pipelined]) -> tuple[Cluster, list[tuple[int, int]]]:
    c, _lookups = _cluster(nodes, NEW)  # type: ignore[arg-type]
    used: list[tuple[int, int]] = []

    def conn(node_id: int, lane: int = 0) -> Pipelined:
        used.append((node_id, lane))
        return nodes[node_id]

    c.conns.broker_conn = conn  # type: ignore[method-assign,assignment]
    return c, used


def test_many_fences_go_to_their_coordinators_at_once_over_several_connections() -> None:
    nodes = {1: Pipelined(coordinator=True), 2: Pipelined(coordinator=True)}
    c, used = _lanes(nodes)
    ids = [f"partsync:t:{p}" for p in range(10)]
    for n, tid in enumerate(ids):
        c.coordinators.txn_coordinators[tid] = OLD if n % 2 else NEW
    got = c.init_producer_ids(ids, lanes=3)
    assert got == dict.fromkeys(ids, (42, 3))
    assert sorted(nodes[2].asked) == sorted(ids[0::2]) and sorted(nodes[1].asked) == sorted(
        ids[1::2]
    )
    assert sorted(used) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]  # one ask per lane
    assert all(len(b) <= 2 for n in nodes.values() for b in n.batches)


def test_a_fence_that_fails_among_many_is_that_ids_error_and_forgets_its_coordinator() -> None:
    nodes = {1: Pipelined(coordinator=False), 2: Pipelined(coordinator=True, down=True)}
    c, _used = _lanes(nodes)
    c.coordinators.txn_coordinators.update({"moved": OLD, "down": NEW})
    got = c.init_producer_ids(["moved", "down", "unknown"], lanes=2)
    assert (
        isinstance(got["moved"], BrokerError)
        and got["moved"].error_code == ErrorCode.NOT_COORDINATOR
    )
    assert isinstance(got["down"], ClusterError)
    # Never looked up or asked here: the caller fences it the usual way, which looks it up.
    assert isinstance(got["unknown"], ClusterError) and "not known" in got["unknown"].reason
    assert "unknown" not in nodes[1].asked + nodes[2].asked
    assert (
        "moved" not in c.coordinators.txn_coordinators
        and "down" not in c.coordinators.txn_coordinators
    )


class Local:
    """A local cluster whose many-at-once fences fail for some partitions (``refuse``), and
    whose one-at-a-time fence (with retries) succeeds."""

    def __init__(self, refuse: set[str]) -> None:
        self.refuse = refuse
        self.one_by_one: list[str] = []

    def prefetch_txn_coordinators(self, ids: list[str]) -> None:
        pass

    def init_producer_ids(self, ids: list[str], *, lanes: int = 1) -> dict[str, Any]:
        return {t: ClusterError("refused") if t in self.refuse else (7, 1) for t in ids}

    def init_producer_id(self, tid: str | None, **kw: Any) -> tuple[int, int]:
        assert tid is not None
        self.one_by_one.append(tid)
        return 8, 2


def test_rounds_together_fence_again_one_by_one_where_fencing_together_failed() -> None:
    from concurrent.futures import Future

    from partsync.copy.producer import ProducerSession
    from partsync.run.together import _fence_all
    from tests.unit.test_together import _item, _task

    items = [_item(_task(p)) for p in range(5)]
    items[4].stop.set()  # revoked before its fence: never fenced
    fences: dict[Any, Future[ProducerSession | None]] = {it.key: Future() for it in items}
    local = Local(refuse={"partsync:t:1", "partsync:t:3"})
    _fence_all(items, local, fences)  # type: ignore[arg-type]
    got = {k[1]: f.result(0) for k, f in fences.items()}
    assert {p: (s.producer_id, s.epoch) for p, s in got.items() if s} == {
        0: (7, 1),
        1: (8, 2),
        2: (7, 1),
        3: (8, 2),
    }
    assert got[4] is None
    assert sorted(local.one_by_one) == ["partsync:t:1", "partsync:t:3"]
