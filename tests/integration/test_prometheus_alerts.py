"""A real Prometheus (Debian's binary) scrapes a follower and evaluates the shipped alerting rules
(deploy/prometheus/partsync-rules.yml, with every ``for:`` cut to 0s, nothing else changed).

A stopped follower (SIGSTOP) answers no scrape, so Prometheus marks its series stale at once and
no lag alert can fire from them: what fires while it is stopped and the source grows is
``PartsyncPartitionUnwatched`` (a partition owned a moment ago that nobody reports owning). Once
it runs again (SIGCONT) it reports the lag the source built up meanwhile, and
``PartsyncLagRecordsHigh`` and ``PartsyncLagSecondsHigh`` fire while it catches up (throttled by
--max-bytes-per-sec so the catch-up outlasts the alerts' evaluation). The data is stamped by the
test (an hour apart), so the lag in seconds does not depend on the clock.

The follower runs without a group (--no-group): a group member stopped longer than its session
would lose its partitions, and the process resuming them without a long poll first would have
no lag in seconds to report; which of the two happens would depend on how long the stop took.

Also: the follower's /healthz and /readyz answer 200 once it follows.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from partsync.demo.brokers import Broker, free_port
from partsync.demo.data import BASE_TIMESTAMP_MS, create_topic, make_records, produce
from tests.integration.test_follow import (  # noqa: F401 - fixtures used by name
    Follower,
    config,
    group_local,
    group_proxy,
)
from tests.support.http import http_get as _get

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "partsync-rules.yml"
PROMETHEUS = shutil.which("prometheus")
HOUR_MS = 3_600_000


def _wait(what: str, cond: Callable[[], Any], timeout: float, diag: Callable[[], str] = str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{diag()}")


class Prometheus:
    """``prometheus`` on a loopback port with a temp config and data dir, scraping ``target``
    every second and evaluating ``rules`` every second."""

    def __init__(self, tmp: Path, target: str, rules: Path) -> None:
        assert PROMETHEUS is not None
        cfg = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "900ms",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "partsync", "static_configs": [{"targets": [target]}]}],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.log = tmp / "prometheus.log"
        for _attempt in range(5):  # the port was free a moment ago: another try if taken
            self.port = free_port()
            with self.log.open("w") as out:
                self.proc = subprocess.Popen(
                    [
                        PROMETHEUS,
                        f"--config.file={tmp / 'prometheus.yml'}",
                        f"--storage.tsdb.path={tmp / 'data'}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            if _wait("prometheus to start", self._started, 60, self.diag) == "ready":
                return
            self.proc.wait(10)
        raise AssertionError(f"prometheus did not start\n{self.diag()}")

    def _started(self) -> str | None:
        if self.proc.poll() is not None:
            return "exited"
        return "ready" if _get(f"{self.url}/-/ready")[0] == 200 else None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def diag(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""

    def api(self, path: str) -> Any:
        code, body = _get(f"{self.url}/api/v1/{path}")
        assert code == 200, (code, body)
        return json.loads(body)["data"]

    def firing(self) -> dict[str, dict[str, Any]]:
        return {
            a["labels"]["alertname"]: a
            for a in self.api("alerts")["alerts"]
            if a["state"] == "firing"
        }

    def target_health(self) -> str:
        targets = self.api("targets")["activeTargets"]
        return str(targets[0]["health"]) if targets else "none"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def short_for_rules(path: Path) -> Path:
    """The shipped rules with every ``for:`` 0s: the expressions and thresholds are the ones
    shipped."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    path.write_text(yaml.safe_dump(doc))
    return path


class GrouplessFollower(Follower):
    """``test_follow``'s follower, without a group."""

    def __init__(self, cfg: Path, topic: str, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.log = log
        argv = [
            sys.executable,
            "-m",
            "partsync",
            "--config",
            str(cfg),
            "-v",
            "sync",
            "--topic",
            topic,
            "--sources",
            "a",
            "--follow",
            "--no-group",
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
        self._out = subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=self._err, env=env)


@pytest.fixture
def procs() -> Iterator[list[Any]]:
    """Followers and Prometheis to end whatever happens (a stopped follower is continued first)."""
    started: list[Any] = []
    yield started
    for p in started:
        if isinstance(p, Follower):
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
                p.stop(signal.SIGKILL)
        else:
            p.stop()


@pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (apt-get install -y prometheus)"
)
def test_prometheus_scraping_a_follower_fires_the_shipped_alerts_when_it_stops_while_the_source_grows(
    config: Path,  # noqa: F811 - the fixture imported from test_follow
    source_a: Broker,
    topic: str,
    procs: list[Any],
    tmp_path: Path,
) -> None:
    create_topic(source_a.bootstrap, topic, 1)
    produce(
        source_a.bootstrap,
        topic,
        make_records(50, seed=1, partition=0, base_timestamp_ms=BASE_TIMESTAMP_MS),
    )
    follower = GrouplessFollower(
        config, topic, tmp_path / "follower.log", "--create-missing", "--max-bytes-per-sec", "20000"
    )
    procs.append(follower)
    base = f"http://127.0.0.1:{follower.port}"

    def lag(name: str) -> float | None:
        try:
            m = follower.scrape()
        except OSError:
            return None
        return next((v for (n, labels), v in m.items() if n == name), None)

    _wait(
        "the follower to be ready",
        lambda: _get(f"{base}/readyz") == (200, "ok\n"),
        90,
        follower.stderr,
    )
    assert _get(f"{base}/healthz") == (200, "ok\n")
    # A batch the follower's long poll sees arrive and copies: the mirror's newest timestamp
    # is known from then on (1 s after the first data).
    produce(
        source_a.bootstrap,
        topic,
        make_records(10, seed=2, partition=0, base_timestamp_ms=BASE_TIMESTAMP_MS + 1000),
    )
    _wait(
        "the follower to copy it (lag 0 s)",
        lambda: (
            lag("partsync_partition_local_end_offset") == 60
            and lag("partsync_partition_lag_seconds") == 0
        ),
        60,
        follower.stderr,
    )

    prom = Prometheus(tmp_path, f"127.0.0.1:{follower.port}", short_for_rules(tmp_path / "r.yml"))
    procs.append(prom)
    _wait("prometheus to scrape the follower", lambda: prom.target_health() == "up", 60, prom.diag)
    _wait(
        "the rules to be evaluated with the follower's data",
        lambda: prom.api("query?query=partsync_partition_owned")["result"],
        30,
        prom.diag,
    )
    assert not prom.firing(), prom.firing()

    # Stopped while the source grows, by more than the rule's 10000 records, stamped an hour on.
    follower.proc.send_signal(signal.SIGSTOP)
    produce(
        source_a.bootstrap,
        topic,
        make_records(15_000, seed=3, partition=0, base_timestamp_ms=BASE_TIMESTAMP_MS + HOUR_MS),
        compression="lz4",
    )
    unwatched = _wait(
        "PartsyncPartitionUnwatched to fire",
        lambda: prom.firing().get("PartsyncPartitionUnwatched"),
        60,
        prom.diag,
    )
    assert unwatched["labels"]["topic"] == topic and unwatched["labels"]["partition"] == "0"
    assert prom.target_health() == "down"
    # Its series are stale: no lag alert can fire from a process that does not answer.
    assert not {"PartsyncLagRecordsHigh", "PartsyncLagSecondsHigh"} & set(prom.firing())

    follower.proc.send_signal(signal.SIGCONT)
    firing = _wait(
        "the lag alerts to fire",
        lambda: (
            (f := prom.firing()).keys() >= {"PartsyncLagRecordsHigh", "PartsyncLagSecondsHigh"}
            and f
        ),
        60,
        lambda: prom.diag() + follower.stderr(),
    )
    records = firing["PartsyncLagRecordsHigh"]
    assert records["labels"]["topic"] == topic and 10_000 < float(records["value"]) <= 15_000
    # Newest seen on the source (stamped an hour on, the batch the poll got: Kafka answers with
    # the first, Tansu with more) minus the mirror's newest (1 s on, the 10th record).
    seconds = float(firing["PartsyncLagSecondsHigh"]["value"])
    mirror_ms = BASE_TIMESTAMP_MS + 1000 + 9
    newest_ms = BASE_TIMESTAMP_MS + HOUR_MS + 14_999
    assert (BASE_TIMESTAMP_MS + HOUR_MS - mirror_ms) / 1000 < seconds, seconds
    assert seconds <= (newest_ms - mirror_ms) / 1000, seconds
    assert follower.stop(signal.SIGTERM, timeout=60) == 0, follower.stderr()
