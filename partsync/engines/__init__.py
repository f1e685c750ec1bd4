"""Engines run partition tasks: locally on threads (default) or on Apache Spark."""

from __future__ import annotations

import threading
from typing import Any

from partsync.copy.context import ProgressFn
from partsync.copy.options import PARALLELISM
from partsync.errors import UsageError
from partsync.run.sync import Engine

__all__ = ["make_engine"]


def make_engine(
    name: str,
    *,
    parallelism: int = PARALLELISM,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    spark_master: str | None = None,
    **_: Any,
) -> Engine:
    if name == "local":
        from partsync.engines.local import LocalEngine

        return LocalEngine(parallelism=parallelism, progress=progress, stop=stop)
    if name == "spark":
        try:
            from partsync.engines.spark import SparkEngine
        except ImportError as e:
            raise UsageError(
                "--engine spark needs PySpark: pip install 'partsync[spark]' (and Java 17); "
                f"import failed: {e}"
            ) from None
        return SparkEngine(master=spark_master, parallelism=parallelism)
    raise UsageError(f"unknown engine {name!r} (choose local or spark)")
