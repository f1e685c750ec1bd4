"""Configuration: the TOML file, cluster references and client security settings.

A cluster reference on the command line is either a name from the config file's
``[clusters.NAME]`` tables or a single ``host:port`` bootstrap address. The file is found by
``--config FILE``, else ``$PARTSYNC_CONFIG``, else ``./partsync.toml`` (optional). Unknown keys are
errors that name the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partsync.errors import ConfigError

__all__ = [
    "DEFAULT_CONFIG_NAME",
    "ClusterRef",
    "Config",
    "Security",
    "check_files",
    "find_config_path",
    "load_config",
]

DEFAULT_CONFIG_NAME = "partsync.toml"
_ADDRESS = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

_CLUSTER_KEYS = {
    "bootstrap_servers",
    "client_id",
    "security_protocol",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password_env",
    "ssl_password_file",
    "ssl_check_hostname",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password_env",
    "sasl_plain_password_file",
    "sasl_oauthbearer_token_env",
    "sasl_oauthbearer_token_file",
    "max_bytes_per_sec",
    "request_timeout_ms",
    "connect_timeout_ms",
    "socket_buffer_bytes",
    "client_rack",
}
_TOP_KEYS = {"local", "clusters", "defaults", "topic_configs", "acls"}
# Client settings' defaults (ClusterRef's, and what a table that leaves them out gets).
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_SOCKET_BUFFER_BYTES = 4 << 20
# What [defaults] may set for every cluster (a cluster's own table wins, key by key).
_DEFAULT_KEYS = _CLUSTER_KEYS - {"bootstrap_servers"}


@dataclass(frozen=True)
class Security:
    """Client security settings for one cluster. Secrets are excluded from repr()."""

    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    # OAUTHBEARER: a token from the environment, or a file read again at every connection (an
    # agent that refreshes the file is followed without a restart).
    sasl_oauthbearer_token: str | None = field(default=None, repr=False)
    sasl_oauthbearer_token_file: str | None = None

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ClusterRef:
    """Where and how to reach one cluster."""

    name: str
    bootstrap_servers: tuple[tuple[str, int], ...]
    client_id: str = "partsync"
    security: Security = field(default_factory=Security)
    max_bytes_per_sec: int | None = None
    # How long a broker may take to answer a request, and to accept a connection (and TLS).
    request_timeout_ms: int = DEFAULT_TIMEOUT_MS
    connect_timeout_ms: int = DEFAULT_TIMEOUT_MS
    # Each connection's send and receive buffers: on a long fat link the receive window, and
    # so one connection's throughput, is bounded by it (the kernel caps it at net.core.*mem_max).
    socket_buffer_bytes: int = DEFAULT_SOCKET_BUFFER_BYTES
    # Kafka's client.rack: sent with fetches, so a leader with a rack-aware replica selector
    # (replica.selector.class) can point partsync at a replica in the same rack (KIP-392).
    client_rack: str | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.bootstrap_servers)


@dataclass(frozen=True)
class Config:
    clusters: Mapping[str, ClusterRef]
    local: str | None = None
    path: Path | None = None
    # [defaults]: applied to the configured clusters already, and to a bare host:port here.
    defaults: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    # [topic_configs]: topic configs a mirror follows beyond the default ones, and default
    # ones it does not (``plan.topic_configs.ConfigPolicy``).
    follow_configs: tuple[str, ...] = ()
    unfollow_configs: tuple[str, ...] = ()
    # [acls]: whose ACLs --sync-acls copies and as whom, partsync's own principal on the local
    # cluster (--read-only), the record topic (``plan.acls.AclOptions``' fields).
    acls: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self, ref: str) -> ClusterRef:
        """A configured cluster name, or ``host:port`` bootstrap addresses of one cluster,
        comma-separated (as kcat and Kafka's tools take them; where commas separate clusters,
        as in ``--sources``, one address of each suffices: the rest come from its metadata)."""
        ref = ref.strip()
        if ref in self.clusters:
            return self.clusters[ref]
        addresses = [a.strip() for a in ref.split(",")]
        if all(_ADDRESS.match(a) for a in addresses):
            ref = ",".join(addresses)
            if not self.defaults:
                return ClusterRef(
                    name=ref, bootstrap_servers=tuple(_address(a, ref) for a in addresses)
                )
            table = {**self.defaults, "bootstrap_servers": addresses}
            return _cluster(ref, table, self.env, where=f"cluster {ref} (with [defaults])")
        known = ", ".join(sorted(self.clusters)) or "none"
        where = f" in {self.path}" if self.path else " (no config file found)"
        raise ConfigError(
            f"unknown cluster {ref!r}: not a cluster name{where} (known: {known}) and not "
            "host:port bootstrap addresses"
        )

    def resolve_list(self, refs: str) -> list[ClusterRef]:
        names = [r.strip() for r in refs.split(",") if r.strip()]
        if not names:
            raise ConfigError("no clusters given")
        out = [self.resolve(r) for r in names]
        seen: set[str] = set()
        for c in out:
            if c.name in seen:
                raise ConfigError(f"cluster {c.name!r} is listed twice")
            seen.add(c.name)
        return out

    def local_ref(self, ref: str | None) -> ClusterRef:
        if ref:
            return self.resolve(ref)
        if self.local:
            return self.resolve(self.local)
        raise ConfigError('no local cluster: pass --local or set local = "NAME" in the config file')


def _address(text: str, cluster: str) -> tuple[str, int]:
    m = _ADDRESS.match(text.strip())
    if not m:
        raise ConfigError(f"cluster {cluster!r}: {text!r} is not a host:port address")
    port = int(m.group("port"))
    if not 0 < port < 65536:
        raise ConfigError(f"cluster {cluster!r}: port {port} out of range")
    return m.group("host").strip("[]"), port


def _env_secret(where: str, env_var: Any, env: Mapping[str, str]) -> str:
    if not isinstance(env_var, str) or not env_var:
        raise ConfigError(f"{where}: the *_env keys name an environment variable")
    if env_var not in env:
        raise ConfigError(
            f"{where}: environment variable {env_var} (holding the secret) is not set"
        )
    return env[env_var]


def read_secret_file(path: str, what: str) -> str:
    """A secret file's content without its trailing newline; errors name the file, never
    the content."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            text = f.read().rstrip("\r\n")
    except OSError as e:
        raise ConfigError(f"{what}: cannot read {path!r}: {e.strerror or e}") from None
    except ValueError:  # not UTF-8 text
        raise ConfigError(f"{what}: {path!r} is not UTF-8 text") from None
    if not text:
        raise ConfigError(f"{what}: {path!r} is empty")
    return text


def _secret(where: str, table: Mapping[str, Any], key: str, env: Mapping[str, str]) -> str | None:
    """The secret ``key`` names from ``{key}_env`` (an environment variable) or
    ``{key}_file`` (a file), never inline; None when neither is given."""
    from_env, from_file = table.get(f"{key}_env"), table.get(f"{key}_file")
    if from_env is not None and from_file is not None:
        raise ConfigError(f"{where}: give {key}_env or {key}_file, not both")
    if from_file is not None:
        if not isinstance(from_file, str) or not from_file:
            raise ConfigError(f"{where}: {key}_file must name a file")
        return read_secret_file(from_file, f"{where}: {key}_file")
    if from_env is not None:
        return _env_secret(where, from_env, env)
    return None


def _check_table(
    table: Any, known: set[str], where: str, hint: str = "", kind: str = "key(s)"
) -> None:
    """A table (not a value) with only ``known`` keys; errors name ``where``."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(
            f"{where}: unknown {kind} {', '.join(unknown)} (known: {', '.join(sorted(known))}"
            f"{hint})"
        )


def _cluster(name: str, table: Any, env: Mapping[str, str], where: str | None = None) -> ClusterRef:
    """``where``: the table errors name (default ``[clusters.NAME]``)."""
    where = where or f"[clusters.{name}]"
    _check_table(table, _CLUSTER_KEYS, where)
    servers = table.get("bootstrap_servers")
    if isinstance(servers, str):
        servers = [s for s in servers.split(",") if s.strip()]
    if not servers or not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
        raise ConfigError(f"{where}: bootstrap_servers must list host:port addresses")
    protocol = str(table.get("security_protocol", "PLAINTEXT")).upper()
    if protocol not in _PROTOCOLS:
        raise ConfigError(f"{where}: security_protocol must be one of {', '.join(_PROTOCOLS)}")
    mechanism = table.get("sasl_mechanism")
    password = oauth_token = token_file = None
    if protocol.startswith("SASL"):
        mechanism = str(mechanism or "PLAIN").upper()
        if mechanism not in _SASL_MECHANISMS:
            raise ConfigError(
                f"{where}: sasl_mechanism must be one of {', '.join(_SASL_MECHANISMS)}"
            )
        if mechanism == "OAUTHBEARER":
            token_file = table.get("sasl_oauthbearer_token_file")
            token = _secret(where, table, "sasl_oauthbearer_token", env)
            if token is None:
                raise ConfigError(
                    f"{where}: OAUTHBEARER needs sasl_oauthbearer_token_file "
                    "or sasl_oauthbearer_token_env"
                )
            if token_file is None:
                oauth_token = token
        else:
            if not table.get("sasl_plain_username"):
                raise ConfigError(f"{where}: SASL needs sasl_plain_username")
            password = _secret(where, table, "sasl_plain_password", env)
            if password is None:
                raise ConfigError(
                    f"{where}: SASL needs sasl_plain_password_env or sasl_plain_password_file"
                )
    check_hostname = table.get("ssl_check_hostname", True)
    if not isinstance(check_hostname, bool):
        raise ConfigError(f"{where}: ssl_check_hostname must be true or false (unquoted)")
    for key in (
        "ssl_cafile",
        "ssl_certfile",
        "ssl_keyfile",
        "client_id",
        "sasl_plain_username",
        "client_rack",
    ):
        if key in table and not isinstance(table[key], str):
            raise ConfigError(f"{where}: {key} must be a string")
    ssl_password = _secret(where, table, "ssl_password", env)
    rate = table.get("max_bytes_per_sec")
    # bool is an int subclass: `true` must not become 1 byte/s.
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0):
        raise ConfigError(f"{where}: max_bytes_per_sec must be a positive integer")
    timeouts = {}
    for key in ("request_timeout_ms", "connect_timeout_ms"):
        ms = table.get(key, DEFAULT_TIMEOUT_MS)
        if isinstance(ms, bool) or not isinstance(ms, int) or not 100 <= ms <= 3_600_000:
            raise ConfigError(f"{where}: {key} must be milliseconds from 100 to 3600000")
        timeouts[key] = ms
    buffer = table.get("socket_buffer_bytes", DEFAULT_SOCKET_BUFFER_BYTES)
    if isinstance(buffer, bool) or not isinstance(buffer, int) or not 65536 <= buffer <= 1 << 30:
        raise ConfigError(f"{where}: socket_buffer_bytes must be bytes from 65536 to 1073741824")
    security = Security(
        security_protocol=protocol,
        ssl_cafile=table.get("ssl_cafile"),
        ssl_certfile=table.get("ssl_certfile"),
        ssl_keyfile=table.get("ssl_keyfile"),
        ssl_password=ssl_password,
        ssl_check_hostname=check_hostname,
        sasl_mechanism=mechanism if protocol.startswith("SASL") else None,
        sasl_plain_username=table.get("sasl_plain_username"),
        sasl_plain_password=password,
        sasl_oauthbearer_token=oauth_token,
        sasl_oauthbearer_token_file=token_file,
    )
    return ClusterRef(
        name=name,
        bootstrap_servers=tuple(_address(s, name) for s in servers),
        client_id=str(table.get("client_id", "partsync")),
        security=security,
        max_bytes_per_sec=rate,
        socket_buffer_bytes=buffer,
        client_rack=table.get("client_rack") or None,
        **timeouts,
    )


_SECRETS = ("sasl_plain_password", "ssl_password", "sasl_oauthbearer_token")


def _without_overridden_secrets(
    defaults: Mapping[str, Any], table: Mapping[str, Any]
) -> dict[str, Any]:
    """``[defaults]`` less the secrets a cluster's table gives itself: a cluster's
    ``*_file`` replaces a default ``*_env`` (and the other way round), not joins it."""
    drop = {
        f"{k}{v}"
        for k in _SECRETS
        for v in ("_env", "_file")
        if f"{k}_env" in table or f"{k}_file" in table
    }
    return {k: v for k, v in defaults.items() if k not in drop}


def parse_config(
    data: Mapping[str, Any], *, path: Path | None = None, env: Mapping[str, str] | None = None
) -> Config:
    env = os.environ if env is None else env
    where = str(path) if path else "config"
    _check_table(data, _TOP_KEYS, where, kind="top-level key(s)")
    defaults = data.get("defaults", {})
    _check_table(
        defaults,
        _DEFAULT_KEYS,
        f"{where}: [defaults]",
        "; bootstrap_servers belongs to each cluster",
    )
    tables = data.get("clusters", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{where}: [clusters] must be a table of [clusters.NAME] tables")
    clusters = {}
    for name, t in tables.items():
        merged = {**_without_overridden_secrets(defaults, t), **t} if isinstance(t, dict) else t
        clusters[name] = _cluster(
            name,
            merged,
            env,
            where=f"{where}: [clusters.{name}]" + (" (with [defaults])" if defaults else ""),
        )
    local = data.get("local")
    if local is not None and (not isinstance(local, str) or local not in clusters):
        raise ConfigError(f"{where}: local = {local!r} does not name a [clusters.NAME] table")
    follow, unfollow = _topic_configs(data.get("topic_configs", {}), where)
    acls = _acls(data.get("acls", {}), f"{where}: [acls]")
    return Config(
        clusters=clusters,
        local=local,
        path=path,
        defaults=defaults,
        env=env,
        follow_configs=follow,
        unfollow_configs=unfollow,
        acls=acls,
    )


def _topic_configs(table: Any, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """[topic_configs]: ``add`` and ``remove``, lists of topic config names."""
    _check_table(table, {"add", "remove"}, f"{where}: [topic_configs]")
    out = []
    for key in ("add", "remove"):
        names = table.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{where}: [topic_configs] {key} must list topic config names")
        out.append(tuple(names))
    return out[0], out[1]


def _acls(table: Any, where: str) -> dict[str, Any]:
    """[acls]: ``principals`` and ``exclude`` (lists of globs), ``map`` (a table: source
    principal -> local principal), ``principal`` and ``record_topic`` (strings)."""
    _check_table(table, {"principals", "exclude", "map", "principal", "record_topic"}, where)
    out: dict[str, Any] = {}
    for key in ("principals", "exclude"):
        globs = table.get(key, [])
        if not isinstance(globs, list) or not all(isinstance(g, str) and g for g in globs):
            raise ConfigError(f'{where} {key} must list principals (globs, e.g. "User:app-*")')
        out[key] = tuple(globs)
    mapping = table.get("map", {})
    if not isinstance(mapping, dict) or not all(
        isinstance(v, str) and ":" in k and ":" in v for k, v in mapping.items()
    ):
        raise ConfigError(f'{where} map must map principals to principals ("User:a" = "User:b")')
    out["map"] = tuple(sorted(mapping.items()))
    for key in ("principal", "record_topic"):
        value = table.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"{where} {key} must be a non-empty string")
        out[key] = value
    return out


def find_config_path(
    explicit: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None
) -> Path | None:
    """``--config`` > ``$PARTSYNC_CONFIG`` > ``./partsync.toml`` (only if it exists)."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit)
    if env.get("PARTSYNC_CONFIG"):
        return Path(env["PARTSYNC_CONFIG"])
    default = Path(DEFAULT_CONFIG_NAME)
    return default if default.exists() else None


def load_config(
    explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    path = find_config_path(explicit, env)
    if path is None:
        return Config(clusters={})
    import tomllib  # only where there is a file to read: ~10 ms of a start

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
    return parse_config(data, path=path, env=env)


def check_files(ref: ClusterRef) -> None:
    """The TLS files a cluster names exist: a missing one is a config error (exit 2) found
    before any work, not an unreachable cluster (exit 1) found while connecting."""
    sec = ref.security
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        value = getattr(sec, key)
        if value and not os.path.isfile(os.path.expanduser(value)):
            raise ConfigError(f"[clusters.{ref.name}]: {key} {value!r}: no such file")
