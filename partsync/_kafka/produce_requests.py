"""Produce requests (a mixin of ``Connection``): pipelined, each written with one
scatter/gather write so the batches are never copied (``raw``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partsync._kafka.raw import Buffer, Parts, produce_request_parts

__all__ = ["ProduceRequests", "ProducedPartition"]


@dataclass(frozen=True, slots=True)
class ProducedPartition:
    partition: int
    error_code: int
    base_offset: int
    log_start_offset: int
    error_message: str | None


class ProduceRequests:
    """Produce over ``send_parts``/``receive`` (from ``BrokerConnection``)."""

    client_id: str

    if TYPE_CHECKING:

        def send_parts(self, api: str, build: Callable[[int, int], list[Buffer]]) -> None: ...

        def receive(self) -> Any: ...

    def send_produce(
        self,
        topic: str,
        batches: dict[int, Buffer | Parts],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> None:
        """Send one Produce request with at most one batch per partition (Kafka's rule)."""
        self.send_produce_many(
            {topic: batches}, acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id
        )

    def send_produce_many(
        self,
        batches: dict[str, dict[int, Buffer | Parts]],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> None:
        """One Produce request for many topics and partitions, one batch per partition, sent
        with one scatter/gather write (``raw``: the batches are not copied)."""
        self.send_parts(
            "Produce",
            lambda version, cid: produce_request_parts(
                version, cid, self.client_id, transactional_id, acks, timeout_ms, batches
            ),
        )

    def receive_produce_many(self) -> dict[tuple[str, int], ProducedPartition]:
        resp = self.receive()
        out: dict[tuple[str, int], ProducedPartition] = {}
        for t in resp.responses:
            for p in t.partition_responses:
                out[(t.name, p.index)] = ProducedPartition(
                    p.index,
                    p.error_code,
                    p.base_offset,
                    getattr(p, "log_start_offset", -1),
                    getattr(p, "error_message", None),
                )
        return out

    def receive_produce(self) -> dict[int, ProducedPartition]:
        """The answer to a ``send_produce`` (one topic), by partition."""
        return {p: res for (_t, p), res in self.receive_produce_many().items()}
