"""ACLs following the source (``--sync-acls``) and the read-only mirror (``--read-only``) on
Apache Kafka itself: two clusters under the StandardAuthorizer (their PLAINTEXT listener's
User:ANONYMOUS is the super user the tests set up with), partsync reading the source as that
and writing the local cluster as ``User:partsync`` over SASL, through the strict proxy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.brokers import Broker
from partsync.demo.data import assert_partitions_identical, create_topic, produce
from partsync.io.acls import AclRecord
from partsync.io.cluster import Cluster
from tests.conftest import CliResult, run_cli
from tests.integration.kafka_proxy import StrictProxy
from tests.integration.sync_support import cluster_ref, ends, records
from tests.support.kafka_jvm import KafkaCluster, SaslSetup, start_kafka_cluster

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only, pytest.mark.kafka_versions]

PASSWORDS = {"partsync": "partsync-Secret-5", "app": "app-Secret-8"}
PREFIX = "acl-"


def _acl_types() -> Any:
    import kafka.admin as ka

    return ka


def _acl(
    user: str, op: str, rtype: str, name: str, *, pattern: str = "LITERAL", deny: bool = False
) -> Any:
    ka = _acl_types()
    return ka.ACL(
        user if ":" in user else f"User:{user}",
        "*",
        ka.ACLOperation[op],
        ka.ACLPermissionType.DENY if deny else ka.ACLPermissionType.ALLOW,
        ka.ResourcePattern(ka.ResourceType[rtype], name, ka.ACLResourcePatternType[pattern]),
    )


def _change(bootstrap: str, add: list[Any] = (), remove: list[Any] = ()) -> None:  # type: ignore[assignment]
    """As User:ANONYMOUS, the super user."""
    ka = _acl_types()
    admin = ka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        if add:
            result = admin.create_acls(list(add))
            assert not result["failed"], result["failed"]
        for a in remove:
            f = ka.ACLFilter(
                a.principal,
                a.host,
                a.operation,
                a.permission_type,
                ka.ResourcePatternFilter(
                    a.resource_pattern.resource_type,
                    a.resource_pattern.resource_name,
                    a.resource_pattern.pattern_type,
                ),
            )
            admin.delete_acls([f])
    finally:
        admin.close()


def _acls(bootstrap: str, name: str, rtype: str = "TOPIC") -> set[tuple[str, str, str, str, str]]:
    """(principal, operation, permission, pattern, name) of every ACL on resource ``name``."""
    ka = _acl_types()
    admin = ka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        f = ka.ACLFilter(
            None,
            None,
            ka.ACLOperation.ANY,
            ka.ACLPermissionType.ANY,
            ka.ResourcePatternFilter(ka.ResourceType[rtype], name, ka.ACLResourcePatternType.MATCH),
        )
        found, err = admin.describe_acls(f)
        assert not err or err.errno == 0, err
    finally:
        admin.close()
    return {
        (
            a.principal,
            a.operation.name,
            a.permission_type.name,
            a.resource_pattern.pattern_type.name,
            a.resource_pattern.resource_name,
        )
        for a in found
    }


def _until(what: str, cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def clusters(
    broker_mode: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[KafkaCluster, KafkaCluster]]:
    """(source, local), both under the StandardAuthorizer with
    allow.everyone.if.no.acl.found=false; User:partsync may do what a sync with --sync-acls
    needs on the local one."""
    version = broker_mode.removeprefix("kafka-")
    started = []
    try:
        for role in ("src", "dst"):
            started.append(
                start_kafka_cluster(
                    version,
                    1,
                    data_dir=tmp_path_factory.mktemp(f"acl-{role}"),
                    sasl=SaslSetup(PASSWORDS),
                )
            )
        src, dst = started
        _change(
            dst.bootstrap,
            add=[
                _acl("partsync", "ALL", "TOPIC", PREFIX, pattern="PREFIXED"),
                # partsync's own records: ACLs, promotions, the sources' ends.
                _acl("partsync", "ALL", "TOPIC", "partsync.", pattern="PREFIXED"),
                _acl("partsync", "ALL", "GROUP", "partsync.", pattern="PREFIXED"),
                _acl("partsync", "ALL", "TRANSACTIONAL_ID", "partsync:", pattern="PREFIXED"),
                _acl("partsync", "ALTER", "CLUSTER", "kafka-cluster"),
                _acl("partsync", "DESCRIBE", "CLUSTER", "kafka-cluster"),
                _acl("partsync", "DESCRIBE_CONFIGS", "CLUSTER", "kafka-cluster"),
                _acl("partsync", "CREATE", "CLUSTER", "kafka-cluster"),
            ],
        )
        yield src, dst
    finally:
        for c in started:
            c.stop()


@pytest.fixture
def proxy(clusters: tuple[KafkaCluster, KafkaCluster]) -> Iterator[StrictProxy]:
    with StrictProxy(clusters[1].sasl_bootstrap) as p:
        yield p
        p.assert_clean()


def _config(tmp_path: Path, src: KafkaCluster, proxy: StrictProxy) -> Path:
    path = tmp_path / "partsync.toml"
    path.write_text(
        'local = "dst"\n'
        f'[clusters.src]\nbootstrap_servers = ["{src.bootstrap}"]\n'
        f'[clusters.dst]\nbootstrap_servers = ["{proxy.bootstrap}"]\n'
        'security_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "PLAIN"\n'
        'sasl_plain_username = "partsync"\nsasl_plain_password_env = "PARTSYNC_PASSWORD"\n'
        '[acls]\nexclude = ["User:skipme"]\n'
        '[acls.map]\n"User:mapped" = "User:mapped-dr"\n'
    )
    return path


def _run(cfg: Path, *args: str) -> CliResult:
    return run_cli(
        "--config",
        str(cfg),
        *args,
        env={"PARTSYNC_PASSWORD": PASSWORDS["partsync"], "COLUMNS": "200"},
    )


def _source_topic(src: KafkaCluster, topic: str, n: int = 30) -> str:
    name = PREFIX + topic
    create_topic(src.bootstrap, name, 1)
    produce(src.bootstrap, name, records(n, seed=5))
    return name


def _produce_as_app(dst: KafkaCluster, topic: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=dst.sasl_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="app",
        sasl_plain_password=PASSWORDS["app"],
        enable_idempotence=True,
        acks="all",
        max_block_ms=10_000,
    )
    try:
        p.send(topic, key=b"foreign", value=b"not from the source", partition=0).get(timeout=15)
    finally:
        p.close(timeout=5)


def test_acls_follow_the_source_and_a_read_only_mirror_keeps_writers_out(
    clusters: tuple[KafkaCluster, KafkaCluster], proxy: StrictProxy, tmp_path: Path, topic: str
) -> None:
    src, dst = clusters
    name = _source_topic(src, topic)
    reader = _acl("reader", "READ", "TOPIC", name)
    ops = _acl("ops", "DESCRIBE", "TOPIC", name)
    _change(
        src.bootstrap,
        add=[
            reader,
            ops,
            _acl("app", "WRITE", "TOPIC", name),
            _acl("team", "ALL", "TOPIC", name, pattern="PREFIXED"),
            _acl("skipme", "READ", "TOPIC", name),
            _acl("mapped", "READ", "TOPIC", name),
            _acl("shady", "READ", "TOPIC", name, deny=True),
        ],
    )
    # An operator's grant on the mirror, the same as one of the source's: never partsync's.
    _change(dst.bootstrap, add=[ops])
    cfg = _config(tmp_path, src, proxy)
    _until(
        "the operator's ACL",
        lambda: ("User:ops", "DESCRIBE", "ALLOW", "LITERAL", name) in _acls(dst.bootstrap, name),
    )

    link = ("--topic", name, "--sources", "src", "--create-missing", "--sync-acls", "--read-only")
    r = _run(cfg, "check", *link, "--json")
    found = {
        (c["cluster"], f["subject"], f["need"]): f["verdict"]
        for c in r.json["clusters"]
        for f in c["findings"]
    }
    assert found[("src", "cluster", "DESCRIBE")] == "ok", r.stdout
    assert found[("dst", "cluster", "ALTER")] == "ok", r.stdout
    assert found[("dst", "cluster", "authorizer")] == "ok", r.stdout

    args = ("sync", *link, "--json")
    r = _run(cfg, *args)
    assert r.code == 0, r.stdout + r.stderr
    assert_partitions_identical(src.bootstrap, dst.bootstrap, name, 1)
    warnings = "\n".join(r.json["topics"][0]["warnings"])
    assert f"TOPIC:LITERAL:{name} User:app@* WRITE ALLOW of src not copied: withheld" in warnings
    assert "User:skipme@* READ ALLOW of src not copied: principal not selected" in warnings
    mine = {
        ("User:reader", "READ", "ALLOW", "LITERAL", name),
        ("User:mapped-dr", "READ", "ALLOW", "LITERAL", name),
        ("User:shady", "READ", "DENY", "LITERAL", name),
        *(
            ("User:team", op, "ALLOW", "PREFIXED", name)
            for op in ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")
        ),
    }
    theirs = {
        ("User:ops", "DESCRIBE", "ALLOW", "LITERAL", name),
        ("User:partsync", "ALL", "ALLOW", "PREFIXED", PREFIX),
    }
    assert _acls(dst.bootstrap, name) == mine | theirs
    # partsync's record: what it created, and the grant --read-only withheld (for failover).
    with Cluster(cluster_ref(dst.bootstrap, "dst")) as c:
        created, withheld = AclRecord(c).read()
    assert {(a.principal, a.permission) for a in created if a.name == name} == {
        ("User:reader", 3),
        ("User:mapped-dr", 3),
        ("User:shady", 2),
        ("User:team", 3),
    }
    assert {(a.principal, a.operation) for a in withheld if a.name == name} == {
        ("User:app", 4),
        ("User:team", 2),
    }

    # The source's writer is not let in: its grant was withheld.
    from kafka.errors import KafkaError

    with pytest.raises(KafkaError, match="TopicAuthorizationFailed|not authorized"):
        _produce_as_app(dst, name)

    # The source drops two grants: partsync removes the one it created, not the operator's.
    _change(src.bootstrap, remove=[reader, ops])
    _until(
        "the source's ACLs to go",
        lambda: not {p for p, *_ in _acls(src.bootstrap, name)} & {"User:reader", "User:ops"},
    )
    # plan says what sync would do, and writes nothing.
    planned = _run(
        cfg, "plan", "--topic", name, "--sources", "src", "--sync-acls", "--read-only", "--json"
    )
    assert planned.code == 0, planned.stdout + planned.stderr
    gone = f"would delete ACL TOPIC:LITERAL:{name} User:reader@* READ ALLOW"
    assert gone in "\n".join(planned.json["topics"][0]["warnings"]), planned.stdout
    assert ("User:reader", "READ", "ALLOW", "LITERAL", name) in _acls(dst.bootstrap, name)
    r = _run(cfg, *args)
    assert r.code == 0, r.stdout + r.stderr
    assert f"deleted ACL TOPIC:LITERAL:{name} User:reader@* READ ALLOW" in "\n".join(
        r.json["topics"][0]["warnings"]
    )
    assert _acls(dst.bootstrap, name) == (mine | theirs) - {
        ("User:reader", "READ", "ALLOW", "LITERAL", name)
    }

    # A third run changes nothing.
    r = _run(cfg, *args)
    assert r.code == 0 and not any(
        "ACL" in w and "not copied" not in w for w in r.json["topics"][0]["warnings"]
    ), r.stdout

    # Failover: the promotion grants what --read-only withheld, and the writer is let in.
    r = _run(cfg, "promote", "--topic", name, "--sources", "src", "--no-group", "--json")
    assert r.code == 0, r.stdout + r.stderr
    assert sorted(r.json["acls_granted"]) == [
        f"TOPIC:LITERAL:{name} User:app@* WRITE ALLOW",
        # A prefixed grant, by name: as a prefix it would open other mirrors too.
        f"TOPIC:LITERAL:{name} User:team@* ALL ALLOW",
    ], r.json
    _until(
        "the granted write",
        lambda: ("User:app", "WRITE", "ALLOW", "LITERAL", name) in _acls(dst.bootstrap, name),
    )
    _produce_as_app(dst, name)


def test_without_read_only_a_foreign_write_is_reported_with_its_producer(
    clusters: tuple[KafkaCluster, KafkaCluster], proxy: StrictProxy, tmp_path: Path, topic: str
) -> None:
    src, dst = clusters
    name = _source_topic(src, topic, 12)
    _change(src.bootstrap, add=[_acl("app", "WRITE", "TOPIC", name)])
    cfg = _config(tmp_path, src, proxy)
    _until("the source's ACL", lambda: bool(_acls(src.bootstrap, name)))
    r = _run(
        cfg,
        "sync",
        "--topic",
        name,
        "--sources",
        "src",
        "--create-missing",
        "--sync-acls",
        "--json",
    )
    assert r.code == 0, r.stdout + r.stderr
    assert ("User:app", "WRITE", "ALLOW", "LITERAL", name) in _acls(dst.bootstrap, name)

    # --read-only names the grant that keeps the mirror writable.
    r = _run(cfg, "check", "--topic", name, "--sources", "src", "--read-only", "--json")
    assert r.code == 1, r.stdout + r.stderr
    (f,) = [f for c in r.json["clusters"] for f in c["findings"] if f["need"] == "read-only"]
    assert (
        f["verdict"] == "missing" and f"TOPIC:LITERAL:{name} User:app@* WRITE ALLOW" in f["detail"]
    )

    _produce_as_app(dst, name)  # the mirror's 13th record, which no source has
    r = _run(cfg, "sync", "--topic", name, "--sources", "src", "--json")
    assert r.code == 3, r.stdout + r.stderr
    (p,) = r.json["topics"][0]["partitions"]
    assert p["status"] == "unsafe"
    assert "local log end 13 is beyond every source's end (furthest: 12)" in p["reason"]
    assert "data batch 12..12 (1 records" in p["reason"], p["reason"]
    assert "written by producer id" in p["reason"] and "active producer" in p["reason"], p["reason"]

    # The source goes on past it: the next append's check finds the histories differ at the
    # mirror's last batch, and the divergence names the foreign batch too.
    produce(src.bootstrap, name, records(3, seed=99))
    r = _run(cfg, "sync", "--topic", name, "--sources", "src", "--json")
    assert r.code == 3, r.stdout + r.stderr
    reason = r.json["topics"][0]["partitions"][0]["reason"]
    assert "divergent history" in reason and "written by producer id" in reason, reason


def test_a_follower_copies_an_acl_created_on_the_source_while_it_runs(
    clusters: tuple[KafkaCluster, KafkaCluster], proxy: StrictProxy, tmp_path: Path, topic: str
) -> None:
    src, dst = clusters
    name = _source_topic(src, topic, 5)
    cfg = _config(tmp_path, src, proxy)
    log = tmp_path / "follower.log"
    argv = [
        sys.executable,
        "-m",
        "partsync",
        "--config",
        str(cfg),
        "-v",
        "sync",
        "--topic",
        name,
        "--sources",
        "src",
        "--create-missing",
        "--sync-acls",
        "--follow",
        "--topic-check-interval",
        "1",
        "--session-timeout",
        "6",
        "--follow-wait-ms",
        "200",
    ]
    env = {
        **{k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"},
        "PARTSYNC_PASSWORD": PASSWORDS["partsync"],
    }
    with log.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            _until("the mirror", lambda: dst_has(dst, name, 5), timeout=60)
            late = ("User:late", "READ", "ALLOW", "LITERAL", name)
            _change(src.bootstrap, add=[_acl("late", "READ", "TOPIC", name)])
            _until(
                "the new ACL on the mirror", lambda: late in _acls(dst.bootstrap, name), timeout=30
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
    text = log.read_text()
    assert code == 0, text
    assert f"created ACL TOPIC:LITERAL:{name} User:late@* READ ALLOW, as src has it" in text


def dst_has(dst: KafkaCluster, name: str, n: int) -> bool:
    try:
        return ends(dst.bootstrap, name, 1) == {0: n}
    except Exception:  # noqa: BLE001 (not created yet, or no leader yet: not there)
        return False


def test_read_only_on_a_cluster_without_an_authorizer_is_refused_before_anything_is_written(
    source_a: Broker, local_broker: Broker, tmp_path: Path, topic: str
) -> None:
    create_topic(source_a.bootstrap, topic, 1)
    produce(source_a.bootstrap, topic, records(5, seed=3))
    create_topic(local_broker.bootstrap, topic, 1)
    cfg = tmp_path / "plain.toml"
    cfg.write_text(
        'local = "dst"\n'
        f'[clusters.src]\nbootstrap_servers = ["{source_a.bootstrap}"]\n'
        f'[clusters.dst]\nbootstrap_servers = ["{local_broker.bootstrap}"]\n'
    )
    r = _run(cfg, "sync", "--topic", topic, "--sources", "src", "--read-only", "--json")
    assert r.code == 2, r.stdout + r.stderr
    assert "--read-only: cluster dst has no authorizer" in r.stdout, r.stdout
    assert ends(local_broker, topic, 1) == {0: 0}
    r = _run(cfg, "check", "--topic", topic, "--sources", "src", "--read-only", "--json")
    assert r.code == 1
    (f,) = [f for c in r.json["clusters"] for f in c["findings"] if f["need"] == "authorizer"]
    assert f["verdict"] == "missing" and "no authorizer" in f["detail"], f
