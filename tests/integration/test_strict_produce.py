"""partsync's appends obey Apache Kafka's Produce rules, checked on the wire by a strict proxy.

The first half proves the checker in ``kafka_proxy.py`` can fail: it is fed hand-built Produce
requests that break each rule (no broker involved, fast). The second half syncs a topic with
every codec, null keys/values and headers from one PyPI broker into the other *through* the
proxy, in both directions (Tansu -> noida and noida -> Tansu), and asserts that no rule was
broken, that Produce requests were actually checked, and that every offset holds the same record
on both clusters.
"""

from __future__ import annotations

import struct
import uuid
import warnings
from collections.abc import Callable, Iterator

import crc32c
import pytest

from partsync.demo.brokers import Broker
from partsync.demo.data import (
    COMPRESSIONS,
    assert_partitions_identical,
    create_topic,
    make_records,
    produce,
)
from tests.conftest import CliResult, is_real_kafka, run_cli
from tests.integration.kafka_proxy import (
    StrictProxy,
    Violation,
    check_produce_request,
    parse_request_header,
    rewrite_metadata_response,
    strict_proxy,  # noqa: F401  (pytest fixture)
)
from tests.integration.sync_support import ends

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata.metadata import MetadataResponse
    from kafka.protocol.producer.produce import ProduceRequest
    from kafka.record.default_records import DefaultRecordBatchBuilder

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TS = 1_700_000_000_000


# =============================================================================================
# The checker itself (no broker): every rule can fail
# =============================================================================================


def batch(
    n: int = 3,
    *,
    offsets: list[int] | None = None,
    codec: str = "none",
    base_offset: int = 0,
    transactional: bool = False,
    producer: tuple[int, int, int] = (1000, 0, 0),
) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODEC_IDS[codec],
        is_transactional=transactional,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 20,
    )
    for i, delta in enumerate(offsets if offsets is not None else range(n)):
        b.append(delta, timestamp=TS + i, key=b"k%d" % i, value=b"v" * 50, headers=[("h", b"x")])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base_offset)  # not CRC-covered
    return bytes(data)


def with_attributes(data: bytes, bits: int, *, fix_crc: bool = True) -> bytes:
    out = bytearray(data)
    (attrs,) = struct.unpack_from(">h", out, 21)
    struct.pack_into(">h", out, 21, attrs | bits)
    if fix_crc:
        struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def produce_frame(
    partitions: dict[int, bytes | None],
    *,
    topic: str = "t",
    acks: int = -1,
    transactional_id: str | None = None,
    version: int = 8,
    correlation_id: int = 41,
) -> bytes:
    """A Produce request as it travels on the wire, minus the size prefix."""
    D = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            D(
                name=topic,
                partition_data=[
                    D.PartitionProduceData(index=p, records=r) for p, r in partitions.items()
                ],
            )
        ],
    )
    req.API_VERSION = version
    req.with_header(correlation_id=correlation_id, client_id="checker-test")
    return bytes(req.encode(header=True))


def rules(violations: list[Violation]) -> list[tuple[str, int | None]]:
    return sorted((v.rule, v.partition) for v in violations)


@pytest.mark.parametrize("version", [3, 5, 7, 8, 9, 11])
@pytest.mark.parametrize("codec", COMPRESSIONS)
def test_checker_accepts_a_good_request(version: int, codec: str) -> None:
    frame = produce_frame({0: batch(4, codec=codec), 3: batch(1, codec=codec)}, version=version)
    check = check_produce_request(frame)
    assert check.violations == []
    assert (check.header.api_key, check.header.api_version, check.header.correlation_id) == (
        0,
        version,
        41,
    )
    assert check.header.client_id == "checker-test"
    assert check.header.flexible is (version >= 9)
    assert check.acks == -1
    assert [(b.partition, b.record_count, b.codec) for b in check.batches] == [
        (0, 4, codec),
        (3, 1, codec),
    ]


BAD_CASES = {
    "two-batches-in-one-partition": (
        {"partitions": {0: batch(2) + batch(3), 1: batch(2)}},
        [("batch-count", 0)],
    ),
    "base-offset-5": ({"partitions": {0: batch(2, base_offset=5)}}, [("base-offset", 0)]),
    "bad-crc": (
        {"partitions": {0: batch(2)[:-1] + bytes([batch(2)[-1] ^ 0xFF])}},
        [("crc", 0)],
    ),
    "crc-not-updated-after-attribute-change": (
        {"partitions": {2: with_attributes(batch(2), 0x08, fix_crc=False)}},
        [("crc", 2)],
    ),
    "holey-batch": ({"partitions": {0: batch(offsets=[0, 2, 3])}}, [("offset-delta", 0)]),
    "control-batch": (
        {
            "partitions": {0: with_attributes(batch(1, transactional=True), 0x20)},
            "transactional_id": "tx",
        },
        [("control", 0)],
    ),
    "transactional-without-transactional-id": (
        {"partitions": {0: batch(2, transactional=True)}},
        [("transactional", 0)],
    ),
    "acks-1": ({"partitions": {0: batch(2)}, "acks": 1}, [("acks", None)]),
    "magic-1": (
        {"partitions": {0: batch(2)[:16] + b"\x01" + batch(2)[17:]}},
        [("magic", 0)],
    ),
    "unknown-codec": ({"partitions": {0: with_attributes(batch(2), 0x07)}}, [("codec", 0)]),
    "idempotent-without-sequence": (
        {"partitions": {0: batch(2, producer=(7, 0, -1))}},
        [("sequence", 0)],
    ),
    "empty-records": ({"partitions": {0: b""}}, [("batch-count", 0)]),
    "null-records": ({"partitions": {0: None}}, [("batch-count", 0)]),
    "truncated-batch": (
        {"partitions": {0: batch(3)[:-10]}},
        [("batch-count", 0), ("framing", 0)],
    ),
    "trailing-garbage": ({"partitions": {0: batch(3) + b"\x00" * 20}}, [("framing", 0)]),
    "everything-at-once": (
        {
            "partitions": {
                0: batch(2) + batch(2, base_offset=2),
                1: batch(offsets=[0, 5], base_offset=9),
                2: with_attributes(batch(1, transactional=True), 0x20),
            },
            "acks": 0,
        },
        [
            ("acks", None),
            ("base-offset", 0),
            ("base-offset", 1),
            ("batch-count", 0),
            ("control", 2),
            ("offset-delta", 1),
            ("transactional", 2),
        ],
    ),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_checker_reports_each_violation(case: str) -> None:
    kwargs, expected = BAD_CASES[case]
    check = check_produce_request(produce_frame(**kwargs))  # type: ignore[arg-type]
    assert rules(check.violations) == sorted(expected)
    for v in check.violations:
        assert v.correlation_id == 41
        assert v.topic == ("t" if v.partition is not None else None)
        assert v.rule in str(v)


def test_checker_can_be_told_other_acks() -> None:
    frame = produce_frame({0: batch(2)}, acks=1)
    assert check_produce_request(frame, require_acks=1).violations == []
    assert check_produce_request(frame, require_acks=None).violations == []


def test_transactional_batch_with_transactional_id_is_fine() -> None:
    frame = produce_frame({0: batch(2, transactional=True)}, transactional_id="tx-1", version=8)
    check = check_produce_request(frame)
    assert check.violations == []
    assert check.transactional_id == "tx-1"


def test_undecodable_produce_is_a_violation() -> None:
    frame = produce_frame({0: batch(2)})
    header = parse_request_header(frame)
    garbage = check_produce_request(frame[: header.size] + b"\xff\xff")
    assert [v.rule for v in garbage.violations] == ["decode"]
    # A frame cut short still "decodes" (the last bytes field is sliced); re-encoding catches it.
    short = check_produce_request(frame[:-30])
    assert "decode" in [v.rule for v in short.violations]


def test_request_header_with_tagged_fields() -> None:
    """Header v2 (flexible versions) ends in tagged fields; they must be skipped exactly."""
    plain = produce_frame({0: batch(2)}, version=9, correlation_id=7)
    header = parse_request_header(plain)
    assert header.flexible and header.tagged_fields == {}
    # Same request with two tagged fields in its header.
    tags = b"\x02" + b"\x00\x03abc" + b"\x05\x01z"
    frame = plain[: header.size - 1] + tags + plain[header.size :]
    tagged = parse_request_header(frame)
    assert tagged.tagged_fields == {0: b"abc", 5: b"z"}
    assert tagged.size == header.size - 1 + len(tags)
    assert (tagged.api_key, tagged.api_version, tagged.correlation_id) == (0, 9, 7)
    check = check_produce_request(frame)
    assert check.violations == [] and len(check.batches) == 1


def test_request_header_non_flexible_and_null_client_id() -> None:
    frame = struct.pack(">hhih", 3, 4, 99, -1) + b"body"
    h = parse_request_header(frame)
    assert (h.api_name, h.api_version, h.correlation_id, h.client_id, h.flexible, h.size) == (
        "Metadata",
        4,
        99,
        None,
        False,
        10,
    )


def _metadata(version: int, brokers: list[tuple[int, str, int]]) -> bytes:
    B = MetadataResponse.MetadataResponseBroker
    resp = MetadataResponse(
        throttle_time_ms=0,
        brokers=[B(node_id=n, host=h, port=p, rack=None) for n, h, p in brokers],
        cluster_id="c",
        controller_id=brokers[0][0],
        topics=[],
    )
    resp.API_VERSION = version
    resp.with_header(correlation_id=12)
    return bytes(resp.encode(header=True))


@pytest.mark.parametrize("version", [1, 4, 7, 9, 12])
def test_metadata_rewrite_advertises_the_proxy(version: int) -> None:
    frame, problem = rewrite_metadata_response(
        _metadata(version, [(111, "10.1.2.3", 9092)]), version, "127.0.0.1", 5555
    )
    assert problem is None
    resp = MetadataResponse.decode(frame, version=version, header=True)
    assert resp.header.correlation_id == 12
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(111, "127.0.0.1", 5555)]
    assert resp.cluster_id == ("c" if version >= 2 else None)


def test_metadata_rewrite_refuses_several_brokers() -> None:
    original = _metadata(7, [(1, "a", 1), (2, "b", 2)])
    frame, problem = rewrite_metadata_response(original, 7, "127.0.0.1", 5555)
    assert frame == original
    assert problem is not None and "single-broker" in problem


def test_proxy_without_traffic_closes_cleanly() -> None:
    with StrictProxy("127.0.0.1:9") as proxy:
        assert proxy.bootstrap.startswith("127.0.0.1:")
        assert proxy.produce_requests_seen == 0
        with pytest.raises(AssertionError, match="no Produce request"):
            proxy.assert_clean()


# =============================================================================================
# partsync sync through the proxy, against real brokers
# =============================================================================================

# Both directions between the PyPI brokers; under a real-Kafka mode, Kafka to Kafka.
DIRECTIONS = [("tansu", "noida"), ("noida", "tansu"), ("kafka", "kafka")]


@pytest.fixture(scope="module")
def brokers(
    broker_mode: str, broker_factory: Callable[[str], Broker]
) -> Iterator[dict[str, Broker]]:
    if is_real_kafka(broker_mode):
        yield {"kafka-source": broker_factory("a"), "kafka": broker_factory("local")}
    else:
        yield {"tansu": broker_factory("tansu"), "noida": broker_factory("noida")}


def _source_data(bootstrap: str, topic: str) -> int:
    """Partition i gets codec COMPRESSIONS[i], in three rounds (so several batches each), with
    null keys, null values, headers and null header values. Returns the record count."""
    create_topic(bootstrap, topic, len(COMPRESSIONS))
    total = 0
    for rnd in range(3):
        for p, codec in enumerate(COMPRESSIONS):
            recs = make_records(
                12,
                seed=100 * rnd + p,
                value_size=200,
                null_keys_every=4,
                null_values_every=5,
                null_header_values_every=3,
            )
            total += produce(bootstrap, topic, recs, compression=codec, partition=p)
    return total


def _sync(source: str, local: str, topic: str, *extra: str) -> CliResult:
    return run_cli(
        "sync",
        "--topic",
        topic,
        "--sources",
        source,
        "--local",
        local,
        "--create-missing",
        "--json",
        *extra,
    )


@pytest.mark.integration
@pytest.mark.kafka
@pytest.mark.kafka_versions  # Produce and Fetch versions differ between Kafka 3.9 and 4
@pytest.mark.parametrize(
    "source_kind,local_kind", DIRECTIONS, ids=[f"{a}-to-{b}" for a, b in DIRECTIONS]
)
def test_sync_obeys_kafka_produce_rules(
    brokers: dict[str, Broker],
    strict_proxy: Callable[..., StrictProxy],  # noqa: F811
    source_kind: str,
    local_kind: str,
) -> None:
    if source_kind == local_kind:
        source_kind = f"{source_kind}-source"  # real Kafka: two clusters of one kind
    if source_kind not in brokers or local_kind not in brokers:
        pytest.skip(f"{source_kind} to {local_kind} runs in the other broker modes")
    source, local = brokers[source_kind], brokers[local_kind]
    topic = f"strict-{source_kind}-{local_kind}-{uuid.uuid4().hex[:8]}"
    total = _source_data(source.bootstrap, topic)
    proxy = strict_proxy(local.bootstrap)

    # Small chunks: several chunks per partition, so several connections go through the proxy.
    res = _sync(source.bootstrap, proxy.bootstrap, topic, "--chunk-offsets", "10")
    assert res.code == 0, res.stderr
    parts = res.json["topics"][0]["partitions"]
    assert [p["status"] for p in parts] == ["synced"] * len(COMPRESSIONS), parts
    assert [p["local_end_after"] for p in parts] == [36] * len(COMPRESSIONS)

    proxy.assert_clean()
    assert proxy.metadata_rewritten > 0
    assert {b.codec for b in proxy.produced} == set(COMPRESSIONS)
    assert sum(b.record_count for b in proxy.produced) == total
    # Every appended batch crossed the proxy once; partitions share Produce requests (the shared
    # writer), never with two batches of one partition in a request (a checked violation).
    assert len(proxy.produced) == sum(p["batches"] for p in parts)
    assert 0 < proxy.produce_requests_seen <= len(proxy.produced)
    # One idempotent producer identity per partition copy, sequences contiguous from 0.
    for p in range(len(COMPRESSIONS)):
        mine = [b for b in proxy.produced if b.partition == p]
        assert len({(b.producer_id, b.producer_epoch) for b in mine}) == 1
        assert mine[0].producer_id >= 0
        seqs = [b.base_sequence for b in mine]
        assert seqs == [sum(b.record_count for b in mine[:i]) for i in range(len(mine))]

    # Every offset holds the same record on both clusters (read directly, not via the proxy).
    assert (
        assert_partitions_identical(source.bootstrap, local.bootstrap, topic, len(COMPRESSIONS))
        == total
    )

    # A second run is a no-op: nothing more is produced.
    seen = proxy.produce_requests_seen
    again = _sync(source.bootstrap, proxy.bootstrap, topic)
    assert again.code == 0, again.stderr
    assert {p["status"] for p in again.json["topics"][0]["partitions"]} == {"in-sync"}
    assert proxy.produce_requests_seen == seen
    proxy.assert_clean()


@pytest.mark.integration
def test_proxy_catches_what_a_lenient_broker_accepts(
    brokers: dict[str, Broker],
    strict_proxy: Callable[..., StrictProxy],  # noqa: F811
) -> None:
    """End to end through the proxy: Tansu stores two batches with a non-zero baseOffset in one
    Produce, and acks=1; Apache Kafka would refuse both. The proxy reports them."""
    from partsync._kafka import Connection

    tansu = brokers["tansu"]
    topic = f"lenient-{uuid.uuid4().hex[:8]}"
    create_topic(tansu.bootstrap, topic, 1)
    proxy = strict_proxy(tansu.bootstrap)
    with Connection(proxy.host, proxy.port, cluster="proxy") as conn:
        conn.send_produce(
            topic,
            {0: batch(2, producer=(-1, -1, -1)) + batch(3, base_offset=2, producer=(-1, -1, -1))},
            acks=1,
        )
        answer = conn.receive_produce()
    assert answer[0].error_code == 0  # the lenient broker took it
    assert rules(proxy.violations) == [("acks", None), ("base-offset", 0), ("batch-count", 0)]
    assert proxy.produce_requests_seen == 1
    with pytest.raises(AssertionError, match="violations"):
        proxy.assert_clean()


# -- the checker's rules against the real broker ----------------------------------------------

# Cases Apache Kafka itself must refuse: every partition the checker flags is rejected with an
# error code (Kafka's codes for them) and nothing is appended there, while
# the partitions it does not flag are appended. Left out: acks=1 (partsync's own rule, Kafka
# accepts it) and acks=0 (no answer to read).
KAFKA_REFUSES = [c for c in BAD_CASES if c not in ("acks-1", "everything-at-once")]
KAFKA_CODES = {
    "two-batches-in-one-partition": 87,  # INVALID_RECORD
    "base-offset-5": 87,
    "holey-batch": 87,
    "bad-crc": 2,  # CORRUPT_MESSAGE
    "crc-not-updated-after-attribute-change": 2,
}


# Requests Kafka does not answer at all (it fails the request while parsing it).
KAFKA_NO_ANSWER = {"null-records"}


def _send_raw(broker: Broker, frame: bytes, timeout: float = 10) -> dict[int, int] | None:
    """Send a Produce frame as it is and return {partition: error code} from the answer, or
    None when the broker closes the connection or does not answer within ``timeout``."""
    import socket

    from kafka.protocol.producer.produce import ProduceResponse

    header = parse_request_header(frame)
    with socket.create_connection((broker.host, broker.port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        try:
            size = struct.unpack(">i", _recv(sock, 4))[0]
            body = _recv(sock, size)
        except (TimeoutError, AssertionError, ConnectionError):
            return None
    assert struct.unpack_from(">i", body, 0)[0] == header.correlation_id
    resp = ProduceResponse.decode(memoryview(body)[4:], version=header.api_version, header=False)
    return {p.index: p.error_code for t in resp.responses for p in t.partition_responses}


def _recv(sock: object, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))  # type: ignore[attr-defined]
        assert chunk, "broker closed the connection"
        out += chunk
    return out


@pytest.mark.integration
@pytest.mark.kafka_only
@pytest.mark.parametrize("case", KAFKA_REFUSES)
def test_real_kafka_refuses_what_the_checker_reports(
    case: str, local_broker: Broker, topic: str
) -> None:
    kwargs, expected = BAD_CASES[case]
    flagged = {p for _rule, p in expected if p is not None}
    create_topic(local_broker.bootstrap, topic, 4)
    frame = produce_frame(**{**kwargs, "topic": topic})  # type: ignore[arg-type]
    answers = _send_raw(local_broker, frame)
    sent = set(kwargs["partitions"])  # type: ignore[call-overload]
    if answers is None:
        assert case in KAFKA_NO_ANSWER, f"{case}: Kafka did not answer"
        answers = dict.fromkeys(sent, -1)
    assert case not in KAFKA_NO_ANSWER or answers == dict.fromkeys(sent, -1), answers
    assert set(answers) == sent, answers
    for p in sent:
        if p in flagged:
            assert answers[p] != 0, f"{case}: Kafka accepted partition {p}: {answers}"
            if case in KAFKA_CODES:
                assert answers[p] == KAFKA_CODES[case], answers
        else:
            assert answers[p] == 0, f"{case}: Kafka refused unflagged partition {p}: {answers}"
    after = ends(local_broker, topic, 4)
    for p in range(4):
        assert (after[p] > 0) == (p in sent and p not in flagged), (case, after)


def test_the_proxy_flags_an_append_behind_an_unanswered_one() -> None:
    """Rule ``pipelined``: a second Produce for a partition before the first one's answer is a
    breach; after the answer (or after its connection closed) it is not."""
    from tests.integration.kafka_proxy import StrictProxy

    with StrictProxy("127.0.0.1:9") as proxy:  # never connected to: the callbacks are driven
        link = object()
        first = produce_frame({0: batch(2), 1: batch(2)}, correlation_id=1)
        proxy._on_request(first, link)  # type: ignore[arg-type]
        proxy._on_request(produce_frame({1: batch(2)}, correlation_id=2), link)  # type: ignore[arg-type]
        assert rules(proxy.violations) == [("pipelined", 1)]
        proxy._answered(link, 1)  # type: ignore[arg-type]  # its answer reached the client
        proxy._on_request(produce_frame({0: batch(2)}, correlation_id=3), link)  # type: ignore[arg-type]
        assert rules(proxy.violations) == [("pipelined", 1)]  # 0 was answered: fine
        proxy._on_request(produce_frame({2: batch(2)}, correlation_id=4), link)  # type: ignore[arg-type]
        proxy._forget(link)  # type: ignore[arg-type]  # the connection closed: no answer comes
        proxy._on_request(produce_frame({2: batch(2)}, correlation_id=5), object())  # type: ignore[arg-type]
        assert rules(proxy.violations) == [("pipelined", 1)]


def test_the_proxy_lets_processes_record_in_partsyncs_own_topics_at_once() -> None:
    """partsync's record topics are not mirrors (keyed, the latest value wins, written by
    every follower of a job): two appends in flight there are two producers, as Kafka allows."""
    from tests.integration.kafka_proxy import StrictProxy

    with StrictProxy("127.0.0.1:9") as proxy:
        for cid, link in ((1, object()), (2, object())):
            frame = produce_frame({0: batch(2)}, correlation_id=cid, topic="partsync.source-ends")
            proxy._on_request(frame, link)  # type: ignore[arg-type]
        assert rules(proxy.violations) == []
