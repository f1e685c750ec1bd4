"""The README's Docker quick start, without Docker: docker-compose.yml's settings, its ``init``
service's script run as Compose would run it (``$$`` is ``$``) with stand-ins for the Kafka
tools it calls (tests/support/kafka_cli_shim.py) against the session's brokers, and then the
README's sync line through the real CLI. dc2 and dc3 are the sources, dc1 the local cluster,
as in the file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from partsync.demo.data import assert_partitions_identical
from tests.integration.sync_support import bounds
from tests.support.brokers import Broker

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "tests" / "support" / "kafka_cli_shim.py"
TOOLS = {
    "kafka-topics.sh": "topics",
    "kafka-get-offsets.sh": "get-offsets",
    "kafka-console-producer.sh": "console-producer",
}


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_every_broker_keeps_its_log_on_its_volume_and_creates_no_topic_itself() -> None:
    doc = _compose()
    for name in ("dc1", "dc2", "dc3"):
        svc = doc["services"][name]
        env = svc["environment"]
        mounts = [v.split(":", 1) for v in svc["volumes"]]
        assert [path for _vol, path in mounts] == [env["KAFKA_LOG_DIRS"]], name
        assert all(vol in doc["volumes"] for vol, _path in mounts), name
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
        assert env["KAFKA_COMPRESSION_TYPE"] == "producer"
    init = doc["services"]["init"]
    assert set(init["depends_on"]) == {"dc2", "dc3"}
    assert init["image"] == doc["x-kafka"]["image"]


def _init_script(tmp: Path, topic: str) -> str:
    """The init service's script as its shell gets it, with the tools swapped for the shims
    and the topic made this test's own."""
    script = _compose()["services"]["init"]["command"][0].replace("$$", "$")
    assert "bin=/opt/kafka/bin" in script and " orders " in script
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for tool, name in TOOLS.items():
        (bindir / tool).write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SHIM}" {name} "$@"\n')
        (bindir / tool).chmod(0o755)
    return script.replace("bin=/opt/kafka/bin", f"bin={bindir}").replace(" orders ", f" {topic} ")


@pytest.mark.kafka  # docker-compose.yml runs Apache Kafka: the real-Kafka tier runs it too
def test_the_readme_docker_lines_create_fill_and_mirror_orders(
    tmp_path: Path,
    source_a: Broker,
    source_b: Broker,
    local_proxy: Any,
    topic: str,
    cli: Any,
) -> None:
    script = _init_script(tmp_path, topic)
    env = {**os.environ, "SHIM_dc2": source_a.bootstrap, "SHIM_dc3": source_b.bootstrap}

    def init() -> str:
        done = subprocess.run(
            ["bash", "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "orders: 600 records on dc2" in init()
    # `docker compose up` again (a restart): the topics exist and no record is added.
    assert "orders: 600 records on dc2" in init()
    assert sum(b.end for b in bounds(source_b, topic, 6).values()) == 0  # dc3: created, empty
    spread = bounds(source_a, topic, 6)
    assert sum(1 for b in spread.values() if b.end) > 1  # keyed: over several partitions

    # examples/partsync.toml, at this session's addresses (dc1 through the strict proxy).
    config = (ROOT / "examples" / "partsync.toml").read_text()
    for name, address in (
        ("19092", local_proxy.bootstrap),
        ("29092", source_a.bootstrap),
        ("39092", source_b.bootstrap),
    ):
        assert f'"localhost:{name}"' in config
        config = config.replace(f'"localhost:{name}"', f'"{address}"')
    path = tmp_path / "partsync.toml"
    path.write_text(config)
    r = cli(
        "--config",
        str(path),
        "sync",
        "--topic",
        topic,
        "--sources",
        "dc2,dc3",
        "--create-missing",
        "--json",
    )
    assert r.code == 0, r.stdout + r.stderr
    assert {p: b.end for p, b in bounds(local_proxy.bootstrap, topic, 6).items()} == {
        p: b.end for p, b in spread.items()
    }
    assert_partitions_identical(source_a.bootstrap, local_proxy.bootstrap, topic, 6)
