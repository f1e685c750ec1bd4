"""Real Apache Kafka brokers as plain JVM processes, for the tests (no Docker).

The broker jars come from Maven Central through ``tests/support/kafka_maven/pom.xml`` and are
cached per version under ``$PARTSYNC_KAFKA_CACHE`` (default ``~/.cache/partsync/kafka``)::

    <cache>/<version>/lib/*.jar       the broker (main class kafka.Kafka)
    <cache>/<version>/mirror/*.jar    the broker plus connect-mirror/connect-runtime (optional)

Clusters are KRaft only: every node's storage is formatted with ``kafka.tools.StorageTool`` (the
same class in 3.9 and 4.x) under a random cluster id, with a static controller quorum
(``controller.quorum.voters``). By default every node is a combined broker+controller; with
``dedicated_controller=True`` one controller-only node (id 0) serves brokers 1..n.

Usage::

    with start_kafka_cluster(KAFKA_4, 3, data_dir=tmp_path) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        cluster.kill(2)
        cluster.start(2)

Every JVM runs in its own session (process group); they are stopped by ``stop()``, by the
context manager, at interpreter exit (atexit) and, when started from the main thread, by the
kernel if this process dies (``setpriv --pdeathsig KILL``).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from partsync.demo.brokers import free_ports

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "DEFAULT_JVM_OPTS",
    "KAFKA_3",
    "KAFKA_4",
    "KAFKA_VERSIONS",
    "KafkaCluster",
    "KafkaNode",
    "KafkaSetupError",
    "KafkaStartError",
    "SaslSetup",
    "TlsSetup",
    "cache_root",
    "ensure_kafka",
    "iter_versions",
    "metadata_brokers",
    "start_kafka_cluster",
]

KAFKA_3 = "3.9.1"
KAFKA_4 = "4.1.1"
KAFKA_VERSIONS = (KAFKA_3, KAFKA_4)

POM = Path(__file__).resolve().parent / "kafka_maven" / "pom.xml"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"  # the same (Scala) class in 3.9.x and 4.x

# Small and quick to start. -XX:TieredStopAtLevel=1 (C1 only) starts faster but runs slower
# when hot: pass jvm_opts without it for throughput benchmarks.
DEFAULT_JVM_OPTS: tuple[str, ...] = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-XX:MaxMetaspaceSize=128m",
    "-XX:ReservedCodeCacheSize=64m",
    "-Xss512k",
    "-Djava.awt.headless=true",
)

_MAVEN_TIMEOUT = 1800.0
_LOG_LEVEL_ENV = "PARTSYNC_KAFKA_LOG_LEVEL"  # WARN unless set (e.g. INFO to debug start-up)
_BIND_ERRORS = ("BindException", "Address already in use")


class KafkaSetupError(RuntimeError):
    """Java or Maven is missing, or the jars could not be downloaded."""


class KafkaStartError(RuntimeError):
    """A node did not come up (the message carries the tail of its log)."""


class _PortTaken(KafkaStartError):
    pass


# -- jars -----------------------------------------------------------------------------------


def cache_root() -> Path:
    env = os.environ.get("PARTSYNC_KAFKA_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "partsync" / "kafka"


def _major(version: str) -> int:
    try:
        return int(version.split(".", 1)[0])
    except ValueError:
        raise ValueError(f"not a Kafka version: {version!r}") from None


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaSetupError(
            "java not found (set JAVA_HOME or put java on PATH); Kafka 4.x needs Java 17+"
        )
    return found


def _mvn() -> str:
    found = os.environ.get("MVN") or shutil.which("mvn")
    if found is None:
        raise KafkaSetupError(
            "mvn (Apache Maven) not found: it downloads the Kafka jars once "
            f"(or fill {cache_root()}/<version>/lib by hand and touch .lib.complete there)"
        )
    return found


def _jars(d: Path) -> list[Path]:
    return sorted(d.glob("*.jar")) if d.is_dir() else []


def ensure_kafka(version: str = KAFKA_4, *, mirror: bool = False) -> Path:
    """Return the directory of Kafka ``version``'s jars, downloading them once with Maven.

    ``mirror=True`` returns a directory that also holds MirrorMaker 2 (connect-mirror and
    connect-runtime). Safe to call from several processes at once (a lock file serialises
    the download); a download that fails or is interrupted leaves nothing half-done behind.
    """
    _major(version)
    _java()
    component = "mirror" if mirror else "lib"
    vdir = cache_root() / version
    out = vdir / component
    marker = vdir / f".{component}.complete"
    if marker.exists() and _jars(out):
        return out
    vdir.mkdir(parents=True, exist_ok=True)
    with open(vdir / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and _jars(out):
            return out
        tmp_name = f"{component}.partial-{os.getpid()}"
        tmp = vdir / tmp_name
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [
            _mvn(),
            "-q",
            "-B",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            f"-Dkafka.version={version}",
            f"-Dkafka.logging={'reload4j' if _major(version) < 4 else 'log4j2'}",
            f"-Dkafka.cache={cache_root()}",
            f"-Dkafka.component={tmp_name}",
        ]
        if mirror:
            cmd.append("-Pmirror")
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise KafkaSetupError(f"downloading Kafka {version} timed out: {' '.join(cmd)}") from e
        if proc.returncode != 0 or not _jars(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
            raise KafkaSetupError(
                f"downloading Kafka {version} with Maven failed (exit {proc.returncode}):\n"
                f"{' '.join(cmd)}\n{tail}"
            )
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        marker.write_text(f"{version}\n")
    return out


# -- readiness probe (stdlib Kafka protocol) ------------------------------------------------


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionResetError("connection closed by broker")
        buf += chunk
    return bytes(buf)


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> set[int] | None:
    """Node ids of the brokers a Metadata v4 request to ``host:port`` lists, None if no answer.

    Metadata v4 is accepted by Kafka 1.0 through 4.x (4.0 removed only v0-3, KIP-896).
    """
    client_id = b"partsync-probe"
    body = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id
    body += struct.pack(">ib", 0, 0)  # topics: [] (none), allow_auto_topic_creation: false
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            data = _recv_exact(sock, size)
    except OSError:
        return None
    # correlation_id, throttle_time_ms, brokers: [node_id, host, port, rack]
    pos = 8
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    ids: set[int] = set()
    for _ in range(count):
        (node_id, host_len) = struct.unpack_from(">ih", data, pos)
        pos += 6 + host_len + 4
        (rack_len,) = struct.unpack_from(">h", data, pos)
        pos += 2 + max(rack_len, 0)
        ids.add(node_id)
    return ids


# -- processes ------------------------------------------------------------------------------


def _random_cluster_id() -> str:
    # Kafka's Uuid text form: 16 random bytes, URL-safe base64 without padding, not "-..."
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


_PDEATHSIG = shutil.which("setpriv")


def _popen(cmd: Sequence[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    # The JVM dies with this process when started from the main thread (a parent-death signal
    # is tied to the thread that forked: one started from a worker thread would die with it).
    if _PDEATHSIG and threading.current_thread() is threading.main_thread():
        cmd = [_PDEATHSIG, "--pdeathsig", "KILL", *cmd]
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _log_option(node_dir: Path, version: str) -> str:
    if _major(version) < 4:
        return f"-Dlog4j.configuration=file:{node_dir / 'log4j.properties'}"
    return f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}"


def _write_log_config(node_dir: Path, version: str) -> None:
    """A quiet (WARN, file-only) log config: reload4j for 3.x, log4j2 for 4.x."""
    level = os.environ.get(_LOG_LEVEL_ENV, "WARN").upper()
    log = node_dir / "server.log"
    if _major(version) < 4:
        (node_dir / "log4j.properties").write_text(
            f"log4j.rootLogger={level}, file\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={log}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        )
        return
    (node_dir / "log4j2.properties").write_text(
        "status = warn\n"
        "appender.file.type = File\n"
        "appender.file.name = FILE\n"
        f"appender.file.fileName = {log}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        f"rootLogger.level = {level}\n"
        "rootLogger.appenderRef.file.ref = FILE\n"
    )


def _rss_kib(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"^VmRSS:\s+(\d+)", status, re.MULTILINE)
    return int(m.group(1)) if m else None


# -- cluster --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SaslSetup:
    """A SASL_PLAINTEXT listener on every broker (PLAIN and SCRAM-SHA-256/512 for ``users``,
    name to password; OAUTHBEARER with unsigned tokens, ``unsigned_jwt``) under Kafka's StandardAuthorizer with no ACLs yet: a SASL user may do
    nothing until granted. The PLAINTEXT and controller listeners stay (their principal,
    User:ANONYMOUS, is the super user that brokers and the tests' set-up use)."""

    users: Mapping[str, str]

    def server_props(self) -> dict[str, str]:
        plain_users = " ".join(f'user_{u}="{p}"' for u, p in self.users.items())
        jaas = "listener.name.sasl_plaintext.{}.sasl.jaas.config"
        return {
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            # Kafka's unsecured-token validator (no JWKS): any unsigned JWT whose `sub` is the
            # principal; enough to test a client's OAUTHBEARER exchange.
            jaas.format("oauthbearer"): "org.apache.kafka.common.security.oauthbearer."
            'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="ANONYMOUS";',
            jaas.format("plain"): "org.apache.kafka.common.security.plain.PlainLoginModule "
            f"required {plain_users};",
            jaas.format("scram-sha-256"): "org.apache.kafka.common.security.scram."
            "ScramLoginModule required;",
            jaas.format("scram-sha-512"): "org.apache.kafka.common.security.scram."
            "ScramLoginModule required;",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }

    @staticmethod
    def unsigned_jwt(sub: str, lifetime_s: int = 3600) -> str:
        """A token the broker's unsecured validator accepts for principal ``User:<sub>``."""
        import json

        def part(d: dict[str, object]) -> str:
            return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

        now = int(time.time())
        return f"{part({'alg': 'none'})}.{part({'sub': sub, 'iat': now, 'exp': now + lifetime_s})}."

    def format_args(self) -> list[str]:
        """StorageTool's ``--add-scram`` for each user and SCRAM mechanism (KIP-900)."""
        out = []
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            for u, p in self.users.items():
                out += ["--add-scram", f"{mech}=[name={u},password={p}]"]
        return out


@dataclass(frozen=True)
class TlsSetup:
    """An SSL listener on every broker, from PEM files: ``keystore`` holds the broker's private
    key (unencrypted PKCS#8) and certificate chain, ``truststore`` the CAs it accepts client
    certificates from; ``client_auth`` "required" is mutual TLS. No authorizer comes with it
    (combine with ``SaslSetup`` for one)."""

    keystore: Path
    truststore: Path
    client_auth: str = "required"

    def server_props(self) -> dict[str, str]:
        at = "listener.name.ssl."
        return {
            f"{at}ssl.keystore.type": "PEM",
            f"{at}ssl.keystore.location": str(self.keystore),
            f"{at}ssl.truststore.type": "PEM",
            f"{at}ssl.truststore.location": str(self.truststore),
            f"{at}ssl.client.auth": self.client_auth,
        }


@dataclass
class KafkaNode:
    node_id: int
    roles: str  # "broker,controller", "broker" or "controller"
    port: int  # PLAINTEXT listener (0 on a controller-only node)
    controller_port: int  # CONTROLLER listener (0 on a broker-only node)
    dir: Path
    # SASL_PLAINTEXT and SSL listeners (0: none; see ``SaslSetup``, ``TlsSetup``).
    sasl_port: int = 0
    ssl_port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # False once stopped or killed on purpose: its exit is then no start-up failure.
    wanted: bool = field(default=False, repr=False)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_address(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def ssl_address(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_path(self) -> Path:
        """Kafka's own log (WARN and up unless PARTSYNC_KAFKA_LOG_LEVEL says otherwise)."""
        return self.dir / "server.log"

    @property
    def stdout_path(self) -> Path:
        """The JVM's stdout/stderr (crashes, StorageTool output)."""
        return self.dir / "stdout.log"

    @property
    def data_path(self) -> Path:
        return self.dir / "data"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.running and self.process else None


_LIVE: set[KafkaCluster] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        clusters = list(_LIVE)
    for c in clusters:
        c.stop(timeout=2.0)


class KafkaCluster:
    """A KRaft cluster of JVM processes on 127.0.0.1. Build it with ``start_kafka_cluster``."""

    def __init__(
        self,
        version: str,
        lib_dir: Path,
        data_dir: Path,
        nodes: list[KafkaNode],
        *,
        heap: str,
        jvm_opts: Sequence[str],
        overrides: Mapping[str, str],
        cluster_id: str,
        sasl: SaslSetup | None = None,
        tls: TlsSetup | None = None,
        racks: Sequence[str] = (),
    ) -> None:
        self.version = version
        self.lib_dir = lib_dir
        self.data_dir = data_dir
        self.nodes = nodes
        self.heap = heap
        self.jvm_opts = tuple(jvm_opts)
        self.overrides = dict(overrides)
        self.cluster_id = cluster_id
        self.sasl = sasl
        self.tls = tls
        self.racks = tuple(racks)
        self._lock = threading.RLock()

    # -- views ------------------------------------------------------------------------------

    @property
    def brokers(self) -> list[KafkaNode]:
        return [n for n in self.nodes if n.is_broker]

    @property
    def bootstrap(self) -> str:
        """All brokers' addresses, "127.0.0.1:p1,127.0.0.1:p2,..." (live or not)."""
        return ",".join(n.address for n in self.brokers)

    @property
    def sasl_bootstrap(self) -> str:
        """The brokers' SASL_PLAINTEXT listeners (``SaslSetup``)."""
        return ",".join(n.sasl_address for n in self.brokers)

    @property
    def ssl_bootstrap(self) -> str:
        """The brokers' SSL listeners (``TlsSetup``)."""
        return ",".join(n.ssl_address for n in self.brokers)

    @property
    def bootstrap_live(self) -> str:
        return ",".join(n.address for n in self.brokers if n.running)

    def node(self, node_id: int) -> KafkaNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} (nodes: {[n.node_id for n in self.nodes]})")

    def __repr__(self) -> str:
        live = [n.node_id for n in self.nodes if n.running]
        return f"KafkaCluster({self.version}, {self.bootstrap}, live={live})"

    # -- set-up -----------------------------------------------------------------------------

    def _write_config(self, node: KafkaNode) -> None:
        voters = ",".join(
            f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes if n.is_controller
        )
        n_brokers = len(self.brokers)
        props: dict[str, str] = {
            "node.id": str(node.node_id),
            "process.roles": node.roles,
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.data_path),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": str(min(3, n_brokers)),
            "transaction.state.log.replication.factor": str(min(3, n_brokers)),
            "transaction.state.log.min.isr": str(min(2, n_brokers)),
            # Small footprint: few threads, a 16 MiB (not 128 MiB) log cleaner buffer.
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "num.replica.fetchers": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(16 << 20),
            # Time retention runs every second from the start (not every 5 minutes after 30 s),
            # so a test topic that keeps the 7-day default while holding old timestamps (the
            # test records' are from 2023) loses them in every run, not in one run of fifty.
            "log.initial.task.delay.ms": "1000",
            "log.retention.check.interval.ms": "1000",
            # The log cleaner looks for work every 250 ms, not 15 s: compaction tests wait less.
            "log.cleaner.backoff.ms": "250",
            # Timed-out transactions are aborted within a second, not ten.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        }
        listeners = []
        if node.is_broker:
            listeners.append(f"PLAINTEXT://127.0.0.1:{node.port}")
            props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{node.port}"
            props["inter.broker.listener.name"] = "PLAINTEXT"
            for setup, listener in (
                (self.sasl, f"SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}"),
                (self.tls, f"SSL://127.0.0.1:{node.ssl_port}"),
            ):
                if setup is not None:
                    listeners.append(listener)
                    props["advertised.listeners"] += "," + listener
        if self.racks and node.is_broker:
            props["broker.rack"] = self.racks[(node.node_id - 1) % len(self.racks)]
        for setup, protocol in ((self.sasl, "SASL_PLAINTEXT"), (self.tls, "SSL")):
            if setup is not None:
                props["listener.security.protocol.map"] += f",{protocol}:{protocol}"
                props.update(setup.server_props())
        if node.is_controller:
            listeners.append(f"CONTROLLER://127.0.0.1:{node.controller_port}")
        props["listeners"] = ",".join(listeners)
        props.update(self.overrides)
        node.dir.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        _write_log_config(node.dir, self.version)

    def _java_cmd(self, node: KafkaNode, main: str, *args: str) -> list[str]:
        return [
            _java(),
            f"-Xmx{self.heap}",
            *self.jvm_opts,
            _log_option(node.dir, self.version),
            f"-Dkafka.logs.dir={node.dir}",
            "-cp",
            str(self.lib_dir / "*"),
            main,
            *args,
        ]

    def _format(self, timeout: float) -> None:
        def fmt(node: KafkaNode) -> None:
            cmd = self._java_cmd(
                node,
                STORAGE_TOOL,
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(node.config_path),
                *(self.sasl.format_args() if self.sasl is not None else ()),
            )
            # The tool only needs a little heap and no JIT to speak of.
            cmd[1] = "-Xmx128m"
            with open(node.stdout_path, "ab") as out:
                proc = subprocess.run(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    check=False,
                )
            if proc.returncode != 0:
                raise KafkaStartError(
                    f"formatting node {node.node_id} failed (exit {proc.returncode}):\n"
                    f"{_tail(node.stdout_path)}"
                )

        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            for f in [pool.submit(fmt, n) for n in self.nodes]:
                f.result()

    # -- lifecycle --------------------------------------------------------------------------

    def _spawn(self, node: KafkaNode) -> None:
        if node.running:
            raise RuntimeError(f"node {node.node_id} is already running")
        cmd = self._java_cmd(node, MAIN_CLASS, str(node.config_path))
        node.process = _popen(cmd, node.stdout_path, node.dir)
        node.wanted = True
        with _LIVE_LOCK:
            _LIVE.add(self)

    def _check_alive(self, node: KafkaNode) -> None:
        if node.wanted and node.process is not None and node.process.poll() is not None:
            text = _tail(node.log_path, 60) + "\n" + _tail(node.stdout_path, 40)
            err = _PortTaken if any(e in text for e in _BIND_ERRORS) else KafkaStartError
            raise err(
                f"Kafka {self.version} node {node.node_id} exited with code "
                f"{node.process.returncode} (log {node.log_path}):\n{text.strip()}"
            )

    def wait_ready(self, timeout: float = 90.0, nodes: Iterable[KafkaNode] | None = None) -> None:
        """Wait until every running broker (or those in ``nodes``) answers Metadata listing every
        running broker (a restarted broker is listed once it has registered again)."""
        deadline = time.monotonic() + timeout
        waiting = [n for n in (self.nodes if nodes is None else nodes) if n.running]
        while True:
            for n in self.nodes:
                self._check_alive(n)
            expected = {n.node_id for n in self.brokers if n.running}
            waiting = [
                n
                for n in waiting
                if n.is_broker and not expected <= (metadata_brokers("127.0.0.1", n.port) or set())
            ]
            if not waiting:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- node {n.node_id}\n{_tail(n.log_path, 20)}" for n in waiting)
                raise KafkaStartError(
                    f"Kafka {self.version} nodes {[n.node_id for n in waiting]} not ready "
                    f"after {timeout:.0f}s (expected brokers {sorted(expected)}):\n{tails}"
                )
            time.sleep(0.2)

    def start(
        self, node_id: int | None = None, *, wait: bool = True, timeout: float = 90.0
    ) -> None:
        """Start one stopped node (on its old data and ports), or every stopped node."""
        with self._lock:
            todo = (
                [n for n in self.nodes if not n.running]
                if node_id is None
                else [self.node(node_id)]
            )
            for n in todo:
                self._spawn(n)
        if wait:
            self.wait_ready(timeout, todo)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (no controlled shutdown). ``start(node_id)`` brings it back."""
        node = self.node(node_id)
        node.wanted = False
        if node.process is not None:
            _signal_group(node.process, signal.SIGKILL)
            node.process.wait()

    def stop_node(self, node_id: int, timeout: float = 30.0) -> None:
        """SIGTERM one node (controlled shutdown), SIGKILL after ``timeout`` seconds."""
        self._terminate([self.node(node_id)], timeout)

    def restart(
        self, node_id: int, *, graceful: bool = True, wait: bool = True, timeout: float = 90.0
    ) -> None:
        if graceful:
            self.stop_node(node_id)
        else:
            self.kill(node_id)
        self.start(node_id, wait=wait, timeout=timeout)

    def _terminate(self, nodes: list[KafkaNode], timeout: float) -> None:
        for n in nodes:
            n.wanted = False
        procs = [n.process for n in nodes if n.process is not None]
        for p in procs:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs:
            if p.poll() is None:
                _signal_group(p, signal.SIGKILL)
                p.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every node: SIGTERM, then SIGKILL what is left after ``timeout`` seconds.

        ``timeout=0`` kills at once (the quickest teardown when the data is thrown away)."""
        with self._lock:
            if timeout <= 0:
                for n in self.nodes:
                    n.wanted = False
                    if n.process is not None:
                        _signal_group(n.process, signal.SIGKILL)
            # Broker-only nodes first: their controlled shutdown needs the controllers. Combined
            # nodes go all at once (a 3-node combined cluster stops in ~6 s).
            deadline = time.monotonic() + timeout
            self._terminate([n for n in self.nodes if not n.is_controller], timeout)
            rest = [n for n in self.nodes if n.is_controller]
            self._terminate(rest, max(0.0, deadline - time.monotonic()))
            with _LIVE_LOCK:
                _LIVE.discard(self)

    def rss_kib(self) -> dict[int, int]:
        """Resident set size of each running node's JVM, in KiB (Linux /proc)."""
        out: dict[int, int] = {}
        for n in self.nodes:
            rss = _rss_kib(n.pid)
            if rss is not None:
                out[n.node_id] = rss
        return out

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _plan_nodes(
    data_dir: Path,
    brokers: int,
    dedicated_controller: bool,
    sasl: bool = False,
    tls: bool = False,
) -> list[KafkaNode]:
    nodes = _plan_plain_nodes(data_dir, brokers, dedicated_controller)
    brokers_ = [n for n in nodes if n.is_broker]
    # Chosen together with ports the plan already holds, so none is chosen twice.
    used = {n.port for n in nodes} | {n.controller_port for n in nodes}
    free = iter([p for p in free_ports(2 * len(brokers_) + len(used)) if p not in used])
    for n in brokers_:
        n.sasl_port = next(free) if sasl else 0
        n.ssl_port = next(free) if tls else 0
    return nodes


def _plan_plain_nodes(data_dir: Path, brokers: int, dedicated_controller: bool) -> list[KafkaNode]:
    if dedicated_controller:
        ports = free_ports(brokers + 1)
        nodes = [KafkaNode(0, "controller", 0, ports[0], data_dir / "node-0")]
        nodes += [
            KafkaNode(i, "broker", ports[i], 0, data_dir / f"node-{i}")
            for i in range(1, brokers + 1)
        ]
        return nodes
    ports = free_ports(2 * brokers)
    return [
        KafkaNode(
            i, "broker,controller", ports[2 * i - 2], ports[2 * i - 1], data_dir / f"node-{i}"
        )
        for i in range(1, brokers + 1)
    ]


def start_kafka_cluster(
    version: str = KAFKA_4,
    brokers: int = 1,
    *,
    data_dir: Path,
    overrides: Mapping[str, str] | None = None,
    heap: str = "256m",
    jvm_opts: Sequence[str] | None = None,
    dedicated_controller: bool = False,
    timeout: float = 90.0,
    attempts: int = 3,
    sasl: SaslSetup | None = None,
    tls: TlsSetup | None = None,
    racks: Sequence[str] = (),
) -> KafkaCluster:
    """Format and start a KRaft cluster of ``brokers`` nodes and wait until it is ready.

    Broker node ids are 1..brokers (a dedicated controller is node 0). ``overrides`` are
    broker configs written last (they win over the defaults here). ``data_dir`` must not hold
    node-* directories yet. A port taken between choosing and binding it is retried with new
    ports, up to ``attempts`` times. ``racks``: broker n's ``broker.rack`` is racks[n-1]
    (cycling); ``sasl`` and ``tls`` add listeners (``SaslSetup``, ``TlsSetup``).
    """
    if brokers < 1:
        raise ValueError("brokers must be >= 1")
    lib = ensure_kafka(version)
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    existing = sorted(p.name for p in data_dir.glob("node-*"))
    if existing:
        raise FileExistsError(f"{data_dir} already holds {existing}: use a fresh directory")
    for attempt in range(1, attempts + 1):
        cluster = KafkaCluster(
            version,
            lib,
            data_dir,
            _plan_nodes(data_dir, brokers, dedicated_controller, sasl is not None, tls is not None),
            heap=heap,
            jvm_opts=DEFAULT_JVM_OPTS if jvm_opts is None else jvm_opts,
            overrides=overrides or {},
            cluster_id=_random_cluster_id(),
            sasl=sasl,
            tls=tls,
            racks=racks,
        )
        try:
            for n in cluster.nodes:
                cluster._write_config(n)
            cluster._format(timeout)
            cluster.start(timeout=timeout)
            return cluster
        except _PortTaken:
            cluster.stop(timeout=0)
            if attempt == attempts:
                raise
            for n in cluster.nodes:
                shutil.rmtree(n.dir, ignore_errors=True)
        except BaseException:
            cluster.stop(timeout=0)
            raise
    raise AssertionError("unreachable")


def iter_versions() -> Iterator[str]:
    """The pinned versions, or those in $PARTSYNC_KAFKA_VERSIONS (comma-separated)."""
    env = os.environ.get("PARTSYNC_KAFKA_VERSIONS")
    yield from (v.strip() for v in env.split(",") if v.strip()) if env else KAFKA_VERSIONS


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.support.kafka_jvm fetch [--mirror] [VERSION...]``: download the jars of
    Kafka versions into the cache (the pinned versions by default), as the tests would on
    first use; ``.ci/run`` calls it so the download is a step of its own."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tests.support.kafka_jvm")
    sub = ap.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="download Kafka broker jars from Maven Central")
    fetch.add_argument("versions", nargs="*", default=list(KAFKA_VERSIONS))
    fetch.add_argument("--mirror", action="store_true", help="also MirrorMaker 2 (connect-mirror)")
    args = ap.parse_args(argv)
    for version in args.versions:
        lib = ensure_kafka(version, mirror=args.mirror)
        print(f"{lib}: {len(_jars(lib))} jars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
