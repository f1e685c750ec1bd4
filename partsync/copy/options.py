"""Knobs of one partition copy, and how many copies run at once by default."""

from __future__ import annotations

from dataclasses import dataclass

from partsync.wire.holes import HOLE_KEY

__all__ = ["PARALLELISM", "CopyOptions"]

# Copy rounds at once by default. More partitions per Fetch and Produce request: at 128
# partitions of 1.2 MB, 32 copied in 3.2-3.9 s, 8 in 4.5-5.1 s, 64 and 128 no faster than 32
# (docs/benchmarks.md). Memory stays bounded by --memory-budget, not by this.
PARALLELISM = 32


@dataclass(frozen=True)
class CopyOptions:
    # Per partition copy, and for the whole process (every copy draws on both).
    max_in_flight_bytes: int = 64 << 20
    memory_budget: int = 512 << 20
    fetch_max_bytes: int = 8 << 20
    connections_per_broker: int = 1
    # Fetches each source connection keeps outstanding (answered in order) when the broker is
    # far (see ``io.fetch_lane.FAR_RTT_S``): a long fat link idles for a round trip after every
    # answer without them. A near broker gets one at a time, which costs less CPU and memory.
    fetches_in_flight: int = 2
    produce_timeout_ms: int = 30_000
    fetch_wait_ms: int = 500
    # Whole-run cap on fetched bytes per second in this process (None: unlimited); per-cluster
    # caps come from the cluster's config (ClusterRef.max_bytes_per_sec).
    max_bytes_per_sec: int | None = None
    # How long to wait for the local high watermark to reach the log end before appending.
    hw_wait_s: float = 30.0
    # Fence other partsync writers of the same local partition (see ``producer.transactional_id``).
    fencing: bool = True
    # Renew a long-lived owner's fencing identity this often, well inside the local cluster's
    # transactional.id.expiration.ms (7 days by default), see ``producer.renew_producer``.
    fencing_renew_s: float = 3600.0
    # Records per filler batch when a mirror starts at its sources' log start (copy.appender).
    filler_records: int = 500_000
    # Offsets a compacted source no longer holds: "refuse" (the copy stops there, unsafe) or
    # "fill" (hole records at exactly those offsets, see ``wire.holes``; the local topic must
    # be compacted), under ``hole_key``.
    compaction_holes: str = "refuse"
    hole_key: bytes = HOLE_KEY
    # Transactional source batches and their markers: "refuse" (the copy stops there, unsafe)
    # or "replay" (each source transaction replayed by a local transactional producer, its
    # marker landing at the source marker's offset; see ``copy.txn_replay``).
    transactions: str = "refuse"
    # The local transaction timeout of a replay (ms). A transaction a killed run left open is
    # resumed by the next run; only if none comes within this long does the local coordinator
    # abort it, at an offset where the source holds more of it (the partition then diverges).
    # Kafka's default transaction.max.timeout.ms.
    transaction_timeout_ms: int = 900_000

    def __post_init__(self) -> None:
        if self.max_in_flight_bytes < 1 << 16:
            raise ValueError("max_in_flight_bytes must be at least 64 KiB")
        if self.memory_budget < 1 << 20:
            raise ValueError("memory_budget must be at least 1 MiB")
        if self.connections_per_broker < 1:
            raise ValueError("connections_per_broker must be at least 1")
        if self.fetches_in_flight < 1:
            raise ValueError("fetches_in_flight must be at least 1")
        if self.compaction_holes not in ("refuse", "fill"):
            raise ValueError("compaction_holes must be 'refuse' or 'fill'")
        if not self.hole_key:
            raise ValueError("hole_key must not be empty")
        if self.transactions not in ("refuse", "replay"):
            raise ValueError("transactions must be 'refuse' or 'replay'")
        if self.replay_transactions and not self.fencing:
            raise ValueError(
                "replaying transactions needs fencing (the transaction slots' "
                "transactional ids are the partition's own)"
            )

    @property
    def fill_holes(self) -> bool:
        return self.compaction_holes == "fill"

    @property
    def replay_transactions(self) -> bool:
        return self.transactions == "replay"

    @property
    def fetch_bytes(self) -> int:
        size = max(1 << 16, min(self.fetch_max_bytes, self.max_in_flight_bytes // 4))
        if self.max_bytes_per_sec:
            # Fetch about a second's worth at a time so a throttled copy flows evenly.
            size = min(size, max(1 << 16, self.max_bytes_per_sec))
        return size
