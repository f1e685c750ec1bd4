"""The default engine: partition tasks on this process's ``PartitionRunner`` (threads).

The same runner serves one-shot runs, follow mode and group members; as an engine it owns every
task it is given (no group). Tasks for different partitions run concurrently: their work is
I/O and C-level CRC/hash, so threads overlap well despite the GIL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from partsync.copy.context import ProgressFn
from partsync.copy.options import PARALLELISM
from partsync.io.pool import ClusterPool
from partsync.plan.results import PartitionResult
from partsync.run.runner import PartitionRunner, RunOptions
from partsync.run.sync import Engine
from partsync.run.task import PartitionTask

__all__ = ["LocalEngine"]


class LocalEngine(Engine):
    name = "local"

    def __init__(
        self,
        parallelism: int = PARALLELISM,
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
        runner = PartitionRunner(
            tasks,
            pool,
            RunOptions(parallelism=self.parallelism),
            stop=self.stop,
            progress=self.progress,
        )
        runner.run()
        results = list(runner.results.values())
        if on_result:
            for r in results:
                on_result(r)
        return results
