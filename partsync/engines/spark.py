"""Apache Spark engine (PySpark): partition tasks run on Spark executors.

The driver plans; each Kafka partition becomes exactly one Spark task running the same
``run_partition_task`` as the local engine and returning the same ``PartitionResult``.

One writer per partition is guaranteed by construction:

- the task list holds each (topic, partition) once and is parallelized with one element per
  Spark partition, so no two tasks of a job write the same Kafka partition;
- speculative execution is switched off (``spark.speculation=false``), so Spark never runs a
  second copy of a slow task;
- a retried task (after an executor died) starts only after Spark has given up on the failed
  attempt, and it re-reads the local log end before writing (``refresh_plan``), so it resumes at
  the checkpoint instead of appending from a stale offset; every append is still verified.

Failures inside a task come back as per-partition results, not as Spark stack traces.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any

from partsync.copy.context import ProgressFn
from partsync.errors import PartsyncError, UsageError
from partsync.io.pool import ClusterPool
from partsync.plan.diff_model import PartitionDiff, common_range, merge_slices
from partsync.plan.results import PartitionResult, Status
from partsync.run.diff import DiffJob
from partsync.run.engine import run_partition_task
from partsync.run.sync import Engine
from partsync.run.task import PartitionTask

try:
    from pyspark.sql import SparkSession
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(f"PySpark is not installed ({e})") from e

__all__ = ["SparkEngine", "slice_jobs", "spark_session"]

log = logging.getLogger(__name__)

_SESSION_LOCK = threading.Lock()


def _log4j_config() -> str:
    return str(resources.files("partsync.engines").joinpath("log4j2-quiet.properties"))


def spark_session(master: str | None = None, app_name: str = "partsync") -> Any:
    """The shared SparkSession, created quiet: no console progress bars, errors only."""
    with _SESSION_LOCK:
        builder = SparkSession.builder.appName(app_name)
        if master:
            builder = builder.master(master)
        elif not os.environ.get("SPARK_MASTER") and "spark.master" not in os.environ.get(
            "PYSPARK_SUBMIT_ARGS", ""
        ):
            builder = builder.master("local[*]")
        quiet = f"-Dlog4j2.configurationFile={_log4j_config()}"
        builder = (
            builder.config("spark.speculation", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.extraJavaOptions", quiet)
            .config("spark.executor.extraJavaOptions", quiet)
            .config("spark.python.worker.reuse", "true")
        )
        if (master or "local").startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
            # Local workers must use this interpreter (and its installed partsync); on a real
            # cluster, PYSPARK_PYTHON / spark.pyspark.python is the deployment's choice.
            # PySpark reads the worker interpreter from the environment when the context starts.
            os.environ["PYSPARK_PYTHON"] = sys.executable
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        if session.sparkContext.getConf().get("spark.speculation", "false").lower() == "true":
            raise UsageError(
                "spark.speculation is enabled on this Spark session; partsync needs it off "
                "(two attempts of one task would be two writers on one partition)"
            )
        return session


ProgressFactory = Callable[[PartitionTask], "ProgressFn | None"]


def _run_tasks(
    tasks: Iterator[PartitionTask], progress_for: ProgressFactory | None
) -> Iterator[PartitionResult]:
    for task in tasks:
        progress = progress_for(task) if progress_for else None
        try:
            yield run_partition_task(task, None, progress)
        except Exception as e:  # noqa: BLE001 - a bug: still report it as this partition's result
            p = task.plan
            yield PartitionResult(
                p.topic,
                p.partition,
                Status.ERROR,
                p.local.end,
                p.local.end,
                p.target_end,
                reason=f"task crashed: {e!r}",
                error=PartsyncError(f"task crashed: {e!r}"),
            )


class SparkEngine(Engine):
    name = "spark"

    def __init__(
        self,
        master: str | None = None,
        parallelism: int = 8,
        progress_for: ProgressFactory | None = None,
        max_task_failures: int = 4,
    ) -> None:
        """``progress_for(task)`` runs on the executor and gives the task's progress callback
        (it is shipped to the executors, so it must pickle)."""
        self.master = master
        self.parallelism = parallelism
        self.progress_for = progress_for
        self.max_task_failures = max_task_failures

    def session(self) -> Any:
        master = self.master
        # local[N] never retries a failed task; local[N,F] allows F attempts like a cluster.
        if master and master.startswith("local[") and "," not in master:
            master = master[:-1] + f",{self.max_task_failures}]"
        return spark_session(master)

    def run(
        self,
        tasks: Sequence[PartitionTask],
        pool: ClusterPool,
        on_result: Callable[[PartitionResult], None] | None = None,
    ) -> list[PartitionResult]:
        if not tasks:
            return []
        sc = self.session().sparkContext
        progress_for = self.progress_for
        rdd = sc.parallelize(list(tasks), numSlices=len(tasks))
        started = time.monotonic()
        try:
            results: list[PartitionResult] = rdd.mapPartitions(
                lambda it: _run_tasks(it, progress_for)
            ).collect()
        except Exception as e:  # noqa: BLE001 - Spark's errors: reported per partition
            # The job itself failed (e.g. a task exhausted its attempts): report every partition
            # as failed with Spark's reason, not a stack trace.
            reason = str(e).strip().splitlines()[0][:500] if str(e).strip() else repr(e)
            results = [
                PartitionResult(
                    t.plan.topic,
                    t.plan.partition,
                    Status.ERROR,
                    t.plan.local.end,
                    t.plan.local.end,
                    t.plan.target_end,
                    reason=f"Spark job failed: {reason}",
                    error=PartsyncError(f"Spark job failed: {reason}"),
                )
                for t in tasks
            ]
        log.info("spark job with %d task(s) took %.2fs", len(tasks), time.monotonic() - started)
        if on_result:
            for r in results:
                on_result(r)
        return results

    def diff_runner(
        self, slice_offsets: int | None = None
    ) -> Callable[[Sequence[DiffJob]], list[PartitionDiff]]:
        """A runner for ``partsync.run.diff.diff_topics``: every partition's common range is cut into
        slices (whole multiples of the digest chunk), one Spark task per slice reads and digests
        its offsets on every cluster, and the driver merges the slices of each partition."""

        def run(jobs: Sequence[DiffJob]) -> list[PartitionDiff]:
            if not jobs:
                return []
            sliced = slice_jobs(jobs, slice_offsets)
            sc = self.session().sparkContext
            rdd = sc.parallelize(list(enumerate(sliced)), numSlices=len(sliced))
            try:
                done = dict(rdd.map(lambda item: (item[0], item[1].run())).collect())
            except Exception as e:  # noqa: BLE001 - Spark's errors: reported per slice
                reason = str(e).strip().splitlines()[0][:500] if str(e).strip() else repr(e)
                done = {
                    i: j.run_failed(f"Spark job failed: {reason}") for i, j in enumerate(sliced)
                }
            by_partition: dict[tuple[str, int], list[PartitionDiff]] = {}
            for i, j in enumerate(sliced):
                by_partition.setdefault((j.topic, j.partition), []).append(done[i])
            return [merge_slices(by_partition[(j.topic, j.partition)]) for j in jobs]

        return run


def slice_jobs(jobs: Sequence[DiffJob], slice_offsets: int | None) -> list[DiffJob]:
    """Cut each job's common range into ``within`` slices aligned to the digest chunk grid."""
    out: list[DiffJob] = []
    for job in jobs:
        step = slice_offsets or job.options.chunk_offsets * 4
        step = max(job.options.chunk_offsets, step - step % job.options.chunk_offsets)
        lo, hi = common_range(job.bounds)
        if hi - lo <= step:
            out.append(job)
            continue
        start = lo
        while start < hi:
            # Slice ends sit on multiples of the chunk size so chunk digests line up.
            end = min(hi, (start // step + 1) * step)
            out.append(
                dataclasses.replace(
                    job, options=dataclasses.replace(job.options, within=(start, end))
                )
            )
            start = end
    return out
