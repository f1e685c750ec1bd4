"""The default engine: partition tasks on a thread pool in this process.

Each partition is one task and one writer; tasks for different partitions run concurrently
(their work is I/O and C-level CRC/hash, so threads overlap well despite the GIL).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from partsync.copier import ProgressFn
from partsync.result import PartitionResult
from partsync.sync import Engine
from partsync.task import ClusterPool, PartitionTask, run_partition_task

__all__ = ["LocalEngine"]


class LocalEngine(Engine):
    name = "local"

    def __init__(
        self,
        parallelism: int = 8,
        progress: ProgressFn | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.parallelism = max(1, parallelism)
        self.progress = progress
        self.stop = stop

    def run(
        self,
        tasks: Sequence[PartitionTask],
        pool: ClusterPool,
        on_result: Callable[[PartitionResult], None] | None = None,
    ) -> list[PartitionResult]:
        results: list[PartitionResult] = []
        with ThreadPoolExecutor(max_workers=min(self.parallelism, max(1, len(tasks))),
                                thread_name_prefix="partsync-task") as ex:
            futures = [
                ex.submit(run_partition_task, t, pool, self.progress, self.stop) for t in tasks
            ]
            for f in as_completed(futures):
                r = f.result()
                results.append(r)
                if on_result:
                    on_result(r)
        return results
