"""A cluster reads the metadata of the topics it works on, not of every topic it holds."""

from __future__ import annotations

import threading
import time

from partsync._kafka import BrokerInfo, Metadata
from partsync.config import ClusterRef
from partsync.io.cluster import Cluster
from tests.support.scripted_broker import ScriptedBroker


def _cluster(broker: ScriptedBroker) -> Cluster:
    c = Cluster(ClusterRef("local", (("127.0.0.1", 9),)))  # never connects
    c.conns.bootstrap_call = lambda fn: fn(broker)  # type: ignore[method-assign,assignment]
    return c


def test_metadata_is_read_for_the_watched_topics_only() -> None:
    broker = ScriptedBroker(topics={"a": 2, "b": 3, "other": 100})
    c = _cluster(broker)
    assert c.metadata().brokers  # brokers only: no topic asked about yet
    c.watch(["a", "b"])
    info = c.topic("a")
    assert info is not None and info.partitions == 2
    info_b = c.topic("b")
    assert info_b is not None and info_b.partitions == 3
    assert broker.metadata_requests == [[], ["a", "b"]]  # one read for both watched topics
    c.topic("a", refresh=True)
    assert broker.metadata_requests[-1] == ["a", "b"]


def test_a_topic_asked_about_first_is_read_then_kept() -> None:
    broker = ScriptedBroker(topics={"a": 2, "other": 100})
    c = _cluster(broker)
    assert c.topic("missing") is None
    info = c.topic("a")
    assert info is not None and info.partitions == 2
    assert c.topic("missing") is None and c.topic("a") is not None
    assert broker.metadata_requests == [["missing"], ["a", "missing"]]


def test_a_broker_that_leaves_unknown_topics_out_still_reads_as_missing() -> None:
    broker = ScriptedBroker(topics={"a": 2}, omit_unknown=True)
    c = _cluster(broker)
    c.watch(["a", "gone"])
    assert c.topic("gone") is None
    assert c.topic("a") is not None
    assert c.topic("gone") is None
    assert broker.metadata_requests == [["a", "gone"]]  # asked for and left out: not asked again


def test_listing_reads_every_topic_and_leaves_the_watched_metadata_alone() -> None:
    broker = ScriptedBroker(topics={"a": 2, "b": 1})
    c = _cluster(broker)
    c.watch(["a"])
    assert c.topic("a") is not None
    assert sorted(c.list_topics()) == ["a", "b"]
    assert c.topic("a") is not None
    assert broker.metadata_requests == [["a"], None]


def test_a_read_begun_before_a_topic_was_added_does_not_hide_it() -> None:
    broker = ScriptedBroker(topics={"a": 2, "b": 3})
    c = _cluster(broker)
    c.watch(["a"])
    broker.in_call, broker.release = threading.Event(), threading.Event()
    slow = threading.Thread(target=c.metadata, kwargs={"refresh": True})
    slow.start()
    assert broker.in_call.wait(5)  # a read of ["a"] is under way
    broker.in_call = None
    got: list[object] = []
    asker = threading.Thread(target=lambda: got.append(c.topic("b")))
    asker.start()
    broker.release.set()
    slow.join(5)
    asker.join(5)
    info = got[0]
    assert info is not None and getattr(info, "partitions", None) == 3
    assert broker.metadata_requests[0] == ["a"] and broker.metadata_requests[-1] == ["a", "b"]


def test_refreshes_asked_for_during_a_read_share_the_next_one() -> None:
    broker = ScriptedBroker(topics={"a": 2})
    c = _cluster(broker)
    c.watch(["a"])
    c.metadata()
    broker.in_call, broker.release = threading.Event(), threading.Event()
    first = threading.Thread(target=c.metadata, kwargs={"refresh": True})
    first.start()
    assert broker.in_call.wait(5)
    broker.in_call = None  # the next reads do not stop
    # Ten more refreshes asked for while the first is under way: one read after it serves all
    # (the first began before they asked, so it may lack what they need).
    waiting = [threading.Thread(target=c.metadata, kwargs={"refresh": True}) for _ in range(10)]
    for t in waiting:
        t.start()
    time.sleep(0.2)
    broker.release.set()
    for t in [first, *waiting]:
        t.join(5)
    assert not any(t.is_alive() for t in [first, *waiting])
    assert (
        3 <= len(broker.metadata_requests) <= 4
    )  # the first, the one after it (a late asker: one more)


def test_a_broker_connection_is_made_while_metadata_is_read_elsewhere() -> None:
    """A metadata read may take the connection lock (to retire an expiring connection): the
    broker connection's lookup of the broker's address must not hold that lock while it waits
    for the read."""
    broker = ScriptedBroker(topics={"a": 2})
    c = _cluster(broker)
    c.conns.connect = lambda host, port: object()  # type: ignore[method-assign,assignment,return-value]
    broker.in_call, broker.release = threading.Event(), threading.Event()
    taken = threading.Event()

    def metadata(topics: list[str] | None) -> Metadata:
        broker.metadata_requests.append(topics)
        taken.wait(5)
        time.sleep(0.2)  # broker_conn is waiting for this read by now
        with c.conns._lock:  # as _bootstrap_conn's _retire does
            pass
        return Metadata({1: BrokerInfo(1, "127.0.0.1", 9)}, {})

    broker.metadata = metadata  # type: ignore[method-assign]
    reader = threading.Thread(target=c.metadata, kwargs={"refresh": True})
    reader.start()

    def connect() -> None:
        taken.set()
        c.broker_conn(1)

    conn = threading.Thread(target=connect)
    conn.start()
    reader.join(5)
    conn.join(5)
    assert not reader.is_alive() and not conn.is_alive()
