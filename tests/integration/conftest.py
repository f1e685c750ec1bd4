"""Fixtures for the sync tests: the session's brokers under config-file names, and a CLI runner
that passes that config file.

partsync reaches the local cluster only through the strict proxy (tests/integration/
kafka_proxy.py): every Produce of every sync test is checked against Apache Kafka's append
rules (one batch per partition, no append behind an unanswered one, ...), and a test can make
the local cluster behave as Kafka does where our brokers do not (``clusters.kafka``: rejected
appends, a high watermark below the log end, throttling, moved leaders). Tests read results
from the brokers directly (``clusters.bootstrap(name)``), never through the proxy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from partsync.demo.brokers import Broker
from tests.conftest import CliResult
from tests.integration.kafka_proxy import StrictProxy
from tests.integration.sync_support import Clusters, write_config


@pytest.fixture(scope="session")
def local_proxy(local_broker: Broker) -> Iterator[StrictProxy]:
    with StrictProxy(local_broker.bootstrap) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
    source_a: Broker,
    source_b: Broker,
    local_broker: Broker,
    local_proxy: StrictProxy,
) -> Clusters:
    brokers = {"a": source_a, "b": source_b, "local": local_broker}
    path = write_config(
        tmp_path_factory.mktemp("config") / "partsync.toml",
        brokers,
        addresses={"local": local_proxy.bootstrap},
    )
    return Clusters(brokers, path, local_proxy)


@pytest.fixture(autouse=True)
def _kafka_rules_hold(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test that syncs through the session's clusters leaves no breach of Kafka's append
    rules behind (and no behaviour it switched on for the next test)."""
    if "clusters" not in request.fixturenames and "local_proxy" not in request.fixturenames:
        yield
        return
    proxy: StrictProxy = request.getfixturevalue("local_proxy")
    proxy.reset()
    yield
    proxy.kafka.clear()
    proxy.assert_clean(require_produce=False)


@pytest.fixture
def psync(clusters: Clusters, cli: Callable[..., CliResult]) -> Callable[..., CliResult]:
    """``psync("sync", "--topic", t, ...)``: the CLI with the session's config file."""

    def run(*args: str, **kw: object) -> CliResult:
        return cli("--config", str(clusters.config), *args, **kw)

    return run
