"""Engines that run partition tasks elsewhere than this machine's runner: Apache Spark."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from partsync.copy.context import ProgressFn
from partsync.copy.options import PARALLELISM
from partsync.errors import UsageError
from partsync.run.sync import Engine

if TYPE_CHECKING:  # PySpark is optional: imported when the Spark engine is asked for
    from partsync.engines.spark import SparkEngine

__all__ = ["make_engine", "spark_engine"]


def make_engine(
    name: str,
    *,
    parallelism: int = PARALLELISM,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    spark_master: str | None = None,
    **_: Any,
) -> Engine | None:
    """The engine named by ``--engine``: None for ``local`` (this machine's runner, in the local
    group: ``run.sync.run_job``), Spark's for ``spark``."""
    if name == "local":
        return None
    if name == "spark":
        return spark_engine(spark_master, parallelism)
    raise UsageError(f"unknown engine {name!r} (choose local or spark)")


def spark_engine(master: str | None = None, parallelism: int = 8) -> SparkEngine:
    """The Spark engine, or a usage error saying how to install PySpark."""
    try:
        from partsync.engines.spark import SparkEngine
    except ImportError as e:
        raise UsageError(
            "--engine spark needs PySpark: pip install 'partsync[spark]' (and Java 17); "
            f"import failed: {e}"
        ) from None
    return SparkEngine(master=master, parallelism=parallelism)
