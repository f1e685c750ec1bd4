"""``/readyz`` and ``/healthz`` of followers in a group, with real brokers: with one partition
and two processes, the one the group gives nothing (a spare replica) is ready as soon as it
joined, as is the one that copies; both are live."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from partsync.demo.brokers import Broker
from partsync.demo.data import create_topic, make_records, produce
from tests.integration.test_follow import (  # noqa: F401 - fixtures used by name
    Follower,
    _wait,
    config,
    followers,
    group_local,
    group_proxy,
)
from tests.support.http import http_get as _get

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def test_a_spare_follower_with_no_partition_is_ready_and_live(
    config: Path,  # noqa: F811 - the fixture imported from test_follow
    source_a: Broker,
    topic: str,
    followers: list[Follower],  # noqa: F811 - the fixture imported from test_follow
    tmp_path: Path,
) -> None:
    create_topic(source_a.bootstrap, topic, 1)
    produce(source_a.bootstrap, topic, make_records(100, seed=1, partition=0))

    def diag() -> str:
        answers = [(_get(f"http://127.0.0.1:{f.port}/readyz"), f.owned()) for f in followers]
        return f"{answers}\n" + "\n".join(f.stderr()[-2000:] for f in followers)

    # The first creates the local topic (two creating it at once: one would fail) and takes
    # the partition; the second joins then.
    followers.append(
        Follower(config, topic, f"health-{topic}", tmp_path / "f0.log", "--create-missing")
    )

    _wait("the first to own the partition", lambda: followers[0].owned() == {0}, 90, diag)
    followers.append(Follower(config, topic, f"health-{topic}", tmp_path / "f1.log"))
    # Both run and the partition is owned by exactly one of them: the other is the spare.
    _wait(
        "one follower to own the partition, the other nothing",
        lambda: (
            all(f.proc.poll() is None for f in followers)
            and sorted(len(f.owned()) for f in followers) == [0, 1]
        ),
        90,
        diag,
    )
    for f in followers:
        base = f"http://127.0.0.1:{f.port}"
        _wait(
            "every follower to be ready",
            lambda b=base: _get(f"{b}/readyz") == (200, "ok\n"),
            60,
            diag,
        )
        assert f.proc.poll() is None, f.stderr()
        assert _get(f"{base}/healthz") == (200, "ok\n")
    for f in followers:
        assert f.stop(signal.SIGTERM, timeout=60) == 0, f.stderr()
