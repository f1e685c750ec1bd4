"""Shared fixtures: real broker processes on free loopback ports, unique topics, a CLI helper.

A *broker mode* says which broker processes play the clusters (sources ``a``, ``b``, the
``local`` cluster, an ``extra``):

- ``mixed``: Tansu and noida-db from PyPI, sources and local of different kinds, so a quirk of
  one broker cannot hide a bug;
- ``tansu`` / ``noida``: every cluster of that kind;
- ``kafka-3.9.1`` / ``kafka-4.1.1`` (``kafka`` = both): real Apache Kafka, single-node KRaft
  clusters run as JVM processes from Maven Central's jars (``tests/support/kafka_jvm.py``);
- ``kafka-docker``: Apache Kafka in Docker through testcontainers (needs a Docker daemon).

``PARTSYNC_TEST_BROKER`` lists the modes a run covers, comma-separated; the default is
``mixed,kafka``. Broker tests run once per mode (their ids end in ``[mode]``); under the real
Kafka modes only the tests marked ``kafka`` run (the real-Kafka tier), the others stay on the
PyPI brokers. The whole tier runs on the newest pinned Kafka; an older one runs what differs
between versions (marker ``kafka_versions``: protocol versions of the copy path, transactions,
group protocols, producer-state rules). Each mode's clusters are shared by the tests a worker
runs (session scope; the suite runs in parallel workers, see below), and each test uses its own
topic names (``topic`` fixture).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.brokers import Broker, start_noida, start_tansu
from tests.support.brokers import start_kafka_container, start_kafka_jvm
from tests.support.kafka_jvm import KAFKA_VERSIONS

_PYPI_MODES = ("mixed", "tansu", "noida")
_KAFKA_MODES = tuple(f"kafka-{v}" for v in KAFKA_VERSIONS)
_NEWEST_KAFKA = _KAFKA_MODES[-1]
_ALL_MODES = (*_PYPI_MODES, *_KAFKA_MODES, "kafka-docker")


def _modes_from_env() -> list[str]:
    wanted: list[str] = []
    for m in os.environ.get("PARTSYNC_TEST_BROKER", "mixed,kafka").lower().split(","):
        m = m.strip()
        for mode in _KAFKA_MODES if m == "kafka" else (m,):
            if mode not in _ALL_MODES:
                raise pytest.UsageError(
                    f"PARTSYNC_TEST_BROKER: unknown broker mode {mode!r} "
                    f"(known: {', '.join(_ALL_MODES)}, kafka)"
                )
            if mode not in wanted:
                wanted.append(mode)
    return wanted


BROKER_MODES = _modes_from_env()

# Which broker kind plays which role in each PyPI mode; the Kafka modes use one kind throughout.
_ROLES = {
    "mixed": {"a": "tansu", "b": "noida", "local": "noida", "extra": "tansu"},
    "tansu": {"a": "tansu", "b": "tansu", "local": "tansu", "extra": "tansu"},
    "noida": {"a": "noida", "b": "noida", "local": "noida", "extra": "noida"},
}


def is_real_kafka(mode: str) -> bool:
    return mode.startswith("kafka")


def kind_of(mode: str, role_or_kind: str) -> str:
    """The broker kind playing ``role_or_kind`` in ``mode`` (a kind is itself)."""
    if mode in _ROLES:
        return _ROLES[mode].get(role_or_kind, role_or_kind)
    return mode if role_or_kind in ("a", "b", "local", "extra") else role_or_kind


def start_kind(kind: str, data_dir: Path) -> Broker:
    if kind == "tansu":
        return start_tansu()
    if kind == "noida":
        return start_noida(data_dir)
    if kind == "kafka-docker":
        return start_kafka_container()
    if kind.startswith("kafka-"):
        return start_kafka_jvm(kind.removeprefix("kafka-"), data_dir)
    raise ValueError(kind)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """Under a real-Kafka mode, only the real-Kafka tier (marker ``kafka``) runs; tests of what
    only Apache Kafka shows (marker ``kafka_only``) run only there. An older Kafka than the
    newest pinned one runs only what differs between versions (marker ``kafka_versions``)."""
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        mode = callspec.params.get("broker_mode") if callspec is not None else None
        real = mode is not None and is_real_kafka(mode)
        older = real and mode in _KAFKA_MODES and mode != _NEWEST_KAFKA
        if (
            real
            and item.get_closest_marker("kafka") is None
            and item.get_closest_marker("kafka_only") is None
            or not real
            and item.get_closest_marker("kafka_only") is not None
            or older
            and item.get_closest_marker("kafka_versions") is None
        ):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    yield  # pytest groups the items by session parameter; then the queue's order, below
    items[:] = _queue_order(items)


# -- running in parallel (pytest-xdist) -------------------------------------------------------
# The suite mostly waits on brokers: one pytest process keeps about a third of the two cores
# busy. Workers (``-n``, default PARTSYNC_TEST_WORKERS) take whole groups, one test file of one
# broker mode each (``pytest_xdist_make_scheduler``), so a module's fixtures are set up once.
# Groups are queued in collection order (``--no-loadscope-reorder``), which the hook above
# makes mode by mode (a worker starts each mode's brokers at most once) and, within a mode,
# the largest first; the newest Kafka's tier, the largest, goes first, the many small unit
# tests last, to even out the end. Each worker takes ports from a range of its own
# (``pytest_configure``).
#
# The group is read from the test id (the controller sees only ids): xdist's own
# ``--dist loadgroup`` marks ids in a way pytest 9 no longer keeps.


def _mode_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    mode = callspec.params.get("broker_mode") if callspec is not None else None
    return None if mode is None else str(mode)


def group_of(nodeid: str) -> tuple[str | None, str]:
    """(broker mode, file) of a test id: the mode is its parameters' first part (session
    parameters come first)."""
    path, _, rest = nodeid.partition("::")
    params = rest[rest.find("[") + 1 :] if "[" in rest else ""
    for mode in sorted(_ALL_MODES, key=len, reverse=True):
        if params == f"{mode}]" or params.startswith(f"{mode}-"):
            return mode, path
    return None, path


def _mode_rank(mode: str | None) -> int:
    order = [_NEWEST_KAFKA, *(m for m in BROKER_MODES if m != _NEWEST_KAFKA)]
    return order.index(mode) if mode in order else len(order)


def _queue_order(items: list[pytest.Item]) -> list[pytest.Item]:
    groups = {id(item): group_of(item.nodeid) for item in items}
    for item in items:
        if _mode_of(item) is not None and groups[id(item)][0] != _mode_of(item):
            raise pytest.UsageError(f"{item.nodeid}: its id does not start with its broker mode")
    size: dict[tuple[str | None, str], int] = {}
    for g in groups.values():
        size[g] = size.get(g, 0) + 1
    first = {id(item): i for i, item in enumerate(items)}

    def key(item: pytest.Item) -> tuple[int, int, str, int]:
        mode, path = groups[id(item)]
        return _mode_rank(mode), -size[mode, path], f"{mode}:{path}", first[id(item)]

    return sorted(items, key=key)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Workers take whole (broker mode, file) groups, in the queue's order."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModeAndFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            mode, path = group_of(nodeid)
            return f"{mode}:{path}"

    return ByModeAndFile(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """In a worker, this process and the brokers and CLI runs it starts take ports from the
    worker's own slice (``partsync.demo.brokers.free_ports``)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        count = os.environ["PYTEST_XDIST_WORKER_COUNT"]
        os.environ["PARTSYNC_PORT_SLICE"] = f"{worker.removeprefix('gw')}/{count}"


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: PARTSYNC_TEST_WORKERS, else 4 (about 1.4 cores of demand on two)."""
    return int(os.environ.get("PARTSYNC_TEST_WORKERS", "4"))


@pytest.fixture(scope="session", params=BROKER_MODES)
def broker_mode(request: pytest.FixtureRequest) -> str:
    """The broker mode of this test's clusters (one session instance per mode)."""
    return str(request.param)


@pytest.fixture(scope="session")
def broker_factory(
    broker_mode: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], Broker]]:
    """Start a broker of a role ("a", "b", "local", "extra") or kind; all stopped at the end
    of the mode's tests."""
    started: list[Broker] = []

    def start(role_or_kind: str) -> Broker:
        kind = kind_of(broker_mode, role_or_kind)
        b = start_kind(kind, tmp_path_factory.mktemp(f"{kind}-data"))
        started.append(b)
        return b

    yield start
    # All at once: a Kafka node's controlled shutdown takes seconds, one after another minutes.
    with ThreadPoolExecutor(max(1, len(started))) as pool:
        for _ in pool.map(lambda b: b.stop(), started):
            pass


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
