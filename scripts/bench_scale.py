"""The follower at scale (issue 38): one ``partsync sync --follow`` process over thousands of
partitions, its first catch-up, what it costs while idle, and how fast it passes on one new
record in every partition.

    python scripts/bench_scale.py [--partitions 2000] [--topics 1] [--topic-check-s 5]
                                  [--trees /tmp/before,.] [--settle 10]
                                  [--idle-s 20] [--heap 2g] [--timeout SECONDS]
                                  [--stop-timeout 60] [--json] [-- extra sync args]

With ``--topics K`` (K > 1) the partitions are spread over K topics and the follower runs as a
cluster link does (issue 39): ``--topic-pattern`` over all of them, ``--create-missing``, a topic
check every ``--topic-check-s``; after the latency step a new topic of the same size is created
on the source with a record in every partition, and the row adds the seconds until the mirror
has them all (``new_topic_mirrored_s``: up to one topic check, plus creating and copying it).

Source and local are each a single-node Apache Kafka 4.1.1 (a JVM process from the Maven jars,
``tests/support/kafka_jvm.py``) with a ``--heap`` heap (default 2g, meant for up to 10,000
partitions; ``start_kafka_jvm`` takes no heap, so they are started by ``start_kafka_cluster``).
For each source tree of ``--trees`` (comma-separated, run in the order given: the first one
also pays the brokers' JIT warm-up, so list a tree twice to warm up), on a fresh topic of
``--partitions`` partitions on both clusters with one 100-byte record in every source
partition, it starts ``python -m partsync sync --follow --no-group`` from that tree and measures
the follower process (and its children, if any; never the brokers):

1. first catch-up: seconds from its start until every local partition's end offset is 1;
2. idle: after ``--settle`` seconds, its CPU over ``--idle-s`` seconds (cores = CPU seconds
   per wall second, utime+stime from /proc), then its thread count and RSS;
3. latency: one more record is produced to every source partition (by the producer of the
   first records, so it is connected and the records go out at once), then seconds from the
   end of its flush until every local partition's end offset is 2 (the JSON line also has the
   seconds from the first send, ``latency_from_first_send_s``: the follower may copy records
   before the flush ends).

Local end offsets are read with one ListOffsets for all partitions (confluent-kafka's
AdminClient, so the measuring does not depend on the tree measured) every 0.2 s: the times are
when a poll saw the ends, up to 0.2 s plus one poll late. The follower is then stopped with
SIGTERM; each tree gets freshly started brokers (trees do not share a broker's open files).
It prints one row per tree; ``--json`` prints one JSON line per tree instead, with also the
follower's CPU seconds up to the catch-up and its exit code after SIGTERM.

Idle CPU means something only on a quiet machine: other processes competing for the cores
(tests, builds) stretch the follower's wake-ups and the brokers' answers. At 10,000 partitions
a broker holds one open file per partition: the open-files limit (ulimit -n) must allow it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench_contenders"))

from _bytecode import cache_bytecode
from confluent_kafka import KafkaException

from partsync.demo.data import create_topic
from tests.support.kafka_jvm import KafkaCluster, start_kafka_cluster

KAFKA_VERSION = "4.1.1"
POLL_S = 0.2
_TICK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    pass


# -- the follower's process tree (/proc) ------------------------------------------------------


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children), None once gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and ')'
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return int(fields[1]), (utime + stime + cutime + cstime) / _TICK


def _tree(root: int) -> list[int]:
    """``root`` and its live descendants."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                parents.setdefault(st[0], []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


def _cpu_s(root: int) -> float:
    return sum(st[1] for pid in _tree(root) if (st := _stat(pid)) is not None)


def _status(root: int) -> tuple[int, float]:
    """Threads and RSS (MB) of ``root`` and its descendants."""
    threads, rss_kib = 0, 0
    for pid in _tree(root):
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(":")
            if key == "Threads":
                threads += int(value)
            elif key == "VmRSS":
                rss_kib += int(value.split()[0])
    return threads, rss_kib / 1024


# -- the clusters ----------------------------------------------------------------------------


# A KRaft controller refuses one operation of more than 10,000 records ("excessively large
# batch operation"): a topic of 10,000 partitions is created with half and grown in steps.
_PARTITIONS_PER_STEP = 5000


def _create_big_topic(bootstrap: str, topic: str, n: int, timeout: float) -> None:
    # confluent_kafka.admin re-exports it without an __all__ (as partsync.demo.data imports it).
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    create_topic(bootstrap, topic, min(n, _PARTITIONS_PER_STEP), timeout=timeout)
    have = min(n, _PARTITIONS_PER_STEP)
    admin = _admin(bootstrap)
    while have < n:
        have = min(n, have + _PARTITIONS_PER_STEP)
        for fut in admin.create_partitions([NewPartitions(topic, have)]).values():
            fut.result(timeout)
    deadline = time.monotonic() + timeout
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{bootstrap}: {topic} did not reach {n} partitions in {timeout} s")
        time.sleep(0.5)
    # Every partition led and answering offsets: a partition in the metadata may not be led by
    # its broker yet (NOT_LEADER_OR_FOLLOWER), and the follower must not start before that, or
    # its start measures the broker, not partsync.
    while True:
        try:
            _ends(admin, topic, n, 10)
            return
        except Exception as exc:  # a KafkaException for any partition not led yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"{bootstrap}: {topic} not led everywhere: {exc}") from exc
            time.sleep(0.5)


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def _ends(admin: Any, topic: str | list[str], n: int, timeout: float) -> list[int]:
    """Every partition's end offset (high watermark) of ``topic`` (or of each of several
    topics of ``n`` partitions, in order), one ListOffsets for all of them."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    topics = [topic] if isinstance(topic, str) else topic
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets(
        {TopicPartition(t, p): latest for t in topics for p in range(n)},
        request_timeout=timeout,
    )
    index = {t: i * n for i, t in enumerate(topics)}
    ends = [-1] * (n * len(topics))
    for tp, future in futures.items():
        ends[index[tp.topic] + tp.partition] = future.result(timeout).offset
    return ends


class Follower:
    """``partsync sync --follow`` from one source tree, its output in a log file."""

    def __init__(self, tree: Path, argv: list[str], log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
        env["PYTHONPATH"] = str(tree)
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "partsync", *argv],
                cwd=tree,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.started = time.monotonic()

    def check(self, doing: str) -> None:
        code = self.proc.poll()
        if code is not None:
            raise BenchError(f"the follower exited {code} while {doing}:\n{self.tail()}")

    def tail(self, n_bytes: int = 3000) -> str:
        try:
            return self.log.read_bytes()[-n_bytes:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def stop(self, timeout: float) -> int:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; the exit code (None never)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise BenchError(
                    f"the follower did not stop within {timeout} s of SIGTERM (killed):\n"
                    + self.tail()
                ) from None
        return self.proc.returncode


def _wait_ends(
    admin: Any,
    topic: str | list[str],
    n: int,
    target: int,
    follower: Follower,
    timeout: float,
    what: str,
) -> tuple[float, list[int]]:
    """Poll the local ends every POLL_S until all are >= ``target``: (when seen, the ends)."""
    deadline = time.monotonic() + timeout
    ends: list[int] = []
    error = ""
    while True:
        follower.check(f"waiting for {what}")
        tick = time.monotonic()
        try:
            ends = _ends(admin, topic, n, timeout=max(1.0, min(30.0, deadline - tick)))
            error = ""
        except (KafkaException, TimeoutError) as exc:  # busy broker: ask again until the deadline
            error = f"; last ListOffsets error: {exc}"
        now = time.monotonic()
        if ends and min(ends) >= target:
            return now, ends
        if now > deadline:
            done = sum(e >= target for e in ends)
            raise BenchError(
                f"timed out after {timeout:.0f} s waiting for {what}: {done} of {n} local "
                f"partitions of {topic!r} at end offset {target}{error}\n"
                f"follower log tail:\n{follower.tail()}"
            )
        time.sleep(max(0.0, tick + POLL_S - time.monotonic()))


class _Producer:
    """One idempotent producer for both rounds, so the second one's connections, metadata and
    producer id are ready and its records go out at once."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 5,
                "acks": "all",
                "enable.idempotence": True,
                "log_level": 3,
            }
        )
        self.errors: list[str] = []

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def one_per_partition(self, topic: str, n: int, timeout: float) -> None:
        """A 100-byte record to each of the ``n`` partitions, flushed."""
        for p in range(n):
            while True:
                try:
                    self.producer.produce(
                        topic, b"v" * 100, b"k", partition=p, on_delivery=self._delivered
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain
                    self.producer.poll(0.1)
        left = self.producer.flush(timeout)
        if left or self.errors:
            raise BenchError(
                f"producing to {topic!r}: {left} records not delivered within {timeout:.0f} s, "
                f"errors: {self.errors[:5]}"
            )


def _wait_new_topic(admin: Any, topic: str, n: int, follower: Follower, timeout: float) -> float:
    """When the local cluster first had ``topic`` with every partition at end offset 1."""
    deadline = time.monotonic() + timeout
    while True:
        follower.check(f"waiting for the new topic {topic}")
        if topic in admin.list_topics(timeout=10).topics:
            try:
                ends = _ends(admin, topic, n, timeout=10)
            except (KafkaException, TimeoutError):
                ends = []
            if ends and min(ends) >= 1:
                return time.monotonic()
        if time.monotonic() > deadline:
            raise BenchError(
                f"timed out after {timeout:.0f} s waiting for the new topic {topic!r} to be "
                f"mirrored\nfollower log tail:\n{follower.tail()}"
            )
        time.sleep(POLL_S)


# -- one tree ---------------------------------------------------------------------------------


def _measure(
    tree: Path,
    topic: str,
    src: KafkaCluster,
    local: KafkaCluster,
    args: argparse.Namespace,
    log: Path,
) -> dict[str, Any]:
    total, k = args.partitions, args.topics
    n = total // k  # partitions per topic
    setup_timeout = 60 + total * 0.02
    topics = [topic] if k == 1 else [f"{topic}-{j:04d}" for j in range(k)]
    for bootstrap in (src.bootstrap, local.bootstrap):
        for t in topics:
            _create_big_topic(bootstrap, t, n, setup_timeout)
    producer = _Producer(src.bootstrap)
    for t in topics:
        producer.one_per_partition(t, n, setup_timeout)
    admin = _admin(local.bootstrap)
    # One topic by name; several as a link does: a pattern, new matching topics adopted at
    # each topic check (--topic-check-interval) and created locally.
    select = (
        ["--topic", topic]
        if k == 1
        else [
            "--topic-pattern",
            f"{topic}-.*",
            "--create-missing",
            "--topic-check-interval",
            str(args.topic_check_s),
        ]
    )
    argv = [
        "sync",
        "--follow",
        *select,
        "--sources",
        src.bootstrap,
        "--local",
        local.bootstrap,
        "--no-group",
        *args.extra,
    ]
    follower = Follower(tree, argv, log)
    try:
        seen, ends = _wait_ends(
            admin, topics, n, 1, follower, args.timeout, "the first catch-up (end offsets 1)"
        )
        catchup_s = seen - follower.started
        catchup_cpu_s = _cpu_s(follower.proc.pid)
        if max(ends) != 1:
            print(
                f"warning: local ends up to {max(ends)} after the catch-up, not 1", file=sys.stderr
            )
        time.sleep(args.settle)
        follower.check("settling")
        pid = follower.proc.pid
        cpu0, t0 = _cpu_s(pid), time.monotonic()
        time.sleep(args.idle_s)
        cpu1, t1 = _cpu_s(pid), time.monotonic()
        follower.check("idling")
        threads, rss_mb = _status(pid)
        idle_cores = (cpu1 - cpu0) / (t1 - t0)

        t_produce = time.monotonic()
        for t in topics:
            producer.one_per_partition(t, n, setup_timeout)
        flushed = time.monotonic()
        seen, ends = _wait_ends(
            admin, topics, n, 2, follower, args.timeout, "one more record per partition (ends 2)"
        )
        latency_s = seen - flushed
        if max(ends) != 2:
            print(f"warning: local ends up to {max(ends)} after the new records", file=sys.stderr)
        new_topic_s = None
        if k > 1:
            # A topic that appears on the source while the link runs: created there with a
            # record in every partition; seconds until the mirror has them all.
            fresh = f"{topic}-new"
            _create_big_topic(src.bootstrap, fresh, n, setup_timeout)
            producer.one_per_partition(fresh, n, setup_timeout)
            created = time.monotonic()
            seen = _wait_new_topic(admin, fresh, n, follower, args.timeout)
            new_topic_s = seen - created
        exit_code = follower.stop(args.stop_timeout)
    finally:
        if follower.proc.poll() is None:
            follower.proc.kill()
            follower.proc.wait(10)
    return {
        "tree": str(tree),
        "partitions": total,
        "topics": k,
        "new_topic_mirrored_s": None if new_topic_s is None else round(new_topic_s, 2),
        "topic_check_s": args.topic_check_s if k > 1 else None,
        "threads": threads,
        "idle_cpu_cores": round(idle_cores, 4),
        "rss_mb": round(rss_mb, 1),
        "catchup_s": round(catchup_s, 2),
        "catchup_cpu_s": round(catchup_cpu_s, 2),
        "produce_s": round(flushed - t_produce, 2),
        "latency_s": round(latency_s, 2),
        "latency_from_first_send_s": round(seen - t_produce, 2),
        "idle_s": args.idle_s,
        "follower_exit": exit_code,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--partitions", type=int, default=2000, help="in all (over --topics)")
    ap.add_argument(
        "--topics",
        type=int,
        default=1,
        help="topics the partitions are spread over; more than 1 follows them as a link "
        "does (--topic-pattern, --create-missing) and also times a topic created while it runs",
    )
    ap.add_argument(
        "--topic-check-s",
        type=float,
        default=5.0,
        help="the link's --topic-check-interval (with --topics > 1)",
    )
    ap.add_argument("--trees", default=".", help="comma-separated partsync source trees")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds after the catch-up")
    ap.add_argument("--idle-s", type=float, default=20.0, help="seconds of idle CPU measured")
    ap.add_argument("--heap", default="2g", help="each Kafka JVM's -Xmx")
    ap.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds to wait for each catch-up (default 120 + 0.05 s per partition)",
    )
    ap.add_argument("--stop-timeout", type=float, default=60.0, help="seconds after SIGTERM")
    ap.add_argument("--json", action="store_true", help="one JSON line per tree")
    ap.add_argument("extra", nargs="*", help="more `partsync sync` arguments (after --)")
    args = ap.parse_args()
    if args.timeout is None:
        args.timeout = 120 + 0.05 * args.partitions
    if args.topics < 1 or args.partitions % args.topics:
        ap.error("--partitions must be a multiple of --topics (>= 1)")
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    for tree in trees:
        if not (tree / "partsync" / "__init__.py").is_file():
            raise SystemExit(f"{tree} is not a partsync source tree (no partsync/__init__.py)")
    cache_bytecode(*trees)

    tmp = tempfile.TemporaryDirectory(prefix="bench-scale-")
    work = Path(tmp.name)
    clusters: list[KafkaCluster] = []
    try:
        if not args.json:
            print(
                f"{'partitions':>10} {'topics':>6} {'threads':>7} {'idle CPU':>8} {'RSS MB':>7} "
                f"{'catch-up s':>10} {'latency s':>9} {'new topic s':>11}  tree"
            )
        for i, tree in enumerate(trees):
            # Fresh brokers for each tree: a deleted topic's 10,000 partitions are not gone
            # at once, and two of them would pass this machine's open-file limit (20,000).
            for c in clusters:
                c.stop()
            clusters = []
            print(
                f"starting source and local Kafka {KAFKA_VERSION} (-Xmx{args.heap})",
                file=sys.stderr,
            )
            for name in ("src", "local"):
                clusters.append(
                    start_kafka_cluster(
                        KAFKA_VERSION, 1, data_dir=work / f"{name}-{i}", heap=args.heap
                    )
                )
            src, local = clusters
            topic = f"scale-{i}"
            print(f"{tree}: topic {topic!r}, {args.partitions} partitions", file=sys.stderr)
            row = _measure(tree, topic, src, local, args, work / f"follower-{i}.log")
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                new = row["new_topic_mirrored_s"]
                print(
                    f"{row['partitions']:>10} {row['topics']:>6} {row['threads']:>7} "
                    f"{row['idle_cpu_cores']:>8.3f} {row['rss_mb']:>7.1f} "
                    f"{row['catchup_s']:>10.2f} {row['latency_s']:>9.2f} "
                    f"{'-' if new is None else f'{new:.2f}':>11}  {tree}",
                    flush=True,
                )
            if row["follower_exit"] != 0:
                print(
                    f"warning: the follower exited {row['follower_exit']} on SIGTERM",
                    file=sys.stderr,
                )
    except BenchError as exc:
        print(f"bench_scale: {exc}", file=sys.stderr)
        return 1
    finally:
        for c in clusters:
            c.stop()
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
