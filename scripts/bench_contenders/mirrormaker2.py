"""MirrorMaker 2, Apache Kafka's own mirror, as a benchmark contender (real Kafka brokers only).

Starts ``org.apache.kafka.connect.mirror.MirrorMaker`` (dedicated mode, the jars from
``tests.support.kafka_jvm.ensure_kafka(version, mirror=True)``) as its own JVM, copying only
``--topic`` from source cluster ``A`` to destination cluster ``B`` under the same name
(``IdentityReplicationPolicy``), with heartbeats, checkpoints, offset syncs, topic config and
ACL syncing off. It is a deep mirror: its consumer decompresses, the Connect worker's producer
re-batches and recompresses with the topic's codec (idempotent, acks=all, batch.size 1 MB and
linger.ms 5 like librdkafka's defaults, the confluent-mirror contender's settings).

This runner polls the destination's end offsets every ``POLL_S`` seconds and stops MirrorMaker
once every partition holds the source's end offset. The harness's wait4 numbers would measure
this Python runner (and the JVM's shutdown), so the runner measures the JVM itself and reports
it on its JSON line under ``"measured"``:

* ``wall_s``: JVM spawn until the destination holds every source record;
* ``cpu_s`` (``user_s``, ``sys_s``): utime+stime of every process in the JVM's process group
  (/proc/<pid>/stat), read at that moment, start-up included;
* ``peak_rss_mb``: the JVM's VmHWM;
* ``first_data_s``/``first_data_cpu_s``: when the first record showed on the destination and the
  CPU spent until then (start-up plus the first fetch and produce).

On an empty source topic (the harness's fixed-cost run) there is nothing to wait for: the runner
waits until MirrorSourceConnector's task reports RUNNING in the Connect status topic instead, so
that run measures the idle-started process (JVM, Connect herder, connectors, task).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _common import Job, host_port, parse_args, report

from partsync._kafka import LATEST, Connection
from tests.support.kafka_jvm import KAFKA_4
from tests.support.mirror_maker import MirrorMakerProcess, start_mirror_maker

POLL_S = 0.1
TIMEOUT_S = 1800.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Kafka's own throughput settings (kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS), no C1-only.
JVM_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)
HEAP = "1g"


def mm2_config(job: Job) -> dict[str, str]:
    """mm2.properties: only A->B, only ``job.topic``, same name, no side channels."""
    props = {
        "clusters": "A, B",
        "A.bootstrap.servers": job.source,
        "B.bootstrap.servers": job.dest,
        "A->B.enabled": "true",
        "B->A.enabled": "false",
        "A->B.topics": job.topic,
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "tasks.max": str(job.options.get("tasks", 1)),
        # Nothing but the records: no heartbeats, checkpoints, offset syncs, config/ACL syncs.
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
        # Kafka 3.7+ (ignored before); then no offset-syncs.* setting may be given at all.
        "emit.offset-syncs.enabled": "false",
        "sync.group.offsets.enabled": "false",
        "sync.topic.configs.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "refresh.groups.enabled": "false",
        # Single-broker clusters: every internal topic with one replica.
        "replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        # The Connect worker's producer writes to B: recompress with the topic's codec.
        "B.producer.compression.type": job.compression,
        "B.producer.acks": "all",
        "B.producer.enable.idempotence": "true",
        "B.producer.max.in.flight.requests.per.connection": "5",
        "B.producer.batch.size": str(job.options.get("batch_size", 1_000_000)),
        "B.producer.linger.ms": str(job.options.get("linger_ms", 5)),
        "B.producer.buffer.memory": str(64 << 20),
        # The task's consumer reads A (MirrorSourceTask starts at the earliest offset).
        "A.consumer.max.poll.records": str(job.options.get("max_poll_records", 2000)),
        "A.consumer.max.partition.fetch.bytes": str(4 << 20),
    }
    return props


def group_cpu(pgid: int) -> tuple[float, float]:
    """(user, sys) CPU seconds of every live process in process group ``pgid`` (and what its
    members have reaped)."""
    user = sys_ = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is stat field 3 (state): pgrp is field 5, utime..cstime fields 14-17.
        if int(fields[2]) != pgid:
            continue
        user += int(fields[11]) + int(fields[13])
        sys_ += int(fields[12]) + int(fields[14])
    return user / CLK_TCK, sys_ / CLK_TCK


def vm_hwm_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _end_offsets(conn: Connection, topic: str, parts: list[int]) -> dict[int, int]:
    """High watermarks (ListOffsets LATEST, read_uncommitted) of a single-broker destination."""
    out = {}
    for p, (err, offset) in conn.list_offsets(topic, parts, LATEST).items():
        out[p] = offset if err == 0 else -1
    return out


def _task_running(dest: str, deadline: float, mm: MirrorMakerProcess) -> None:
    """Wait until MirrorSourceConnector's task reports RUNNING in the Connect status topic."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": dest,
            "group.id": "bench-mm2-status",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    try:
        assigned = False
        while True:
            _check(mm, deadline)
            if not assigned:
                topics = consumer.list_topics(timeout=5).topics
                status = [t for t in topics if t.startswith("mm2-status")]
                if status:
                    tps = [TopicPartition(t, p, 0) for t in status for p in topics[t].partitions]
                    consumer.assign(tps)
                    assigned = True
                else:
                    time.sleep(POLL_S)
                    continue
            for msg in consumer.consume(num_messages=100, timeout=POLL_S):
                if msg.error() is not None:
                    continue
                key = msg.key() or b""
                if key.startswith(b"status-task-MirrorSourceConnector") and b'"RUNNING"' in (
                    msg.value() or b""
                ):
                    return
    finally:
        consumer.close()


def _check(mm: MirrorMakerProcess, deadline: float) -> None:
    if not mm.running:
        raise RuntimeError(
            f"MirrorMaker exited with {mm.process.returncode}:\n{_tail(mm.log_path)}\n"
            f"{_tail(mm.stdout_path)}"
        )
    if time.monotonic() > deadline:
        raise TimeoutError(
            f"MirrorMaker did not finish in {TIMEOUT_S:.0f} s:\n{_tail(mm.log_path)}"
        )


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def mirror(job: Job, version: str, workdir: Path) -> dict[str, Any]:
    parts = sorted(job.ends)
    wanted = {p: e for p, e in job.ends.items() if e > 0}
    with Connection(*host_port(job.dest), cluster="dest", client_id="bench-mm2-poll") as dest:
        started = time.monotonic()
        mm = start_mirror_maker(
            version,
            mm2_config(job),
            data_dir=workdir,
            heap=HEAP,
            jvm_opts=JVM_OPTS,
            clusters=("B",),
        )
        pgid = mm.process.pid  # its own session: the process group id is the JVM's pid
        deadline = started + TIMEOUT_S
        first_data_s: float | None = None
        first_data_cpu = 0.0
        try:
            if not wanted:
                _task_running(job.dest, deadline, mm)
            while wanted:
                _check(mm, deadline)
                ends = _end_offsets(dest, job.topic, parts)
                if first_data_s is None and any(e > 0 for e in ends.values()):
                    first_data_s = time.monotonic() - started
                    first_data_cpu = sum(group_cpu(pgid))
                if all(ends[p] >= e for p, e in wanted.items()):
                    break
                time.sleep(POLL_S)
            wall = time.monotonic() - started
            user, sys_ = group_cpu(pgid)
            rss = vm_hwm_mb(mm.process.pid)
        finally:
            mm.stop(timeout=20)
    return {
        "wall_s": wall,
        "cpu_s": user + sys_,
        "user_s": user,
        "sys_s": sys_,
        "peak_rss_mb": rss,
        "first_data_s": first_data_s,
        "first_data_cpu_s": first_data_cpu if first_data_s is not None else None,
    }


def _exit_with_parent() -> None:
    """SIGTERM, or the harness dying, stops MirrorMaker too (``mirror``'s finally)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> None:
    _exit_with_parent()
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--kafka-version", default=KAFKA_4)
    ap.add_argument("--workdir", default=None, help="MirrorMaker's config and logs (default .)")
    own, rest = ap.parse_known_args()
    job = parse_args(__doc__.splitlines()[0], rest)
    workdir = Path(own.workdir or ".").resolve() / f"mm2-{job.topic}-{os.getpid()}"
    measured = mirror(job, own.kafka_version, workdir)
    records = sum(job.ends.values())
    report(records, kafka_version=own.kafka_version, measured=measured, workdir=str(workdir))


if __name__ == "__main__":
    main()
