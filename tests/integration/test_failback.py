"""Failover and failback on real Kafka (issue 40): a mirror promoted while its primary is dead,
the old primary back with records the mirror never got, ``partsync failback`` exporting
exactly those and re-seeding the old primary from the new one (offset-identical), and a
planned switch back that exports nothing. Every partsync write goes through a strict proxy:
the old primary's (it becomes the local cluster of the reversed link) and the new one's."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.data import assert_partitions_identical, consume_all, create_topic, produce
from tests.conftest import CliResult, run_cli
from tests.integration.kafka_proxy import StrictProxy, strict_proxy  # noqa: F401  (fixture)
from tests.integration.sync_support import Clusters, ends, records, topic_partitions, write_config
from tests.integration.test_promote import _commit, _committed

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.kafka_only]

Run = Callable[..., CliResult]
# Fast refusal checks: the old primary's ends are watched this long.
WATCH = ("--watch-seconds", "0.5", "--settle-timeout", "5")


class Link:
    """The session's source ``a`` (the original primary) and ``local`` (its mirror), each
    reached by partsync through a strict proxy, under one config file."""

    def __init__(self, clusters: Clusters, proxy_a: StrictProxy, tmp_path: Path) -> None:
        self.clusters = clusters
        self.proxy_a = proxy_a
        self.config = write_config(
            tmp_path / "link.toml",
            {"a": clusters["a"], "local": clusters["local"]},
            addresses={"a": proxy_a.bootstrap, "local": clusters.proxy.bootstrap},
        )
        self.a = clusters.bootstrap("a")
        self.b = clusters.bootstrap("local")

    def run(self, *args: str) -> CliResult:
        return run_cli("--config", str(self.config), *args)

    def process(self, *args: str) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
        argv = [sys.executable, "-m", "partsync", "--config", str(self.config), *args]
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )


@pytest.fixture
def link(
    clusters: Clusters,
    strict_proxy: Callable[..., StrictProxy],  # noqa: F811
    tmp_path: Path,
) -> Any:
    proxy_a = strict_proxy(clusters.bootstrap("a"))
    yield Link(clusters, proxy_a, tmp_path)
    proxy_a.assert_clean(require_produce=False)


def _failback(link: Link, topic: str, *args: str) -> CliResult:
    return link.run(
        "failback", "--topic", topic, "--sources", "local", "--local", "a", "--json", *WATCH, *args
    )


def _diverged(link: Link, topic: str) -> dict[int, tuple[int, int]]:
    """A mirrored to B, B promoted while A answers, then A written on (records B never got)
    and B written by its own producers: per partition (divergence point, records only on A)."""
    create_topic(link.a, topic, 2)
    produce(link.a, topic, records(30, seed=1), partition=0)
    produce(link.a, topic, records(20, seed=2), partition=1)
    r = link.run("promote", "--topic", topic, "--sources", "a", "--create-missing", "--no-group")
    assert r.code == 0, r.stdout + r.stderr
    produce(link.a, topic, records(7, seed=3), partition=0)
    produce(link.a, topic, records(5, seed=4), partition=1)
    produce(link.b, topic, records(4, seed=5), partition=0)
    produce(link.b, topic, records(3, seed=6), partition=1)
    return {0: (30, 7), 1: (20, 5)}


def test_failback_dry_run_shows_the_export_and_writes_nothing(
    link: Link, topic: str, tmp_path: Path
) -> None:
    want = _diverged(link, topic)
    before = (ends(link.a, topic, 2), ends(link.b, topic, 2))
    out = tmp_path / "export"
    r = _failback(link, topic, "--dry-run", "--export-dir", str(out), "--export-topic", "{topic}.x")
    assert r.code == 0, r.stdout + r.stderr
    (t,) = r.json["topics"]
    assert t["action"] == "recreate" and t["done"] == "planned"
    got = {
        p["partition"]: (p["diverged_at"], p["exported"]["records"], p["discarded_offsets"])
        for p in t["partitions"]
    }
    assert got == {p: (at, n, at + n) for p, (at, n) in want.items()}
    assert all(p["copy_again_bytes"] for p in t["partitions"]), t["partitions"]
    assert r.json["exported_records"] == 12
    assert (ends(link.a, topic, 2), ends(link.b, topic, 2)) == before
    assert not out.exists()
    assert topic_partitions(link.b, f"{topic}.x") is None


def test_failback_refuses_while_a_consumer_uses_the_old_primary(link: Link, topic: str) -> None:
    from confluent_kafka import Consumer

    _diverged(link, topic)
    consumer: Any = Consumer(
        {
            "bootstrap.servers": link.a,
            "group.id": f"stray-{topic}",
            "log_level": 3,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the consumer was never assigned"
        consumer.poll(0.2)
    try:
        before = ends(link.a, topic, 2)
        r = _failback(link, topic, "--export-topic", "{topic}.x")
    finally:
        consumer.close()
    assert r.code == 1, r.stdout + r.stderr
    use = r.json["in_use"]
    assert use["in_use"] and use["groups"].get(f"stray-{topic}") == 1, use
    assert any("assign()" in x for x in use["not_visible"]), use
    assert ends(link.a, topic, 2) == before
    assert topic_partitions(link.b, f"{topic}.x") is None


def test_failback_refuses_records_it_has_nowhere_to_export(link: Link, topic: str) -> None:
    _diverged(link, topic)
    before = ends(link.a, topic, 2)
    r = _failback(link, topic)
    assert r.code == 2, r.stdout + r.stderr
    assert "--export-dir" in r.stdout + r.stderr
    assert ends(link.a, topic, 2) == before


def _txn_producer(bootstrap: str, tid: str) -> Any:
    from confluent_kafka import Producer

    producer: Any = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": tid, "log_level": 3}
    )
    producer.init_transactions(15)
    return producer


def _in_txn(producer: Any, topic: str, values: list[bytes], *, commit: bool | None) -> None:
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, key=b"k", value=v, partition=0)
    producer.flush(15)
    if commit is True:
        producer.commit_transaction(15)
    elif commit is False:
        producer.abort_transaction(15)


def test_the_export_marks_committed_and_aborted_transactions(
    link: Link, topic: str, tmp_path: Path
) -> None:
    """A's tail holds a committed and an aborted transaction and plain records: each data
    record is exported once, marked with its transaction's outcome (markers are lines of the
    files, not records of the export topic), and A ends identical to B."""
    create_topic(link.a, topic, 1)
    produce(link.a, topic, records(10, seed=1), partition=0)
    r = link.run("promote", "--topic", topic, "--sources", "a", "--create-missing", "--no-group")
    assert r.code == 0, r.stdout + r.stderr
    p = _txn_producer(link.a, f"t-{topic}")
    try:
        _in_txn(p, topic, [b"c1", b"c2"], commit=True)
        _in_txn(p, topic, [b"a1"], commit=False)
    finally:
        close = getattr(p, "close", None)  # confluent-kafka >= 2.12
        if close is not None:
            close()
    produce(link.a, topic, records(2, seed=2), partition=0)
    out = tmp_path / "x"
    r = _failback(link, topic, "--export-dir", str(out), "--export-topic", "{topic}.fb")
    assert r.code == 0, r.stdout + r.stderr
    (t,) = r.json["topics"]
    (part,) = t["partitions"]
    assert (t["action"], t["done"], part["diverged_at"]) == ("recreate", "mirrored", 10), t
    assert part["exported"]["transactions"] == {"aborted": 1, "committed": 2, "none": 2}
    assert part["exported"]["markers"] == 2
    docs = [json.loads(x) for x in (out / topic / "0.jsonl").read_text().splitlines()]
    got = [(d["offset"], d.get("transaction"), d.get("marker"), d.get("value")) for d in docs]
    assert got[:6] == [
        (10, "committed", None, "c1"),
        (11, "committed", None, "c2"),
        (12, None, "commit", None),
        (13, "aborted", None, "a1"),
        (14, None, "abort", None),
        (15, None, None, got[5][3]),
    ], got
    assert len(got) == 7
    exported = consume_all(link.b, f"{topic}.fb", 0, timeout=30)
    from partsync.wire.export import Origin

    origins = [Origin.of(list(x.headers or [])) for x in exported]
    assert [(o.offset, o.transaction) for o in origins if o] == [
        (10, "committed"),
        (11, "committed"),
        (13, "aborted"),
        (15, None),
        (16, None),
    ]
    assert_partitions_identical(link.b, link.a, topic, 1)


@pytest.mark.kafka_versions  # transactions: Kafka 4's coordinator (transaction version 2), 3.9's
def test_a_transaction_promote_aborted_that_the_old_primary_committed_is_exported(
    link: Link, topic: str, tmp_path: Path
) -> None:
    """A transaction open on A when B was promoted: B holds its data, aborted by promote. A
    commits it afterwards: the records differ only from the marker on, yet the committed data
    below it is exported too (its marker lies past the divergence point), marked committed."""
    create_topic(link.a, topic, 1)
    produce(link.a, topic, records(5, seed=1), partition=0)
    p = _txn_producer(link.a, f"straddle-{topic}")
    try:
        _in_txn(p, topic, [b"s1", b"s2", b"s3"], commit=None)
        r = link.run(
            "promote",
            "--topic",
            topic,
            "--sources",
            "a",
            "--create-missing",
            "--no-group",
            "--json",
        )
        assert r.code == 0, r.stdout + r.stderr
        assert r.json["promoted"][0]["partitions"][0]["aborted"] == 3
        p.commit_transaction(15)
    finally:
        close = getattr(p, "close", None)
        if close is not None:
            close()
    out = tmp_path / "x"
    r = _failback(link, topic, "--export-dir", str(out), "--export-topic", "{topic}.fb")
    assert r.code == 0, r.stdout + r.stderr
    (part,) = r.json["topics"][0]["partitions"]
    assert part["diverged_at"] == 8, part
    assert part["exported"]["straddling"] == 3 and part["exported"]["markers"] == 1, part
    assert part["exported"]["transactions"] == {"committed": 3}, part
    docs = [json.loads(x) for x in (out / topic / "0.jsonl").read_text().splitlines()]
    assert [(d["offset"], d.get("transaction"), d.get("marker")) for d in docs] == [
        (5, "committed", None),
        (6, "committed", None),
        (7, "committed", None),
        (8, None, "commit"),
    ]
    assert [(o, v) for o, v in _exported(link, f"{topic}.fb", 0)] == [
        (5, b"s1"),
        (6, b"s2"),
        (7, b"s3"),
    ]
    assert_partitions_identical(link.b, link.a, topic, 1)


def test_failback_refuses_while_producers_write_the_old_primary(link: Link, topic: str) -> None:
    """A producer still writing (its ends move while watched), and a transaction left open
    (the old primary's last stable offset below its end): both refused, named, nothing
    written."""
    _diverged(link, topic)
    stop = threading.Event()
    writer = threading.Thread(target=_load, args=(link.a, topic, stop), daemon=True)
    writer.start()
    try:
        time.sleep(0.5)
        r = _failback(link, topic, "--export-topic", "{topic}.x", "--watch-seconds", "2")
    finally:
        stop.set()
        writer.join(60)
    assert r.code == 1, r.stdout + r.stderr
    assert r.json["in_use"]["moved"], r.json["in_use"]

    p = _txn_producer(link.a, f"open-{topic}")
    try:
        _in_txn(p, topic, [b"o1"], commit=None)
        before = ends(link.a, topic, 2)
        r = _failback(link, topic, "--export-topic", "{topic}.x", "--settle-timeout", "1")
        assert r.code == 1, r.stdout + r.stderr
        use = r.json["in_use"]
        assert f"{topic}-0" in use["open_transactions"], use
        assert f"open-{topic}" in use["transactional_ids"], use
        assert ends(link.a, topic, 2) == before
    finally:
        p.abort_transaction(15)
    assert topic_partitions(link.b, f"{topic}.x") is None


def _kill_first(procs: list[Any]) -> None:
    procs[0].send_signal(signal.SIGKILL)


def _killed_at(link: Link, proxy: StrictProxy, api: str, topic: str, *args: str, **kw: Any) -> None:
    """Run failback, SIGKILLed from outside as its ``api`` request passes ``proxy``."""
    running: list[Any] = []
    proxy.on_request(api, 1, functools.partial(_kill_first, running), **kw)
    argv = ("failback", "--topic", topic, "--sources", "local", "--local", "a", *WATCH, *args)
    running.append(link.process(*argv))
    _out, err = running[0].communicate(timeout=180)
    assert proxy.hook_fired() and running[0].returncode == -signal.SIGKILL, (
        f"failback ended ({running[0].returncode}) before its {api}: {err[-3000:]}"
    )


def _load(bootstrap: str, topic: str, stop: threading.Event) -> None:
    seed = 100
    while not stop.is_set():
        produce(bootstrap, topic, records(20, seed=seed))
        seed += 1
        time.sleep(0.05)


def _mirrored(link: Link, topic: str) -> int:
    from partsync.errors import TopicError

    try:
        return sum(ends(link.b, topic, 2).values())
    except TopicError:  # not created yet
        return 0


def _wait(what: str, ok: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.2)


def _exported(link: Link, name: str, partition: int) -> list[tuple[int, bytes | None]]:
    """(origin offset, value) of each record a failback exported to ``name``."""
    from partsync.wire.export import Origin

    out = []
    for r in consume_all(link.b, name, partition, timeout=30):
        origin = Origin.of([(k, v) for k, v in (r.headers or [])])
        assert origin is not None, r
        out.append((origin.offset, r.value))
    return out


@pytest.mark.faults
@pytest.mark.kafka_versions  # group protocols, topic deletion, transactions: Kafka 3.9 and 4
def test_failover_failback_and_a_planned_switch_back_lose_nothing(
    link: Link, topic: str, tmp_path: Path
) -> None:
    clusters, a_broker = link.clusters, link.clusters["a"]
    create_topic(link.a, topic, 2)
    group = f"billing-{topic}"

    # A is mirrored to B under load; the follower copies the group's commits as it goes.
    follower = link.process(
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--create-missing",
        "--follow",
        "--no-group",
        "--sync-groups",
        group,
        "--sync-groups-interval",
        "0.5",
    )
    stop = threading.Event()
    load = threading.Thread(target=_load, args=(link.a, topic, stop), daemon=True)
    load.start()
    try:
        try:
            _wait("records mirrored under load", lambda: _mirrored(link, topic) > 200)
        finally:
            stop.set()
            load.join(60)
        _commit(link.a, group, topic, {0: 17, 1: 9})
        _wait(
            "the mirror and the group's commits caught up",
            lambda: (
                ends(link.b, topic, 2) == ends(link.a, topic, 2)
                and _committed(link.b, group, topic, 2) == {0: 17, 1: 9}
            ),
        )
    finally:
        follower.send_signal(signal.SIGTERM)
        _out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err[-3000:]
    mirrored = ends(link.b, topic, 2)

    # A takes records B never copies, and dies.
    produce(link.a, topic, records(11, seed=7), partition=0)
    produce(link.a, topic, records(6, seed=8), partition=1)
    only_on_a = {
        p: [(r.offset, r.value) for r in consume_all(link.a, topic, p, mirrored[p])] for p in (0, 1)
    }
    assert [len(v) for v in only_on_a.values()] == [11, 6]
    at_17 = consume_all(link.a, topic, 0, 17, 18)[0]
    a_broker.kill()
    try:
        # B is promoted; producers and consumers move to B.
        r = link.run("promote", "--topic", topic, "--sources", "a", "--no-group", "--json")
        assert r.code == 0, r.stdout + r.stderr
        points = {x["partition"]: x["local_end"] for x in r.json["promoted"][0]["partitions"]}
        assert points == mirrored
        assert _committed(link.b, group, topic, 2) == {0: 17, 1: 9}
        resumed = consume_all(link.b, topic, 0, 17, 18)[0]
        assert (resumed.offset, resumed.key, resumed.value) == (17, at_17.key, at_17.value)
        produce(link.b, topic, records(9, seed=9), partition=0)
        produce(link.b, topic, records(4, seed=10), partition=1)
    finally:
        a_broker.restart()

    # A is back: failback exports exactly A's unreplicated records, and re-seeds A from B. It
    # is killed at each of its steps and run again.
    out = tmp_path / "export"
    export = ("--export-dir", str(out), "--export-topic", "{topic}.failback")
    _killed_at(link, clusters.proxy, "Produce", topic, *export, answered=True)  # mid-export
    _killed_at(link, link.proxy_a, "DeleteTopics", topic, *export, dropped=True)
    _killed_at(link, link.proxy_a, "CreateTopics", topic, *export, dropped=True)
    assert topic_partitions(link.a, topic) is None  # deleted, not created again yet
    _killed_at(link, link.proxy_a, "Produce", topic, *export, answered=True)  # mid re-seed
    r = _failback(link, topic, *export)
    assert r.code == 0, r.stdout + r.stderr
    assert ends(link.a, topic, 2) == ends(link.b, topic, 2)
    assert_partitions_identical(link.b, link.a, topic, 2)
    for p in (0, 1):
        assert _exported(link, f"{topic}.failback", p) == only_on_a[p]
        lines = (out / topic / f"{p}.jsonl").read_text().splitlines()
        docs = [json.loads(x) for x in lines]
        assert [(d["offset"], d["transaction"]) for d in docs] == [
            (o, None) for o, _ in only_on_a[p]
        ]
        manifest = json.loads((out / topic / f"{p}.json").read_text())
        assert manifest["records"] == len(only_on_a[p])
        assert not list((out / topic).glob("*.tmp"))

    # A planned switch back to A: producers stopped, the group moved, nothing exported.
    _commit(link.b, group, topic, {0: 40, 1: 33})
    r = link.run(
        "promote",
        "--topic",
        topic,
        "--sources",
        "local",
        "--local",
        "a",
        "--no-group",
        "--planned",
        "--watch-seconds",
        "1",
        "--sync-groups",
        group,
        "--json",
    )
    assert r.code == 0, r.stdout + r.stderr
    assert r.json["promoted"][0]["at_risk"] == 0
    ends_b = ends(link.b, topic, 2)
    r = link.run(
        "failback", "--topic", topic, "--sources", "a", "--local", "local", "--json", *WATCH
    )
    assert r.code == 0, r.stdout + r.stderr
    (t,) = r.json["topics"]
    assert (t["action"], r.json["exported_records"]) == ("mirror", 0), t
    assert r.json["promotions_cleared"] == [topic]
    assert ends(link.b, topic, 2) == ends(link.a, topic, 2) == ends_b
    assert _committed(link.a, group, topic, 2) == {0: 40, 1: 33}
    for p, at in ((0, 40), (1, 33)):
        x, y = (
            consume_all(link.a, topic, p, at, at + 1)[0],
            consume_all(link.b, topic, p, at, at + 1)[0],
        )
        assert (x.offset, x.key, x.value) == (y.offset, y.key, y.value)
    # B mirrors A again: a sync from A into B is allowed and has nothing to do.
    r = link.run("sync", "--topic", topic, "--sources", "a", "--json")
    assert r.code == 0, r.stdout + r.stderr
