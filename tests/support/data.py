"""Test data with kafka-python 3.0's own producer, so data from both clients' batch builders
(confluent-kafka's in ``partsync.demo.data``, kafka-python's here) is covered."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from partsync.demo.data import Rec, _check_codec

__all__ = ["produce_kafka_python"]


def produce_kafka_python(
    bootstrap: str,
    topic: str,
    records: Iterable[Rec],
    *,
    compression: str = "none",
    partition: int | None = None,
    linger_ms: int = 5,
    batch_size: int = 64 * 1024,
    idempotent: bool = True,
    timeout: float = 30.0,
) -> int:
    """Same as :func:`produce` with kafka-python 3.0's ``KafkaProducer``.

    kafka-python only accepts ``bytes`` header values, so a null header value raises ValueError.
    """
    KafkaProducer = _import_kafka_python().KafkaProducer

    _check_codec(compression)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        linger_ms=linger_ms,
        batch_size=batch_size,
        enable_idempotence=idempotent,
        acks="all",
        allow_auto_create_topics=False,
    )
    count = 0
    try:
        futures = []
        for rec in records:
            if any(v is None for _, v in rec.headers):
                raise ValueError("kafka-python cannot send a null header value")
            part = rec.partition if rec.partition is not None else partition
            futures.append(
                producer.send(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    headers=list(rec.headers),
                    partition=part,
                    timestamp_ms=rec.timestamp_ms,
                )
            )
            count += 1
        producer.flush(timeout)
        for fut in futures:
            fut.get(timeout)  # raises the delivery error, if any
    finally:
        producer.close(timeout)
    return count


def _import_kafka_python() -> Any:
    """Import kafka-python, silencing the DeprecationWarnings it raises while loading its JSON
    protocol schemas (``importlib.resources.read_text`` in kafka.protocol.schemas.load_json),
    which ``filterwarnings = error`` would otherwise turn into import errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka
    return kafka
