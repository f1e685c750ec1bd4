"""Shared by the benchmark's contender runners: arguments, the copy target, the result line.

Every runner copies one topic from ``--source`` to a fresh topic of the same name on ``--dest``
and stops once each partition reached the end offset the harness measured on the source
(``--ends``, a JSON file ``{"partition": end}``). It prints one JSON line on stdout with what it
copied; the harness measures time, CPU and memory of the runner process from outside.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Job:
    source: str
    dest: str
    topic: str
    ends: dict[int, int]
    compression: str
    options: dict[str, Any]


def parse_args(description: str, argv: list[str] | None = None) -> Job:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--source", required=True, help="source bootstrap host:port")
    ap.add_argument("--dest", required=True, help="destination bootstrap host:port")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--ends", required=True, help="JSON file {partition: end offset}")
    ap.add_argument(
        "--compression",
        default="none",
        help="codec a deep mirror recompresses with (the source topic's codec)",
    )
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="runner-specific tuning knob (integers)",
    )
    a = ap.parse_args(argv)
    with open(a.ends) as f:
        ends = {int(p): int(e) for p, e in json.load(f).items()}
    options: dict[str, Any] = {}
    for kv in a.option:
        k, _, v = kv.partition("=")
        options[k] = int(v)
    return Job(a.source, a.dest, a.topic, ends, a.compression, options)


def host_port(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def report(records: int, batches: int | None = None, **extra: Any) -> None:
    doc = {"records": records, "batches": batches, "finished_at": time.time(), **extra}
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()
