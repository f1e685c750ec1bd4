"""Deep mirror with confluent-kafka (librdkafka): what a Python user would write instead.

A consumer -> producer loop, MirrorMaker's approach: records are decompressed by the consumer,
re-batched by the producer and recompressed with the topic's codec. Key, value, headers,
timestamp and partition are kept; the producer is idempotent with acks=all, other settings are
librdkafka's defaults (batch.size 1 MB, linger.ms 5).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Job, parse_args, report
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def mirror(job: Job) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": job.source,
            "group.id": "bench-confluent-mirror",  # required by librdkafka; nothing is committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": job.dest,
            "compression.type": job.compression,
            "enable.idempotence": True,
            "acks": "all",
            "log_level": 3,
        }
    )
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    remaining = {p for p, end in job.ends.items() if end > 0}
    consumer.assign([TopicPartition(job.topic, p, 0) for p in sorted(remaining)])
    produce = producer.produce
    count = 0
    try:
        while remaining:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    raise KafkaException(err)
                p, offset = msg.partition(), msg.offset()
                assert p is not None and offset is not None  # set on every record (not an event)
                kwargs: dict[str, Any] = {
                    "partition": p,
                    "timestamp": msg.timestamp()[1],
                    "on_delivery": on_delivery,
                }
                headers = msg.headers()
                if headers:
                    kwargs["headers"] = headers
                while True:
                    try:
                        produce(job.topic, msg.value(), msg.key(), **kwargs)
                        break
                    except BufferError:  # local queue full: let deliveries drain
                        producer.poll(0.05)
                count += 1
                if offset + 1 >= job.ends[p]:
                    remaining.discard(p)
            producer.poll(0)
            if errors:
                raise RuntimeError(f"delivery failed: {errors[:3]}")
        left = producer.flush(120)
        if left or errors:
            raise RuntimeError(f"{left} records undelivered, errors: {errors[:3]}")
    finally:
        consumer.close()
    return count


def main() -> None:
    job = parse_args(__doc__.splitlines()[0])
    report(mirror(job))


if __name__ == "__main__":
    main()
