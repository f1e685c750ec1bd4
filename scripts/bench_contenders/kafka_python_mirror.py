"""Deep mirror with kafka-python: the same consumer -> producer loop in pure Python.

Records are decompressed by the consumer, re-batched by the producer and recompressed with the
topic's codec. Key, value, headers, timestamp and partition are kept; the producer is
idempotent with acks=all, and batch.size/linger are set to librdkafka's defaults (1 MB, 5 ms)
so both deep mirrors batch alike (kafka-python's own defaults, 16 KB and 0 ms, are slower).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Job, parse_args, report

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def mirror(job: Job) -> int:
    consumer = KafkaConsumer(
        bootstrap_servers=job.source,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=10_000,
    )
    producer = KafkaProducer(
        bootstrap_servers=job.dest,
        compression_type=None if job.compression == "none" else job.compression,
        enable_idempotence=True,
        acks="all",
        batch_size=1_000_000,
        linger_ms=5,
        max_request_size=16 << 20,
        allow_auto_create_topics=False,
    )
    remaining = {p for p, end in job.ends.items() if end > 0}
    parts = [TopicPartition(job.topic, p) for p in sorted(remaining)]
    consumer.assign(parts)
    if parts:
        consumer.seek_to_beginning(*parts)
    send = producer.send
    count = 0
    errors: list[BaseException] = []
    try:
        while remaining:
            polled = consumer.poll(timeout_ms=1000, max_records=10_000)
            for tp, records in polled.items():
                p = tp.partition
                end = job.ends[p]
                for r in records:
                    send(
                        job.topic,
                        value=r.value,
                        key=r.key,
                        headers=list(r.headers),
                        partition=p,
                        timestamp_ms=r.timestamp,
                    ).add_errback(errors.append)
                    count += 1
                    if r.offset + 1 >= end:
                        remaining.discard(p)
            if errors:
                raise RuntimeError(f"delivery failed: {errors[:3]}")
        producer.flush(120)
        if errors:
            raise RuntimeError(f"delivery failed: {errors[:3]}")
    finally:
        consumer.close()
        producer.close(30)
    return count


def main() -> None:
    job = parse_args(__doc__.splitlines()[0])
    report(mirror(job))


if __name__ == "__main__":
    main()
