"""Fixtures for the sync tests: the session's brokers under config-file names, and a CLI runner
that passes that config file."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from partsync.demo.brokers import Broker
from tests.conftest import CliResult
from tests.integration.sync_support import Clusters, write_config


@pytest.fixture(scope="session")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
    source_a: Broker,
    source_b: Broker,
    local_broker: Broker,
) -> Clusters:
    brokers = {"a": source_a, "b": source_b, "local": local_broker}
    path = write_config(tmp_path_factory.mktemp("config") / "partsync.toml", brokers)
    return Clusters(brokers, path)


@pytest.fixture
def psync(clusters: Clusters, cli: Callable[..., CliResult]) -> Callable[..., CliResult]:
    """``psync("sync", "--topic", t, ...)``: the CLI with the session's config file."""

    def run(*args: str, **kw: object) -> CliResult:
        return cli("--config", str(clusters.config), *args, **kw)

    return run
