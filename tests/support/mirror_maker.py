"""MirrorMaker 2 (``org.apache.kafka.connect.mirror.MirrorMaker``, dedicated mode) as its own JVM,
from the jars ``kafka_jvm.ensure_kafka(version, mirror=True)`` fetches: the benchmark's deep
mirror contender on real Apache Kafka."""

from __future__ import annotations

import atexit
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.support.kafka_jvm import (
    _LIVE_LOCK,
    DEFAULT_JVM_OPTS,
    _java,
    _log_option,
    _popen,
    _rss_kib,
    _signal_group,
    _write_log_config,
    ensure_kafka,
)

__all__ = ["MIRROR_MAKER", "MirrorMakerProcess", "start_mirror_maker"]

MIRROR_MAKER = "org.apache.kafka.connect.mirror.MirrorMaker"


@dataclass(eq=False)
class MirrorMakerProcess:
    """A dedicated MirrorMaker 2 JVM (``connect-mirror-maker.sh`` without the script)."""

    version: str
    dir: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def config_path(self) -> Path:
        return self.dir / "mm2.properties"

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    @property
    def stdout_path(self) -> Path:
        return self.dir / "stdout.log"

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def rss_kib(self) -> int | None:
        return _rss_kib(self.process.pid if self.running else None)

    def stop(self, timeout: float = 15.0) -> None:
        _signal_group(self.process, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(self.process, signal.SIGKILL)
            self.process.wait()
        with _LIVE_LOCK:
            _LIVE_MM.discard(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


_LIVE_MM: set[MirrorMakerProcess] = set()


@atexit.register
def _stop_all_mirror_makers() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE_MM)
    for p in procs:
        p.stop(timeout=2.0)


def start_mirror_maker(
    version: str,
    config: Mapping[str, str],
    *,
    data_dir: Path,
    heap: str = "512m",
    jvm_opts: Sequence[str] | None = None,
    clusters: Sequence[str] = (),
) -> MirrorMakerProcess:
    """Start ``org.apache.kafka.connect.mirror.MirrorMaker`` with ``config`` (mm2.properties
    entries: ``clusters``, ``A.bootstrap.servers``, ``A->B.enabled``, ...). It does not wait:
    poll the target cluster for the mirrored topics. ``clusters`` limits it to the named
    target clusters (``--clusters``). The jars come from ``ensure_kafka(version, mirror=True)``.
    """
    lib = ensure_kafka(version, mirror=True)
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    _write_log_config(data_dir, version)
    cfg = data_dir / "mm2.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    cmd = [
        _java(),
        f"-Xmx{heap}",
        *(DEFAULT_JVM_OPTS if jvm_opts is None else jvm_opts),
        _log_option(data_dir, version),
        f"-Dkafka.logs.dir={data_dir}",
        "-cp",
        str(lib / "*"),
        MIRROR_MAKER,
        str(cfg),
    ]
    if clusters:
        cmd += ["--clusters", *clusters]
    mm = MirrorMakerProcess(version, data_dir, _popen(cmd, data_dir / "stdout.log", data_dir))
    with _LIVE_LOCK:
        _LIVE_MM.add(mm)
    return mm
