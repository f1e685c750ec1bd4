"""Follow mode and shared work through the LOCAL group, with real broker processes.

- two and three ``sync --follow --group`` processes split a topic's partitions; one is killed
  with SIGKILL, the others take its partitions over, and the local topic ends up
  offset-identical to the source (checked by an independent consumer); SIGTERM then stops the
  survivors cleanly (exit 0);
- the live ``/metrics`` endpoint serves the documented series with consistent values;
- two overlapping one-shot runs of one job split the work: no offset is written by both;
- a writer whose producer epoch was bumped by a newer owner stops writing at once.

The group's local cluster is a Tansu broker: noida's group coordinator never drops a member
that was killed while leading the group (every rejoin names the dead member leader again), so a
takeover can never complete there. Apache Kafka expires it after the session timeout.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from partsync._kafka import Connection
from partsync.copy.options import CopyOptions
from partsync.copy.partition import copy_partition
from partsync.copy.producer import open_producer
from partsync.demo.brokers import Broker, free_port
from partsync.demo.data import assert_partitions_identical, create_topic, make_records, produce
from partsync.errors import FencedError
from partsync.io.cluster import Cluster
from partsync.io.link_records import read_source_ends
from partsync.plan.comparator import plan_partition
from partsync.plan.results import Status
from tests.conftest import CliResult, is_real_kafka, kind_of, run_cli
from tests.integration.kafka_proxy import StrictProxy
from tests.integration.sync_support import (
    _ref,
    add_partitions,
    by_partition,
    check_report,
    delete_topic,
    ends,
    recreate_topic,
    set_topic_configs,
    topic_configs,
    topic_partitions,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

PARTITIONS = 6
SESSION_S = "6"  # Kafka's group.min.session.timeout.ms is 6 s


@pytest.fixture(scope="module")
def group_local(broker_mode: str, broker_factory: Callable[[str], Broker]) -> Broker:
    if kind_of(broker_mode, "extra") == "noida":
        pytest.skip("noida's group coordinator never drops a member killed while leading")
    return broker_factory("extra")


@pytest.fixture(scope="module")
def group_proxy(group_local: Broker) -> Iterator[StrictProxy]:
    """partsync reaches the group's local cluster through the strict proxy too."""
    with StrictProxy(group_local.bootstrap) as proxy:
        yield proxy


@pytest.fixture
def config(tmp_path: Path, source_a: Broker, group_local: Broker, group_proxy: StrictProxy) -> Path:
    group_proxy.reset()
    return write_config(
        tmp_path / "partsync.toml",
        {"a": source_a, "local": group_local},
        addresses={"local": group_proxy.bootstrap},
    )


@pytest.fixture(autouse=True)
def _kafka_rules_hold_for_the_group(request: pytest.FixtureRequest) -> Iterator[None]:
    """No follower sends an append behind an unanswered one, or breaks another append rule,
    even while it is killed, rebalanced or fenced."""
    yield
    if "config" in request.fixturenames:
        request.getfixturevalue("group_proxy").assert_clean(require_produce=False)


def _fill(broker: Broker, topic: str, n: int, seed: int, partitions: int = PARTITIONS) -> None:
    for p in range(partitions):
        produce(
            broker.bootstrap,
            topic,
            make_records(n, seed=seed * 100 + p, partition=p),
            compression="lz4",
            batch_size=4096,
        )


# -- follower processes -------------------------------------------------------------------


class Follower:
    def __init__(
        self,
        config: Path,
        topic: str,
        group: str,
        log: Path,
        *extra: str,
        module: str = "partsync",
        select: tuple[str, ...] | None = None,
        stdout: Path | None = None,
    ) -> None:
        """``select``: the topic options instead of ``--topic topic``; ``stdout``: where its
        standard output goes (with ``--json`` in ``extra``: the report at its stop)."""
        self.port = free_port()
        self.log = log
        argv = [
            sys.executable,
            "-m",
            module,
            "--config",
            str(config),
            "-v",
            "sync",
            *(("--topic", topic) if select is None else select),
            "--sources",
            "a",
            "--follow",
            "--group",
            group,
            "--session-timeout",
            SESSION_S,
            "--follow-wait-ms",
            "200",
            "--metrics-port",
            str(self.port),
            "--metrics-host",
            "127.0.0.1",
            *extra,
        ]
        env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
        self._err = log.open("w")
        self._out = stdout.open("w") if stdout is not None else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=self._err, env=env)

    def scrape(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            return parse_metrics(r.read().decode())

    def owned(self) -> set[int]:
        return {p for _t, p in self.owned_by_topic()}

    def owned_by_topic(self) -> set[tuple[str, int]]:
        try:
            m = self.scrape()
        except OSError:
            return set()
        return {
            (dict(lb)["topic"], int(dict(lb)["partition"]))
            for (name, lb), v in m.items()
            if name == "partsync_partition_owned" and v == 1
        }

    def stderr(self) -> str:
        if not self._err.closed:
            self._err.flush()
        return self.log.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._err.close()
            if not isinstance(self._out, int):
                self._out.close()


_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not Prometheus text format: {line!r}"
        labels = frozenset(_LABEL.findall(m.group("labels") or ""))
        out[(m.group("name"), labels)] = float(m.group("value"))
    return out


@pytest.fixture
def followers(tmp_path: Path) -> Iterator[list[Follower]]:
    started: list[Follower] = []
    yield started
    for f in started:
        if f.proc.poll() is None:
            f.stop(signal.SIGKILL)


def _wait(
    what: str, cond: Callable[[], bool], timeout: float, diag: Callable[[], str] = str
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{diag()}")


def _start_two(
    followers: list[Follower],
    config: Path,
    topic: str,
    tmp_path: Path,
    select: tuple[str, ...] | None = None,
) -> None:
    """Two followers of one job (group ``g-{topic}``), checking the topics every second."""
    for i in range(2):
        log = tmp_path / f"follower{i}.log"
        group = f"g-{topic}"
        followers.append(
            Follower(config, topic, group, log, "--topic-check-interval", "1", select=select)
        )


def _wait_mirrored(
    source: Broker, local: Broker, topic: str, n: int, what: str, diag: Callable[[], str]
) -> None:
    """Wait until the local ``topic`` has ``n`` partitions ending where the source's end now."""
    src_ends = ends(source, topic, n)
    _wait(
        f"{what} to be mirrored",
        lambda: topic_partitions(local.bootstrap, topic) == n and ends(local, topic, n) == src_ends,
        90,
        diag,
    )


def _split(fs: list[Follower], partitions: int = PARTITIONS) -> bool:
    """Every partition owned by exactly one of ``fs``, each of which owns some."""
    owned = [f.owned() for f in fs]
    flat = [p for o in owned for p in o]
    return all(owned) and sorted(flat) == list(range(partitions))


@pytest.mark.parametrize("n", [2, 3])
def test_followers_split_a_topic_and_take_over_after_kill_9(
    n: int,
    config: Path,
    source_a: Broker,
    group_local: Broker,
    topic: str,
    followers: list[Follower],
    tmp_path: Path,
) -> None:
    create_topic(source_a.bootstrap, topic, PARTITIONS)
    create_topic(group_local.bootstrap, topic, PARTITIONS)
    _fill(source_a, topic, 300, seed=1)
    group = f"g-{topic}"
    for i in range(n):
        followers.append(Follower(config, topic, group, tmp_path / f"follower{i}.log"))

    def diag() -> str:
        return "\n".join(
            f"--- follower {i} owns {f.owned()}:\n{f.stderr()[-3000:]}"
            for i, f in enumerate(followers)
        )

    _wait(f"{n} followers to split {PARTITIONS} partitions", lambda: _split(followers), 90, diag)
    src_ends = ends(source_a, topic, PARTITIONS)
    _wait(
        "the followers to catch up",
        lambda: ends(group_local, topic, PARTITIONS) == src_ends,
        60,
        diag,
    )

    # New data while everyone runs is tailed (no rerun needed).
    _fill(source_a, topic, 200, seed=2)
    src_ends = ends(source_a, topic, PARTITIONS)
    _wait(
        "the followers to tail new data",
        lambda: ends(group_local, topic, PARTITIONS) == src_ends,
        60,
        diag,
    )

    victim = followers[0]
    lost = victim.owned()
    assert victim.stop(signal.SIGKILL) == -signal.SIGKILL
    _fill(source_a, topic, 200, seed=3)  # lands while the victim's partitions have no owner
    survivors = followers[1:]
    _wait(
        "the survivors to take the killed follower's partitions",
        lambda: _split(survivors),
        90,
        diag,
    )
    assert lost <= set().union(*(f.owned() for f in survivors))
    src_ends = ends(source_a, topic, PARTITIONS)
    _wait(
        "the survivors to catch up",
        lambda: ends(group_local, topic, PARTITIONS) == src_ends,
        60,
        diag,
    )

    assert (
        assert_partitions_identical(source_a.bootstrap, group_local.bootstrap, topic, PARTITIONS)
        == 700 * PARTITIONS
    )

    # The metrics a survivor serves agree with what happened, once its rounds have ended (the
    # log ends above are the broker's; a round reports after verifying its appends).
    def settled() -> bool:
        m = survivors[0].scrape()
        return all(
            m.get(
                (
                    "partsync_partition_local_end_offset",
                    frozenset({("topic", topic), ("partition", str(p))}),
                )
            )
            == src_ends[p]
            for p in survivors[0].owned()
        )

    _wait("the survivor's metrics to show its rounds ended", settled, 30, diag)
    m = survivors[0].scrape()
    mine = survivors[0].owned()
    for p in mine:
        lp = frozenset({("topic", topic), ("partition", str(p))})
        assert m[("partsync_partition_lag_records", lp)] == 0
        assert m[("partsync_partition_local_end_offset", lp)] == src_ends[p]
        status = [
            dict(lb)["status"]
            for (name, lb), v in m.items()
            if name == "partsync_partition_status" and lp <= lb and v == 1
        ]
        assert status in (["in-sync"], ["synced"]), status
        assert m[("partsync_last_success_timestamp_seconds", lp)] > time.time() - 120
    names = {name for name, _ in m}
    for family in (
        "partsync_copied_bytes_total",
        "partsync_copied_batches_total",
        "partsync_appends_verified_total",
        "partsync_partition_lag_bytes",
        "partsync_group_generation",
        "partsync_group_rebalances_total",
    ):
        assert family in names, family
    copied = {
        dict(lb)["partition"]: v
        for (name, lb), v in m.items()
        if name == "partsync_copied_batches_total"
    }
    verified = {
        dict(lb)["partition"]: v
        for (name, lb), v in m.items()
        if name == "partsync_appends_verified_total" and v
    }
    assert copied == verified and sum(verified.values()) > 0

    # SIGTERM: in-flight appends confirmed, group left, exit 0.
    for f in survivors:
        code = f.stop(signal.SIGTERM)
        assert code == 0, f.stderr()[-3000:]
        assert "Traceback" not in f.stderr()


def test_followers_grow_the_local_topic_when_the_source_gains_partitions(
    config: Path,
    source_a: Broker,
    group_local: Broker,
    topic: str,
    followers: list[Follower],
    tmp_path: Path,
) -> None:
    """The source topic grows from 2 to 4 partitions under two followers: the local topic grows
    too, the group hands the new partitions out, and they are copied without a restart."""
    if "tansu" in (source_a.kind, group_local.kind):
        pytest.skip("Tansu has no CreatePartitions")
    create_topic(source_a.bootstrap, topic, 2)
    create_topic(group_local.bootstrap, topic, 2)
    _fill(source_a, topic, 100, seed=5, partitions=2)
    _start_two(followers, config, topic, tmp_path)

    def diag() -> str:
        return "\n".join(
            f"--- follower {i} owns {f.owned()}:\n{f.stderr()[-3000:]}"
            for i, f in enumerate(followers)
        )

    _wait("2 followers to split 2 partitions", lambda: _split(followers, 2), 90, diag)
    add_partitions(source_a.bootstrap, topic, 4)
    _fill(source_a, topic, 150, seed=6, partitions=4)
    _wait_mirrored(
        source_a, group_local, topic, 4, "the local topic to grow and the new partitions", diag
    )
    _wait("2 followers to split 4 partitions", lambda: _split(followers, 4), 60, diag)
    assert assert_partitions_identical(source_a.bootstrap, group_local.bootstrap, topic, 4) == (
        2 * 250 + 2 * 150
    )
    for f in followers:
        assert f.stop(signal.SIGTERM) == 0, f.stderr()[-3000:]


def test_a_follower_refuses_a_source_topic_deleted_and_created_again(
    config: Path,
    source_a: Broker,
    group_local: Broker,
    topic: str,
    followers: list[Follower],
    tmp_path: Path,
) -> None:
    """The source topic is deleted and created again under a follower: its new topic id is
    noticed, nothing of the new topic is appended to the old copy, and the follower reports
    the topic unsafe (exit 3) when stopped."""
    create_topic(source_a.bootstrap, topic, 1)
    create_topic(group_local.bootstrap, topic, 1)
    _fill(source_a, topic, 100, seed=7, partitions=1)
    f = Follower(
        config, topic, f"g-{topic}", tmp_path / "follower.log", "--topic-check-interval", "1"
    )
    followers.append(f)
    _wait(
        "the follower to catch up",
        lambda: ends(group_local, topic, 1) == {0: 100},
        90,
        lambda: f.stderr()[-3000:],
    )
    recreate_topic(source_a.bootstrap, topic, 1)
    _fill(source_a, topic, 300, seed=8, partitions=1)

    _wait(
        "the follower to notice the new topic id",
        lambda: "was deleted and created again (topic id" in f.stderr(),
        60,
        lambda: f.stderr()[-3000:],
    )

    assert ends(group_local, topic, 1) == {0: 100}  # the old copy, untouched
    assert f.stop(signal.SIGTERM) == 3, f.stderr()[-3000:]


@pytest.mark.kafka_versions  # the group hands a new topic out: KIP-848's on Kafka 4, classic on 3.9
def test_followers_with_a_pattern_mirror_a_topic_created_on_the_source_without_a_restart(
    config: Path,
    source_a: Broker,
    group_local: Broker,
    topic: str,
    followers: list[Follower],
    tmp_path: Path,
) -> None:
    """Two followers of ``--topic-pattern`` run; a topic that matches is created on the source:
    both find it at their next topic check, it is created locally (``--create-missing``), the
    group hands its partitions out over both, and it is mirrored offset-identically, without a
    restart. A topic that does not match stays out."""
    first, later, other = f"{topic}-a", f"{topic}-b", f"x{topic}-c"
    create_topic(source_a.bootstrap, first, 2)
    create_topic(group_local.bootstrap, first, 2)
    _fill(source_a, first, 50, seed=11, partitions=2)
    select = ("--topic-pattern", f"{re.escape(topic)}-.*", "--create-missing")
    _start_two(followers, config, topic, tmp_path, select)

    def diag() -> str:
        return "\n".join(
            f"--- follower {i} owns {sorted(f.owned_by_topic())}:\n{f.stderr()[-3000:]}"
            for i, f in enumerate(followers)
        )

    def split(topics: set[str], n: int) -> bool:
        owned = [{tp for tp in f.owned_by_topic() if tp[0] in topics} for f in followers]
        return all(owned) and sum(map(len, owned)) == n and len(set().union(*owned)) == n

    _wait("2 followers to split the first topic", lambda: split({first}, 2), 90, diag)
    create_topic(source_a.bootstrap, later, 4)
    create_topic(source_a.bootstrap, other, 1)
    _fill(source_a, later, 80, seed=12, partitions=4)
    _fill(source_a, other, 5, seed=13, partitions=1)
    _wait_mirrored(source_a, group_local, later, 4, "the new topic, created locally", diag)
    _wait("both followers to own partitions of both", lambda: split({first, later}, 6), 60, diag)
    assert (
        assert_partitions_identical(source_a.bootstrap, group_local.bootstrap, later, 4) == 4 * 80
    )
    _fill(source_a, first, 30, seed=14, partitions=2)  # the first one is still followed
    _wait(
        "the first topic's new records",
        lambda: ends(group_local, first, 2) == ends(source_a, first, 2),
        60,
        diag,
    )
    assert topic_partitions(group_local.bootstrap, other) is None  # not matched: left out
    for f in followers:
        assert f.stop(signal.SIGTERM) == 0, f.stderr()[-3000:]
    assert any(f"topic {later} appeared on a" in f.stderr() for f in followers), diag()


@pytest.mark.kafka_versions  # topic ids and deletion in metadata: Kafka 3.9 and 4
def test_a_follower_reports_a_topic_deleted_on_its_source_and_keeps_its_mirror(
    config: Path,
    source_a: Broker,
    group_local: Broker,
    topic: str,
    followers: list[Follower],
    tmp_path: Path,
) -> None:
    """A followed topic is deleted on its only source: the follower says so in its log, its
    metrics and its report (``source-gone``, exit 5), appends nothing more to the mirror and
    keeps it as it is, and goes on following the job's other topic."""
    gone, kept = f"{topic}-gone", f"{topic}-kept"
    for t in (gone, kept):
        create_topic(source_a.bootstrap, t, 1)
        create_topic(group_local.bootstrap, t, 1)
        _fill(source_a, t, 40, seed=21, partitions=1)
    report = tmp_path / "report.json"
    f = Follower(
        config,
        topic,
        f"g-{topic}",
        tmp_path / "follower.log",
        "--topic-check-interval",
        "1",
        "--json",
        select=("--topic-pattern", f"{re.escape(topic)}-.*"),
        stdout=report,
    )
    followers.append(f)
    diag = lambda: f.stderr()[-3000:]
    _wait(
        "the follower to catch up",
        lambda: ends(group_local, gone, 1) == {0: 40} and ends(group_local, kept, 1) == {0: 40},
        90,
        diag,
    )
    delete_topic(source_a.bootstrap, gone)
    _wait(
        "the follower to notice", lambda: f"topic {gone} was deleted on a" in f.stderr(), 60, diag
    )

    def gone_in_metrics() -> bool:
        m = f.scrape()
        key = (
            "partsync_partition_status",
            frozenset({("topic", gone), ("partition", "0"), ("status", "source-gone")}),
        )
        return m.get(key) == 1

    _wait("the metrics to say source-gone", gone_in_metrics, 30, diag)
    _fill(source_a, kept, 25, seed=22, partitions=1)
    _wait("the other topic's new records", lambda: ends(group_local, kept, 1) == {0: 65}, 60, diag)
    assert ends(group_local, gone, 1) == {0: 40}  # the mirror, kept as it was
    assert f.stop(signal.SIGTERM) == 5, diag()
    doc = json.loads(report.read_text())
    statuses = {
        t["topic"]: {p["partition"]: p["status"] for p in t["partitions"]} for t in doc["topics"]
    }
    assert statuses[gone] == {0: "source-gone"} and statuses[kept] == {0: "synced"}, statuses
    why = next(p["reason"] for t in doc["topics"] if t["topic"] == gone for p in t["partitions"])
    assert "deleted on a, every source that had it" in why and "kept" in why


@pytest.mark.kafka_only  # Tansu and noida keep no topic configs to alter
@pytest.mark.kafka_versions  # Kafka 4 changed config defaults and limits (segment.bytes, after.max.ms)
def test_a_followers_mirror_takes_its_sources_configs_and_follows_their_changes(
    config: Path,
    source_a: Broker,
    group_local: Broker,
    topic: str,
    followers: list[Follower],
    tmp_path: Path,
) -> None:
    """A follower with ``--sync-configs`` creates a new topic's mirror with the source's
    retention, cleanup and segment settings and the mirror's own (producer compression,
    CreateTime, no timestamp limit, whatever the source says), sets a local topic that
    drifted back in step, and follows a change made on the source while it runs."""
    created, drifted = f"{topic}-new", f"{topic}-old"
    source_cfg = {
        "segment.bytes": "1048576",
        "retention.ms": "9000000000000",  # longer than the records' age (make_records)
        "min.compaction.lag.ms": "1000",
        "compression.type": "zstd",
        "message.timestamp.after.max.ms": "3600000",
    }
    create_topic(source_a.bootstrap, created, 1, source_cfg)
    create_topic(source_a.bootstrap, drifted, 1, {"retention.ms": "9000000000000"})
    create_topic(group_local.bootstrap, drifted, 1, {"retention.ms": "3600000"})
    for t in (created, drifted):
        _fill(source_a, t, 30, seed=31, partitions=1)
    f = Follower(
        config,
        topic,
        f"g-{topic}",
        tmp_path / "follower.log",
        "--topic-check-interval",
        "1",
        "--sync-configs",
        select=("--topic-pattern", f"{re.escape(topic)}-.*", "--create-missing"),
    )
    followers.append(f)
    diag = lambda: f.stderr()[-3000:]
    _wait(
        "both topics mirrored",
        lambda: all(
            topic_partitions(group_local.bootstrap, t) == 1 and ends(group_local, t, 1) == {0: 30}
            for t in (created, drifted)
        ),
        90,
        diag,
    )
    caught_up = ("partsync_topic_state", frozenset({("topic", created), ("state", "caught-up")}))
    _wait("the topic's state in the metrics", lambda: f.scrape().get(caught_up) == 1, 30, diag)

    def recorded() -> dict[int, dict[str, int]]:  # the sources' ends, for a later promote
        with Cluster(_ref(group_local, "local")) as c:
            return read_source_ends(c).get(created, {})

    _wait("the source's ends recorded", lambda: recorded() == {0: {"a": 30}}, 30, diag)
    mirror = topic_configs(group_local.bootstrap, created)
    assert mirror["segment.bytes"] == "1048576" and mirror["retention.ms"] == "9000000000000"
    assert mirror["min.compaction.lag.ms"] == "1000", mirror
    assert mirror["compression.type"] == "producer", mirror
    assert mirror["message.timestamp.type"] == "CreateTime", mirror
    assert mirror["message.timestamp.after.max.ms"] == "9223372036854775807", mirror
    assert topic_configs(group_local.bootstrap, drifted)["retention.ms"] == "9000000000000"

    set_topic_configs(
        source_a.bootstrap, created, {"retention.ms": "8000000000000", "segment.ms": "3600000"}
    )
    _wait(
        "the source's change to reach the mirror",
        lambda: (
            (c := topic_configs(group_local.bootstrap, created))["retention.ms"] == "8000000000000"
            and c["segment.ms"] == "3600000"
            # Logged once the broker answered, a moment after the change is visible.
            and f"topic {created} on local: set " in f.stderr()
        ),
        30,
        diag,
    )
    assert_partitions_identical(source_a.bootstrap, group_local.bootstrap, created, 1)
    assert f.stop(signal.SIGTERM) == 0, diag()


def test_a_topic_that_cannot_be_planned_at_the_start_is_planned_again_until_it_can(
    config: Path,
    source_a: Broker,
    group_local: Broker,
    group_proxy: StrictProxy,
    topic: str,
    followers: list[Follower],
    tmp_path: Path,
) -> None:
    """A follower whose topic cannot be planned when it starts (here a local partition whose
    leader does not lead it yet, for longer than a bounds read waits out an election) says so
    and plans it again at every topic check until it can, then follows it. A benchmark's
    follower of a topic of 10,000 partitions just created once sat idle for 8 minutes without
    a word: its topic had failed to plan, and nothing planned it again."""
    create_topic(source_a.bootstrap, topic, 2)
    create_topic(group_local.bootstrap, topic, 2)
    _fill(source_a, topic, 20, seed=5, partitions=2)
    group_proxy.kafka.leaderless(topic, 1, 18.0)  # longer than BOUNDS_ELECTION_WAIT_S (15 s)
    f = Follower(
        config, topic, f"g-{topic}", tmp_path / "follower.log", "--topic-check-interval", "1"
    )
    followers.append(f)
    diag = lambda: f.stderr()[-3000:]
    _wait("the warning", lambda: "planning it again every 1 s" in f.stderr(), 40, diag)
    assert ends(group_local, topic, 2) == {0: 0, 1: 0}
    _wait("the copy", lambda: ends(group_local, topic, 2) == {0: 20, 1: 20}, 60, diag)
    assert "planned at last" in f.stderr(), diag()
    assert_partitions_identical(source_a.bootstrap, group_local.bootstrap, topic, 2)
    assert f.stop(signal.SIGTERM) == 0, diag()


def _fill_at_once(broker: Broker, topic: str, n: int, seed: int, partitions: int) -> None:
    """``n`` records into each partition, by one producer in one go."""
    recs = [r for p in range(partitions) for r in make_records(n, seed=seed * 100 + p, partition=p)]
    produce(broker.bootstrap, topic, recs, compression="lz4", batch_size=4096)


def test_partitions_woken_together_take_one_round_and_still_compare_the_local_log(
    config: Path,
    source_a: Broker,
    group_local: Broker,
    group_proxy: StrictProxy,
    topic: str,
    followers: list[Follower],
    tmp_path: Path,
) -> None:
    """A follower takes the rounds of the partitions one long-poll answer woke together
    (``run.together``: a few requests for all of them, not a few per partition), and such a
    round still compares the local log's last batch with the source's before it appends: a
    source topic deleted and created again with other records (the topic watch, which would
    notice its new id, is off here) is refused, not appended to."""
    n = 40
    create_topic(source_a.bootstrap, topic, n)
    create_topic(group_local.bootstrap, topic, n)
    _fill_at_once(source_a, topic, 3, seed=11, partitions=n)
    f = Follower(
        config, topic, f"g-{topic}", tmp_path / "follower.log", "--topic-check-interval", "3600"
    )
    followers.append(f)
    diag = lambda: f.stderr()[-3000:]
    _wait(
        "the catch-up", lambda: ends(group_local, topic, n) == dict.fromkeys(range(n), 3), 90, diag
    )
    time.sleep(1)  # every partition parked on the source's tail

    before = dict(group_proxy.requests)
    # Stopped for well under the session timeout: all of them woken at once when it goes on.
    f.proc.send_signal(signal.SIGSTOP)
    _fill_at_once(source_a, topic, 2, seed=12, partitions=n)
    f.proc.send_signal(signal.SIGCONT)
    _wait(
        "the new records",
        lambda: ends(group_local, topic, n) == dict.fromkeys(range(n), 5),
        60,
        diag,
    )
    sent = {api: c - before.get(api, 0) for api, c in group_proxy.requests.items()}
    # A usual round reads its local bounds with two ListOffsets (log start, high watermark).
    assert sent.get("ListOffsets", 0) < n, sent
    assert_partitions_identical(source_a.bootstrap, group_local.bootstrap, topic, n)

    f.proc.send_signal(signal.SIGSTOP)
    recreate_topic(source_a.bootstrap, topic, n)
    _fill_at_once(source_a, topic, 6, seed=13, partitions=n)
    f.proc.send_signal(signal.SIGCONT)

    def refused() -> int:
        unsafe = {("status", "unsafe"), ("topic", topic)}
        return sum(
            1
            for (name, labels), v in f.scrape().items()
            if name == "partsync_partition_status" and v and unsafe <= labels
        )

    # Each partition's usual round compares the two logs again and refuses the divergence.
    _wait("the refusals", lambda: refused() == n, 60, diag)
    assert ends(group_local, topic, n) == dict.fromkeys(range(n), 5)  # nothing appended
    assert f.stop(signal.SIGTERM) == 3, diag()


@pytest.mark.parametrize("transactions", ["replay", "refuse"])
def test_a_foreign_write_that_leaves_the_ends_equal_is_refused_not_reported_in_sync(
    transactions: str,
    config: Path,
    source_a: Broker,
    group_local: Broker,
    topic: str,
    followers: list[Follower],
    tmp_path: Path,
) -> None:
    """Someone else writes a record into a follower's mirror just as the source gets its next
    one: the two ends agree again, but the mirror's last record is not the source's. The round
    the source's record wakes finds the local log moved without this process, compares the
    last batches, and refuses (a partition is never reported in sync when it is not), whether
    or not it replays transactions (which once was the only case compared)."""
    create_topic(source_a.bootstrap, topic, 2)
    create_topic(group_local.bootstrap, topic, 2)
    _fill_at_once(source_a, topic, 3, seed=21, partitions=2)
    log = tmp_path / "follower.log"
    f = Follower(config, topic, f"g-{topic}", log, "--transactions", transactions)
    followers.append(f)
    diag = lambda: f.stderr()[-3000:]
    _wait("the catch-up", lambda: ends(group_local, topic, 2) == {0: 3, 1: 3}, 90, diag)
    time.sleep(1)  # both partitions parked on the source's tail

    f.proc.send_signal(signal.SIGSTOP)
    produce(group_local.bootstrap, topic, make_records(1, seed=22, partition=0))  # foreign
    produce(source_a.bootstrap, topic, make_records(1, seed=23, partition=0))
    produce(source_a.bootstrap, topic, make_records(1, seed=24, partition=1))
    f.proc.send_signal(signal.SIGCONT)

    def status(p: int) -> str | None:
        for (name, labels), v in f.scrape().items():
            if name == "partsync_partition_status" and v and ("partition", str(p)) in labels:
                return dict(labels).get("status")
        return None

    _wait("partition 0 refused", lambda: status(0) == "unsafe", 60, diag)
    _wait("partition 1 copied", lambda: ends(group_local, topic, 2)[1] == 4, 60, diag)
    assert status(1) in ("synced", "in-sync"), status(1)
    assert ends(group_local, topic, 2)[0] == 4  # the foreign record; nothing appended after
    assert f.stop(signal.SIGTERM) == 3, diag()


@pytest.mark.kafka_versions  # the group protocol: KIP-848's on Kafka 4, classic on 3.9
def test_overlapping_one_shot_runs_split_the_work(
    config: Path,
    source_a: Broker,
    group_local: Broker,
    topic: str,
    broker_mode: str,
) -> None:
    partitions = 4
    create_topic(source_a.bootstrap, topic, partitions)
    create_topic(group_local.bootstrap, topic, partitions)
    for p in range(partitions):
        produce(
            source_a.bootstrap, topic, make_records(1500, seed=p, partition=p), compression="lz4"
        )
    # Throttled so the first run is still copying when the second starts.
    argv = [
        sys.executable,
        "-m",
        "partsync",
        "--config",
        str(config),
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--group",
        f"cron-{topic}",
        "--session-timeout",
        SESSION_S,
        "--max-bytes-per-sec",
        "120000",
        "--json",
    ]
    env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
    first = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    _wait(
        "the first run to start writing",
        lambda: sum(ends(group_local, topic, partitions).values()) > 0 or first.poll() is not None,
        60,
    )
    assert first.poll() is None, "the first run finished before the second started: no overlap"
    second = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    out, err = first.communicate(timeout=300)
    runs = [
        CliResult(first.returncode, out, err),
        CliResult(second.returncode, second.stdout, second.stderr),
    ]
    # Kafka 4 offers KIP-848's consumer protocol and partsync takes it; Kafka 3.9 (not
    # enabled there), Tansu and noida speak the classic protocol. Both must split the work.
    protocol = "consumer" if broker_mode == "kafka-4.1.1" else "classic"
    for r in runs:
        assert r.code == 0, r.stderr[-3000:]
        check_report(r.json)
        assert r.json["group"] == {"name": f"cron-{topic}", "protocol": protocol}, r.json

    # No offset was written by both runs: their copied ranges are disjoint.
    written: dict[int, list[tuple[int, int, int]]] = {p: [] for p in range(partitions)}
    for i, r in enumerate(runs):
        for p, e in by_partition(r.json, topic).items():
            assert e["status"] in ("in-sync", "synced", "handed-over"), e
            # Split by the group, not settled by fencing: a member hands a partition over
            # before the next owner starts, so no writer is ever refused for an older epoch.
            assert "producer epoch" not in (e["reason"] or ""), e
            if e["batches"]:
                written[p].append((e["local_end_before"], e["local_end_after"], i))
    for p, spans in written.items():
        spans.sort()
        for (_lo, hi, _i), (lo2, _hi2, _j) in itertools.pairwise(spans):
            assert hi <= lo2, f"partition {p}: runs wrote overlapping ranges {spans}"
    assert {i for spans in written.values() for *_, i in spans} == {0, 1}, written
    assert_partitions_identical(source_a.bootstrap, group_local.bootstrap, topic, partitions)


def test_a_fenced_writer_stops_at_once(clusters, topic: str, broker_mode: str) -> None:
    if is_real_kafka(broker_mode):
        pytest.skip(
            "Apache Kafka's partition leader learns a bumped epoch from the new owner's "
            "first append; this test bumps without appending (Tansu and noida fence at once)"
        )
    src, dst = clusters["a"], clusters["local"]
    create_topic(src.bootstrap, topic, 1)
    create_topic(dst.bootstrap, topic, 1)
    produce(
        src.bootstrap,
        topic,
        make_records(3000, seed=7, partition=0),
        compression="lz4",
        batch_size=2048,
    )
    with Cluster(_ref(src)) as source, Cluster(_ref(dst)) as local:
        plan = plan_partition(
            topic, 0, local.bounds(topic, [0])[0], {"a": source.bounds(topic, [0])[0]}
        )
        # Throttled, so the copy is still appending when the new owner shows up.
        opts = CopyOptions(max_bytes_per_sec=100_000)
        out = {}
        t = threading.Thread(
            target=lambda: out.setdefault("r", copy_partition(plan, {"a": source}, local, opts))
        )
        t.start()
        _wait("the first appends", lambda: ends(dst, topic, 1)[0] > 0, 30)
        with Cluster(_ref(dst)) as newer:
            open_producer(newer, topic, 0)  # the new owner's InitProducerId bumps the epoch
        t.join(60)
        assert not t.is_alive()
    r = out["r"]
    assert r.status is Status.HANDED_OVER, r
    assert isinstance(r.error, FencedError) and r.error.partition == 0, r.error
    assert r.local_end_after < plan.target_end  # it stopped instead of finishing
    # It stopped writing at once: the local end is exactly where its verified appends ended.
    time.sleep(1)
    assert ends(dst, topic, 1)[0] == r.local_end_after


@pytest.mark.parametrize(
    ("follower_protocol", "run_protocol", "refusal"),
    [
        ("classic", "auto", "GROUP_ID_NOT_FOUND"),
        ("auto", "classic", "INCONSISTENT_GROUP_PROTOCOL"),
    ],
)
def test_members_of_one_job_speaking_different_group_protocols_are_refused(
    config: Path,
    source_a: Broker,
    group_local: Broker,
    topic: str,
    broker_mode: str,
    followers: list[Follower],
    tmp_path: Path,
    follower_protocol: str,
    run_protocol: str,
    refusal: str,
) -> None:
    """A group runs one protocol at a time: a run that speaks the other one is refused by the
    coordinator, exits 1 naming the fix, and writes nothing; the follower that owns the group
    carries on."""
    if broker_mode != "kafka-4.1.1":
        pytest.skip("only Kafka 4 here offers both group protocols")
    create_topic(source_a.bootstrap, topic, 2)
    create_topic(group_local.bootstrap, topic, 2)
    _fill(source_a, topic, 50, seed=3, partitions=2)
    group = f"mixed-{topic}"
    # Throttled, so that the follower is still copying when the run plans: the run has work
    # and must join the group.
    f = Follower(
        config,
        topic,
        group,
        tmp_path / "follower.log",
        "--group-protocol",
        follower_protocol,
        "--max-bytes-per-sec",
        "10000",
    )
    followers.append(f)
    _wait(
        "the follower to catch up",
        lambda: ends(group_local, topic, 2) == {0: 50, 1: 50},
        90,
        lambda: f.stderr()[-3000:],
    )
    _fill(source_a, topic, 1000, seed=4, partitions=2)
    r = run_cli(
        "--config",
        str(config),
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--group",
        group,
        "--group-protocol",
        run_protocol,
        "--json",
        timeout=120,
    )
    assert r.code == 1, r.stderr[-3000:]
    assert refusal in r.stderr and "same --group-protocol" in r.stderr, r.stderr[-3000:]
    doc = r.json
    assert doc["error"]["kind"] == "group", doc
    for e in by_partition(doc, topic).values():
        assert e["batches"] == 0, e
        assert e["status"] == "error" and refusal in e["reason"], e
    _wait(
        "the follower to copy the new records",
        lambda: ends(group_local, topic, 2) == {0: 1050, 1: 1050},
        120,
        lambda: f.stderr()[-3000:],
    )
    assert f.stop(signal.SIGTERM) == 0, f.stderr()[-3000:]
    assert_partitions_identical(source_a.bootstrap, group_local.bootstrap, topic, 2)


def test_a_run_never_takes_partitions_from_a_consumer_groups_consumers(
    config: Path, source_a: Broker, group_local: Broker, topic: str, broker_mode: str
) -> None:
    """With the consumer protocol any subscriber can join a group (the classic protocol's
    protocol type kept consumers out): a run whose --group names a group that a consumer
    application is in steps aside (exit 1, nothing written) instead of taking its partitions."""
    if broker_mode != "kafka-4.1.1":
        pytest.skip("only Kafka 4 here runs the consumer group protocol")
    create_topic(source_a.bootstrap, topic, 2)
    create_topic(group_local.bootstrap, topic, 2)
    _fill(source_a, topic, 20, seed=5, partitions=2)
    group = f"app-{topic}"
    local = Cluster(_ref(group_local))
    try:
        code, coord = local.find_coordinator(group, 0, timeout=30)
        assert not code and coord is not None
        app = Connection(coord.host, coord.port, cluster="local", client_id="billing-app")
        try:
            joined = None
            for _ in range(50):  # the coordinator may still be loading
                joined = app.consumer_group_heartbeat(
                    group, "", 0, rebalance_timeout_ms=30_000, topics=[topic], owned={}
                )
                if joined.error_code == 0:
                    break
                time.sleep(0.2)
            assert joined is not None and joined.error_code == 0, joined
            r = run_cli(
                "--config",
                str(config),
                "sync",
                "--topic",
                topic,
                "--sources",
                "a",
                "--group",
                group,
                "--json",
                timeout=120,
            )
            assert r.code == 1, r.stderr[-3000:]
            assert "not a partsync process" in r.stderr and "billing-app" in r.stderr, r.stderr
            assert ends(group_local, topic, 2) == {0: 0, 1: 0}
            # The application's member still holds every partition.
            g = app.consumer_group_describe(group)
            [member] = g.members.values()
            assert member.client_id == "billing-app"
            assert member.assigned == {(topic, 0), (topic, 1)}, member
        finally:
            app.consumer_group_heartbeat(group, joined.member_id if joined else "", -1)
            app.close()
    finally:
        local.close()
