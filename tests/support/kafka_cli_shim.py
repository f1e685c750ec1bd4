"""Stand-ins for the three Apache Kafka command-line tools docker-compose.yml's ``init``
service runs (no Docker here, and the tools are not among the jars the tests fetch): the
same flags and the same output format, backed by a test broker.

    python kafka_cli_shim.py topics|get-offsets|console-producer ARGS...

``--bootstrap-server dcN:9092`` (the compose network's names) is mapped to a real address
through the environment variable ``SHIM_dcN``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from partsync.demo.data import Rec, create_topic, produce
from tests.integration.sync_support import bounds


def _address(server: str) -> str:
    host = server.split(":", 1)[0]
    return os.environ[f"SHIM_{host}"]


def _partitions(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=60)
    return len(md.topics[topic].partitions)


def main(argv: list[str]) -> int:
    tool, rest = argv[0], argv[1:]
    ap = argparse.ArgumentParser(prog=tool)
    ap.add_argument("--bootstrap-server", required=True)
    ap.add_argument("--topic", required=True)
    if tool == "topics":
        ap.add_argument("--create", action="store_true", required=True)
        ap.add_argument("--if-not-exists", action="store_true")
        ap.add_argument("--partitions", type=int, required=True)
        ap.add_argument("--replication-factor", type=int, required=True)
        ap.add_argument("--config", action="append", default=[])
        a = ap.parse_args(rest)
        server = _address(a.bootstrap_server)
        configs = dict(c.split("=", 1) for c in a.config)
        try:
            create_topic(server, a.topic, a.partitions, configs)
        except RuntimeError as e:
            if not (a.if_not_exists and "TOPIC_ALREADY_EXISTS" in str(e)):
                raise
        return 0
    if tool == "get-offsets":  # kafka-get-offsets.sh: one "topic:partition:offset" per line
        a = ap.parse_args(rest)
        server = _address(a.bootstrap_server)
        ends = bounds(server, a.topic, _partitions(server, a.topic))
        for p in sorted(ends):
            print(f"{a.topic}:{p}:{ends[p].end}")
        return 0
    if tool == "console-producer":  # each stdin line one record; key before the separator
        ap.add_argument("--property", action="append", default=[])
        a = ap.parse_args(rest)
        props = dict(p.split("=", 1) for p in a.property)
        sep = props.get("key.separator", "\t") if props.get("parse.key") == "true" else None
        recs = []
        for line in sys.stdin.read().splitlines():
            key, value = line.split(sep, 1) if sep is not None else (None, line)
            recs.append(Rec(key.encode() if key is not None else None, value.encode()))
        produce(_address(a.bootstrap_server), a.topic, recs)
        return 0
    raise SystemExit(f"unknown tool {tool}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
