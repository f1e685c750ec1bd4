"""Fault hooks for the Spark engine's tests: crash a task's Python worker mid-copy, as a killed
executor would, so Spark retries the task. Passed to ``SparkEngine(progress_for=...)``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from pyspark import TaskContext, cloudpickle

from partsync.run.task import PartitionTask

__all__ = ["FaultInjection"]

# Spark workers cannot import the tests package: ship this module's code by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FaultInjection:
    """Make the first attempt (or every attempt) of one partition's task exit abruptly after
    ``after_batches`` appends were confirmed."""

    def __init__(
        self, topic: str, partition: int, after_batches: int, every_attempt: bool = False
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.after_batches = after_batches
        self.every_attempt = every_attempt

    def __call__(self, task: PartitionTask) -> Callable[[str, int, int, int], None] | None:
        ctx = TaskContext.get()
        if ctx is None or task.key != (self.topic, self.partition):
            return None
        if ctx.attemptNumber() > 0 and not self.every_attempt:
            return None
        seen = [0]

        def progress(topic: str, partition: int, nbytes: int, next_offset: int) -> None:
            seen[0] += 1
            if seen[0] >= self.after_batches:
                os._exit(17)

        return progress
