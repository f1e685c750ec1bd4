"""SASL and ACLs end to end, on Apache Kafka itself (the real-Kafka tier): a local cluster with a
SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256/512) under the StandardAuthorizer, a user with
the rights a sync needs and one without; `partsync check` tells them apart and `sync` runs as
the first. Passwords come from the environment and never appear in any output."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partsync.config import ClusterRef
from partsync.demo.brokers import Broker
from partsync.demo.data import assert_partitions_identical, create_topic, produce
from tests.conftest import CliResult
from tests.integration.sync_support import ends, records
from tests.support.kafka_jvm import KafkaCluster, SaslSetup, start_kafka_cluster

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

PASSWORDS = {"alice": "alice-Secret-31", "bob": "bob-Secret-47"}
PREFIX = "sec-"


def _grant(bootstrap: str) -> None:
    """alice: what a sync needs (topics, the job's group, 'partsync:' transactional ids, and
    DESCRIBE on the cluster to read ACLs); bob: reading topics only. As User:ANONYMOUS, the
    PLAINTEXT listener's super user."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourceType,
    )

    def acl(user: str, op: Any, rtype: Any, name: str, prefixed: bool = True) -> Any:
        kind = ACLResourcePatternType.PREFIXED if prefixed else ACLResourcePatternType.LITERAL
        return ACL(
            f"User:{user}", "*", op, ACLPermissionType.ALLOW, ResourcePattern(rtype, name, kind)
        )

    acls = [
        acl("alice", ACLOperation.ALL, ResourceType.TOPIC, PREFIX),
        acl("alice", ACLOperation.ALL, ResourceType.GROUP, "partsync."),
        acl("alice", ACLOperation.ALL, ResourceType.TRANSACTIONAL_ID, "partsync:"),
        acl("alice", ACLOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster", False),
        acl("bob", ACLOperation.READ, ResourceType.TOPIC, PREFIX),
    ]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.create_acls(acls)
        assert not result["failed"], result["failed"]
    finally:
        admin.close()


@pytest.fixture(scope="module")
def secured(broker_mode: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    version = broker_mode.removeprefix("kafka-")
    cluster = start_kafka_cluster(
        version, 1, data_dir=tmp_path_factory.mktemp("kafka-sasl"), sasl=SaslSetup(PASSWORDS)
    )
    try:
        _grant(cluster.bootstrap)
        yield cluster
    finally:
        cluster.stop()


def _config(tmp_path: Path, source: Broker, secured: KafkaCluster, user: str, mech: str) -> Path:
    """A config naming source ``a`` and the secured local cluster ``sec``, with ``user``'s
    password from $SEC_PASSWORD (OAUTHBEARER: ``user`` is a token file)."""
    path = tmp_path / f"partsync-{Path(user).name}-{mech}.toml"
    login = (
        f'sasl_oauthbearer_token_file = "{user}"\n'
        if mech == "OAUTHBEARER"
        else f'sasl_plain_username = "{user}"\nsasl_plain_password_env = "SEC_PASSWORD"\n'
    )
    path.write_text(
        'local = "sec"\n'
        f'[clusters.a]\nbootstrap_servers = ["{source.bootstrap}"]\n'
        f'[clusters.sec]\nbootstrap_servers = ["{secured.sasl_bootstrap}"]\n'
        'security_protocol = "SASL_PLAINTEXT"\n'
        f'sasl_mechanism = "{mech}"\n' + login
    )
    return path


def _run(cfg: Path, password: str, *args: str) -> CliResult:
    from tests.conftest import run_cli

    r = run_cli("--config", str(cfg), *args, env={"SEC_PASSWORD": password, "COLUMNS": "200"})
    for secret in PASSWORDS.values():
        assert secret not in r.stdout + r.stderr
    return r


def _findings(doc: Any, cluster: str) -> dict[tuple[str, str], dict[str, Any]]:
    (c,) = [c for c in doc["clusters"] if c["cluster"] == cluster]
    return {(f["subject"], f["need"]): f for f in c["findings"]}


def _until_authorized(cfg: Path, password: str, topic: str) -> None:
    """ACLs reach the broker's authorizer through the metadata log: wait until they did."""
    deadline = time.monotonic() + 30
    while True:
        r = _run(cfg, password, "plan", "--topic", topic, "--sources", "a", "--json")
        if r.code == 0 or time.monotonic() > deadline:
            assert r.code == 0, r.stdout + r.stderr
            return
        time.sleep(0.3)


def _topic(secured: KafkaCluster, source: Broker, topic: str, counts: tuple[int, ...]) -> str:
    """A topic under the granted prefix, on the source with ``counts`` records per partition
    (lz4 after the first) and empty on the secured cluster."""
    name = PREFIX + topic
    create_topic(source.bootstrap, name, len(counts))
    for p, n in enumerate(counts):
        produce(
            source.bootstrap,
            name,
            records(n, seed=11 + p),
            partition=p,
            compression="lz4" if p else "none",
        )
    create_topic(secured.bootstrap, name, len(counts))
    return name


def test_a_user_with_the_rights_checks_ok_and_syncs_over_sasl(
    secured: KafkaCluster, source_a: Broker, tmp_path: Path, topic: str
) -> None:
    name = _topic(secured, source_a, topic, (40, 25))
    scram = _config(tmp_path, source_a, secured, "alice", "SCRAM-SHA-256")
    _until_authorized(scram, PASSWORDS["alice"], name)

    r = _run(scram, PASSWORDS["alice"], "check", "--topic", name, "--sources", "a", "--json")
    assert r.code == 0, r.stdout + r.stderr
    sec = _findings(r.json, "sec")
    for need in ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"):
        assert sec[(f"topic {name}", need)]["verdict"] == "ok", sec
    # WRITE on the transactional id: from the ACLs, which alice may read.
    tid = f"transactional id partsync:{name}:0"
    assert sec[(tid, "WRITE")] == {
        "subject": tid,
        "need": "WRITE",
        "verdict": "ok",
        "detail": "fencing (InitProducerId)",
    }
    assert sec[(f"group partsync.{name}", "READ")]["verdict"] == "ok"

    r = _run(scram, PASSWORDS["alice"], "-vv", "sync", "--topic", name, "--sources", "a")
    assert r.code == 0, r.stdout + r.stderr
    assert "in the clear" not in r.stderr  # kafka-python's warning at every connection
    assert_partitions_identical(source_a.bootstrap, secured.bootstrap, name, 2)
    # The other mechanisms authenticate the same user.
    for mech in ("PLAIN", "SCRAM-SHA-512"):
        cfg = _config(tmp_path, source_a, secured, "alice", mech)
        r = _run(cfg, PASSWORDS["alice"], "plan", "--topic", name, "--sources", "a", "--json")
        assert r.code == 0, r.stdout + r.stderr
        assert {p["condition"] for p in r.json["topics"][0]["partitions"]} == {"in-sync"}
        # PLAIN sends the password itself: said once per cluster, not per connection.
        assert r.stderr.count("SASL PLAIN without TLS") == (mech == "PLAIN"), r.stderr


def test_check_names_what_a_user_lacks_and_sync_writes_nothing(
    secured: KafkaCluster, source_a: Broker, tmp_path: Path, topic: str
) -> None:
    name = _topic(secured, source_a, topic, (10,))
    cfg = _config(tmp_path, source_a, secured, "bob", "SCRAM-SHA-512")
    _until_authorized(cfg, PASSWORDS["bob"], name)

    r = _run(cfg, PASSWORDS["bob"], "check", "--topic", name, "--sources", "a", "--json")
    assert r.code == 1, r.stdout + r.stderr
    sec = _findings(r.json, "sec")
    assert sec[(f"topic {name}", "DESCRIBE")]["verdict"] == "ok"  # implied by READ
    assert sec[(f"topic {name}", "WRITE")]["verdict"] == "missing"
    assert sec[(f"topic {name}", "DESCRIBE_CONFIGS")]["verdict"] == "missing"
    assert sec[(f"transactional id partsync:{name}:0", "DESCRIBE")]["verdict"] == "missing"
    assert sec[(f"group partsync.{name}", "DESCRIBE")]["verdict"] == "missing"
    r = _run(cfg, PASSWORDS["bob"], "check", "--topic", name, "--sources", "a")
    assert r.code == 1 and "not ready: " in r.stderr and "MISSING" in r.stdout

    r = _run(cfg, PASSWORDS["bob"], "-vv", "sync", "--topic", name, "--sources", "a", "--no-group")
    assert r.code != 0, r.stdout + r.stderr
    assert ends(secured.bootstrap, name, 1) == {0: 0}


def test_a_wrong_password_is_an_unreachable_cluster_named_without_the_password(
    secured: KafkaCluster, source_a: Broker, tmp_path: Path, topic: str
) -> None:
    cfg = _config(tmp_path, source_a, secured, "alice", "SCRAM-SHA-256")
    r = _run(cfg, PASSWORDS["bob"], "check", "--topic", PREFIX + topic, "--sources", "a", "--json")
    assert r.code == 1, r.stdout + r.stderr
    (sec,) = [c for c in r.json["clusters"] if c["cluster"] == "sec"]
    assert sec["reachable"] is False
    assert "SASL authentication as 'alice' failed" in sec["error"]


def test_oauthbearer_token_file_is_read_at_each_connection(
    secured: KafkaCluster, source_a: Broker, tmp_path: Path, topic: str
) -> None:
    name = _topic(secured, source_a, topic, (5,))
    token = tmp_path / "token"
    token.write_text(SaslSetup.unsigned_jwt("alice") + "\n")
    cfg = _config(tmp_path, source_a, secured, str(token), "OAUTHBEARER")
    _until_authorized(cfg, "", name)

    # The principal is the token's subject: alice's rights, the ACLs readable.
    r = _run(cfg, "", "check", "--topic", name, "--sources", "a", "--json")
    assert r.code == 0, r.stdout + r.stderr
    tid = f"transactional id partsync:{name}:0"
    assert _findings(r.json, "sec")[(tid, "WRITE")]["verdict"] == "ok"
    r = _run(cfg, "", "sync", "--topic", name, "--sources", "a")
    assert r.code == 0, r.stdout + r.stderr
    assert_partitions_identical(source_a.bootstrap, secured.bootstrap, name, 1)

    # A refreshed token file is followed without any change to the config: now bob's.
    token.write_text(SaslSetup.unsigned_jwt("bob"))
    r = _run(cfg, "", "check", "--topic", name, "--sources", "a", "--json")
    assert r.code == 1, r.stdout + r.stderr
    assert _findings(r.json, "sec")[(f"topic {name}", "WRITE")]["verdict"] == "missing"
    token.unlink()
    r = _run(cfg, "", "check", "--topic", name, "--sources", "a")
    assert r.code == 2 and "sasl_oauthbearer_token_file: cannot read" in r.stderr


def test_a_connection_is_retired_before_its_oauth_session_ends(
    secured: KafkaCluster, tmp_path: Path
) -> None:
    """The broker ends an OAUTHBEARER session when its token expires (KIP-368); partsync takes a
    new connection before that rather than have one cut under a request."""
    from partsync.config import Security
    from partsync.io.cluster import Cluster

    token = tmp_path / "short-token"
    token.write_text(SaslSetup.unsigned_jwt("alice", lifetime_s=4))
    host, port = secured.sasl_bootstrap.split(",")[0].rsplit(":", 1)
    sec = Security(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_file=str(token),
    )
    with Cluster(ClusterRef("sec", ((host, int(port)),), security=sec)) as c:
        node = min(c.metadata().brokers)
        first = c.broker_conn(node)
        assert not first.expiring
        deadline = time.monotonic() + 10
        while not first.expiring:
            assert time.monotonic() < deadline, "the session lifetime was not honoured"
            time.sleep(0.2)
        token.write_text(SaslSetup.unsigned_jwt("alice"))  # refreshed by its agent
        again = c.broker_conn(node)
        assert again is not first and not again.expiring
        assert again.metadata(None).brokers  # the new session works
