"""TLS end to end on Apache Kafka itself (the real-Kafka tier): a local cluster whose SSL
listener requires client certificates, with certificates the test makes (tests/support/tls.py).
`check` and `sync` run over mutual TLS with hostname verification and an encrypted client key;
a wrong CA, a missing client certificate and a name the certificate does not cover are each
reported as the cluster that cannot be reached, with the reason."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.brokers import Broker
from partsync.demo.data import assert_partitions_identical, create_topic, produce
from tests.conftest import CliResult, run_cli
from tests.integration.sync_support import records
from tests.support.kafka_jvm import KafkaCluster, TlsSetup, start_kafka_cluster
from tests.support.tls import TestCA

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

KEY_PASSWORD = "client-Key-Pass-59"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_local(
    broker_mode: str, pki: TestCA, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaCluster]:
    server = pki.issue("kafka-broker", ips=("127.0.0.1",), dns=("localhost",))
    keystore = pki.dir / "broker-keystore.pem"
    keystore.write_bytes(server.key.read_bytes() + server.cert.read_bytes())
    version = broker_mode.removeprefix("kafka-")
    cluster = start_kafka_cluster(
        version, 1, data_dir=tmp_path_factory.mktemp("kafka-tls"), tls=TlsSetup(keystore, pki.cert)
    )
    yield cluster
    cluster.stop()


def _config(tmp_path: Path, source: str, local: str, tls: dict[str, Any]) -> Path:
    lines = [
        f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {str(v).lower()}" for k, v in tls.items()
    ]
    path = tmp_path / "partsync.toml"
    path.write_text(
        'local = "dc1"\n'
        f'[clusters.a]\nbootstrap_servers = ["{source}"]\n'
        f'[clusters.dc1]\nbootstrap_servers = ["{local}"]\nsecurity_protocol = "SSL"\n'
        + "\n".join(lines)
        + "\n"
    )
    return path


def _client(pki: TestCA, tmp_path: Path) -> dict[str, Any]:
    client = pki.issue("partsync-client", client=True, password=KEY_PASSWORD)
    (tmp_path / "key-password").write_text(KEY_PASSWORD + "\n")
    return {
        "ssl_cafile": str(pki.cert),
        "ssl_certfile": str(client.cert),
        "ssl_keyfile": str(client.key),
        "ssl_password_file": str(tmp_path / "key-password"),
    }


def _run(cfg: Path, *args: str) -> CliResult:
    r = run_cli("--config", str(cfg), *args, env={"COLUMNS": "200"})
    assert KEY_PASSWORD not in r.stdout + r.stderr
    return r


def _local(doc: Any) -> dict[str, Any]:
    (c,) = [c for c in doc["clusters"] if c["cluster"] == "dc1"]
    return dict(c)


def test_mutual_tls_with_hostname_check_checks_and_syncs(
    tls_local: KafkaCluster, source_a: Broker, pki: TestCA, tmp_path: Path, topic: str
) -> None:
    create_topic(source_a.bootstrap, topic, 2)
    produce(source_a.bootstrap, topic, records(30, seed=21), partition=0, compression="zstd")
    produce(source_a.bootstrap, topic, records(12, seed=22), partition=1)
    create_topic(tls_local.bootstrap, topic, 2)
    cfg = _config(tmp_path, source_a.bootstrap, tls_local.ssl_bootstrap, _client(pki, tmp_path))

    r = _run(cfg, "check", "--topic", topic, "--sources", "a", "--json")
    assert r.code == 0, r.stdout + r.stderr
    local = _local(r.json)
    assert local["reachable"] and local["bootstrap"] == tls_local.ssl_bootstrap
    r = _run(cfg, "-vv", "sync", "--topic", topic, "--sources", "a")
    assert r.code == 0, r.stdout + r.stderr
    assert_partitions_identical(source_a.bootstrap, tls_local.bootstrap, topic, 2)


def test_tls_failures_name_the_cluster_and_the_reason(
    tls_local: KafkaCluster, source_a: Broker, pki: TestCA, tmp_path: Path, topic: str
) -> None:
    create_topic(source_a.bootstrap, topic, 1)
    good = _client(pki, tmp_path)
    other_ca = TestCA(tmp_path / "other", name="another CA")

    def reason(tls: dict[str, Any], local: str = tls_local.ssl_bootstrap) -> str:
        cfg = _config(tmp_path, source_a.bootstrap, local, tls)
        r = _run(cfg, "check", "--topic", topic, "--sources", "a", "--json")
        assert r.code == 1, r.stdout + r.stderr
        assert _local(r.json)["reachable"] is False
        return str(_local(r.json)["error"])

    # The broker's certificate is not signed by a CA the client trusts.
    assert "CERTIFICATE_VERIFY_FAILED" in reason({**good, "ssl_cafile": str(other_ca.cert)})
    # No client certificate, where the broker requires one: refused during or right after the
    # handshake (TLS 1.3 reports it at the first read).
    no_cert = {"ssl_cafile": good["ssl_cafile"]}
    assert "ALERT_BAD_CERTIFICATE" in reason(no_cert)

    # A broker whose certificate does not name the address connected to.
    with _TlsServer(pki.issue("elsewhere", dns=("kafka.example",))) as address:
        assert "mismatch" in reason(good, local=address)
        # ssl_check_hostname = false gets past the name (this server then speaks no Kafka).
        assert "mismatch" not in reason({**good, "ssl_check_hostname": False}, local=address)


class _TlsServer:
    """A TLS server on a loopback port presenting ``issued``, that closes every connection
    after the handshake."""

    def __init__(self, issued: Any) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(issued.cert, issued.key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                with self.ctx.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                conn.close()

    def __enter__(self) -> str:
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
