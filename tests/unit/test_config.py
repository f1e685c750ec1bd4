"""The TOML config file, cluster references and their one precedence rule."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from partsync.config import (
    DEFAULT_CONFIG_NAME,
    ClusterRef,
    Config,
    find_config_path,
    load_config,
    parse_config,
)
from partsync.errors import ConfigError, ExitStatus

SECRET = "s3cr3t-Pa55word"
SSL_SECRET = "k3y-pa55phrase"

FULL = """
local = "dc1"

[clusters.dc1]
bootstrap_servers = ["kafka-1.dc1:9092", "kafka-2.dc1:9093"]

[clusters.dc2]
bootstrap_servers = "kafka-1.dc2:9092,kafka-2.dc2:9092"
client_id = "partsync-dc2"
max_bytes_per_sec = 50000000

[clusters.secure]
bootstrap_servers = ["[::1]:9094"]
security_protocol = "sasl_ssl"
sasl_mechanism = "SCRAM-SHA-512"
sasl_plain_username = "mirror"
sasl_plain_password_env = "PARTSYNC_TEST_SASL"
ssl_cafile = "/etc/ca.pem"
ssl_certfile = "/etc/client.pem"
ssl_keyfile = "/etc/client.key"
ssl_password_env = "PARTSYNC_TEST_SSL"
ssl_check_hostname = false
"""

ENV = {"PARTSYNC_TEST_SASL": SECRET, "PARTSYNC_TEST_SSL": SSL_SECRET}


def write(tmp_path: Path, text: str, name: str = "partsync.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture
def no_env_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean slate: no $PARTSYNC_CONFIG and an empty working directory."""
    monkeypatch.delenv("PARTSYNC_CONFIG", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


# -- parsing --------------------------------------------------------------------------------


def test_full_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL), env=ENV)
    assert cfg.local == "dc1"
    assert set(cfg.clusters) == {"dc1", "dc2", "secure"}

    dc1 = cfg.clusters["dc1"]
    assert dc1.name == "dc1"
    assert dc1.bootstrap_servers == (("kafka-1.dc1", 9092), ("kafka-2.dc1", 9093))
    assert dc1.bootstrap == "kafka-1.dc1:9092,kafka-2.dc1:9093"
    assert dc1.client_id == "partsync"
    assert dc1.max_bytes_per_sec is None
    assert dc1.security.security_protocol == "PLAINTEXT"
    assert not dc1.security.uses_ssl and not dc1.security.uses_sasl

    dc2 = cfg.clusters["dc2"]
    assert dc2.bootstrap_servers == (("kafka-1.dc2", 9092), ("kafka-2.dc2", 9092))
    assert dc2.client_id == "partsync-dc2"
    assert dc2.max_bytes_per_sec == 50_000_000

    sec = cfg.clusters["secure"]
    assert sec.bootstrap_servers == (("::1", 9094),)  # brackets stripped from IPv6
    s = sec.security
    assert s.security_protocol == "SASL_SSL"  # case-insensitive
    assert s.uses_ssl and s.uses_sasl
    assert s.sasl_mechanism == "SCRAM-SHA-512"
    assert s.sasl_plain_username == "mirror"
    assert s.sasl_plain_password == SECRET
    assert s.ssl_password == SSL_SECRET
    assert (s.ssl_cafile, s.ssl_certfile, s.ssl_keyfile) == (
        "/etc/ca.pem",
        "/etc/client.pem",
        "/etc/client.key",
    )
    assert s.ssl_check_hostname is False


def test_empty_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, ""), env={})
    assert cfg.clusters == {} and cfg.local is None


def test_sasl_mechanism_defaults_to_plain(tmp_path: Path) -> None:
    text = """
[clusters.x]
bootstrap_servers = ["h:1"]
security_protocol = "SASL_PLAINTEXT"
sasl_plain_username = "u"
sasl_plain_password_env = "PW"
"""
    sec = load_config(write(tmp_path, text), env={"PW": "p"}).clusters["x"].security
    assert sec.sasl_mechanism == "PLAIN"
    assert sec.sasl_plain_password == "p"
    assert sec.uses_sasl and not sec.uses_ssl


def test_sasl_password_env_read_from_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARTSYNC_TEST_SASL", "from-os-environ")
    monkeypatch.setenv("PARTSYNC_TEST_SSL", "x")
    cfg = load_config(write(tmp_path, FULL))  # env=None: os.environ
    assert cfg.clusters["secure"].security.sasl_plain_password == "from-os-environ"


def test_missing_sasl_env_var_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, FULL), env={"PARTSYNC_TEST_SSL": "x"})
    msg = str(exc.value)
    assert (
        "PARTSYNC_TEST_SASL" in msg
        and "is not set" in msg
        and "partsync.toml: [clusters.secure]" in msg
    )


def test_missing_ssl_password_env_var(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="PARTSYNC_TEST_SSL"):
        load_config(write(tmp_path, FULL), env={"PARTSYNC_TEST_SASL": "x"})


@pytest.mark.parametrize("value", ['""', "5", "true"])
def test_env_key_must_name_a_variable(tmp_path: Path, value: str) -> None:
    text = f"""
[clusters.x]
bootstrap_servers = ["h:1"]
security_protocol = "SASL_SSL"
sasl_plain_username = "u"
sasl_plain_password_env = {value}
"""
    with pytest.raises(ConfigError, match="name an environment variable"):
        load_config(write(tmp_path, text), env={})


def test_password_itself_is_not_a_key(tmp_path: Path) -> None:
    """Secrets come from the environment only; a literal password key is a typo-class error."""
    text = """
[clusters.x]
bootstrap_servers = ["h:1"]
sasl_plain_password = "inline"
"""
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), env={})
    assert "sasl_plain_password" in str(exc.value)
    assert "inline" not in str(exc.value)


def test_secrets_not_in_repr(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL), env=ENV)
    sec = cfg.clusters["secure"]
    for text in (repr(cfg), repr(sec), repr(sec.security), str(sec), str(cfg)):
        assert SECRET not in text
        assert SSL_SECRET not in text
    assert "mirror" in repr(sec.security)  # the username is not a secret


def test_unknown_cluster_key_is_named(tmp_path: Path) -> None:
    text = """
[clusters.dc1]
bootstrap_servers = ["h:1"]
bootstrap_server = "typo:1"
"""
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), env={})
    msg = str(exc.value)
    assert "[clusters.dc1]" in msg
    assert "unknown key(s) bootstrap_server " in msg
    assert exc.value.exit_status is ExitStatus.USAGE


def test_unknown_top_level_key_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, 'lokal = "dc1"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path, env={})
    msg = str(exc.value)
    known = "(known: acls, clusters, defaults, local, topic_configs)"
    assert f"unknown top-level key(s) lokal {known}" in msg
    assert str(path) in msg


def test_local_must_name_a_cluster(tmp_path: Path) -> None:
    text = 'local = "dc9"\n[clusters.dc1]\nbootstrap_servers = ["h:1"]\n'
    with pytest.raises(ConfigError, match="local = 'dc9' does not name"):
        load_config(write(tmp_path, text), env={})


def test_local_may_not_be_an_address(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not name"):
        load_config(write(tmp_path, 'local = "h:9092"\n'), env={})


@pytest.mark.parametrize(
    "table,match",
    [
        ("", "bootstrap_servers must list"),
        ("bootstrap_servers = []", "bootstrap_servers must list"),
        ("bootstrap_servers = [1]", "bootstrap_servers must list"),
        ('bootstrap_servers = ["nohost"]', "'nohost' is not a host:port"),
        ('bootstrap_servers = ["h:99999"]', "port 99999 out of range"),
        ('bootstrap_servers = ["h:0"]', "port 0 out of range"),
        (
            'bootstrap_servers = ["h:1"]\nsecurity_protocol = "TLS"',
            "security_protocol must be one of",
        ),
        (
            (
                'bootstrap_servers = ["h:1"]\nsecurity_protocol = "SASL_SSL"\n'
                'sasl_mechanism = "GSSAPI"'
            ),
            "sasl_mechanism must be one of",
        ),
        (
            'bootstrap_servers = ["h:1"]\nsecurity_protocol = "SASL_SSL"',
            "SASL needs sasl_plain_username",
        ),
        (
            'bootstrap_servers = ["h:1"]\nmax_bytes_per_sec = 0',
            "max_bytes_per_sec must be a positive",
        ),
        (
            'bootstrap_servers = ["h:1"]\nmax_bytes_per_sec = "1MB"',
            "max_bytes_per_sec must be a positive",
        ),
    ],
)
def test_cluster_table_errors(tmp_path: Path, table: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, f"[clusters.c]\n{table}\n"), env={})


def test_max_bytes_per_sec_rejects_bool(tmp_path: Path) -> None:
    text = '[clusters.c]\nbootstrap_servers = ["h:1"]\nmax_bytes_per_sec = true\n'
    with pytest.raises(ConfigError, match="max_bytes_per_sec"):
        load_config(write(tmp_path, text), env={})


def test_ssl_check_hostname_must_be_a_boolean(tmp_path: Path) -> None:
    text = '[clusters.c]\nbootstrap_servers = ["h:1"]\nssl_check_hostname = "false"\n'
    with pytest.raises(ConfigError, match="ssl_check_hostname"):
        load_config(write(tmp_path, text), env={})


def test_clusters_must_be_tables(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[clusters.c\] must be a table"):
        load_config(write(tmp_path, "[clusters]\nc = 5\n"), env={})
    with pytest.raises(ConfigError, match=r"\[clusters\] must be a table"):
        load_config(write(tmp_path, 'clusters = "dc1"\n'), env={})


def test_invalid_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "[clusters.c\n")
    with pytest.raises(ConfigError, match="is not valid TOML") as exc:
        load_config(path, env={})
    assert str(path) in str(exc.value)


def test_explicit_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", env={})


def test_parse_config_without_file() -> None:
    cfg = parse_config({"clusters": {"a": {"bootstrap_servers": ["h:1"]}}, "local": "a"}, env={})
    assert cfg.path is None
    assert cfg.local_ref(None).name == "a"


# -- references: names vs host:port ---------------------------------------------------------


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    return load_config(write(tmp_path, FULL), env=ENV)


def test_resolve_name(cfg: Config) -> None:
    assert cfg.resolve("dc2") is cfg.clusters["dc2"]
    assert cfg.resolve("  dc2 ") is cfg.clusters["dc2"]


@pytest.mark.parametrize(
    "ref,host,port",
    [
        ("127.0.0.1:9092", "127.0.0.1", 9092),
        ("kafka.example.com:19092", "kafka.example.com", 19092),
        ("my_host-1:1", "my_host-1", 1),
        ("[::1]:9092", "::1", 9092),
        ("[fe80::1]:65535", "fe80::1", 65535),
    ],
)
def test_resolve_address(cfg: Config, ref: str, host: str, port: int) -> None:
    c = cfg.resolve(ref)
    assert c == ClusterRef(name=ref, bootstrap_servers=((host, port),))
    assert c.security.security_protocol == "PLAINTEXT"
    assert c.client_id == "partsync"


@pytest.mark.parametrize("ref", ["dc3", "h", "h:", ":9092", "h:port", "h:1:2", "h:123456"])
def test_resolve_unknown(cfg: Config, ref: str) -> None:
    with pytest.raises(ConfigError) as exc:
        cfg.resolve(ref)
    msg = str(exc.value)
    assert repr(ref) in msg
    assert "known: dc1, dc2, secure" in msg


def test_resolve_port_out_of_range(cfg: Config) -> None:
    with pytest.raises(ConfigError, match="port 70000 out of range"):
        cfg.resolve("h:70000")


def test_resolve_without_config_file() -> None:
    cfg = Config(clusters={})
    assert cfg.resolve("h:1").bootstrap == "h:1"
    with pytest.raises(ConfigError, match=r"no config file found.*known: none"):
        cfg.resolve("dc1")


def test_resolve_list(cfg: Config) -> None:
    refs = cfg.resolve_list("dc1, 10.0.0.1:9092 ,,dc2")
    assert [r.name for r in refs] == ["dc1", "10.0.0.1:9092", "dc2"]
    with pytest.raises(ConfigError, match="listed twice"):
        cfg.resolve_list("dc1,dc2,dc1")
    with pytest.raises(ConfigError, match="no clusters given"):
        cfg.resolve_list(" , ")


def test_local_ref(cfg: Config) -> None:
    assert cfg.local_ref(None).name == "dc1"  # local = "dc1" in the file
    assert cfg.local_ref("dc2").name == "dc2"  # the command line wins
    assert cfg.local_ref("h:1").bootstrap == "h:1"
    # A bootstrap list, as kcat and Kafka's tools take it (it was refused).
    many = cfg.local_ref("127.0.0.1:9092, 127.0.0.1:9093,[::1]:9094")
    assert many.bootstrap_servers == (("127.0.0.1", 9092), ("127.0.0.1", 9093), ("::1", 9094))
    assert many.name == "127.0.0.1:9092,127.0.0.1:9093,[::1]:9094"
    with pytest.raises(ConfigError, match="not host:port bootstrap addresses"):
        cfg.local_ref("127.0.0.1:9092,dc2")  # a list of addresses, not of clusters
    with pytest.raises(ConfigError, match="no local cluster"):
        Config(clusters={}).local_ref(None)


# -- where the file comes from: --config > $PARTSYNC_CONFIG > ./partsync.toml ----------------


def _named(tmp_path: Path, name: str) -> Path:
    return write(
        tmp_path,
        f'local = "{name}"\n[clusters.{name}]\nbootstrap_servers = ["h:1"]\n',
        f"{name}.toml",
    )


def test_precedence_explicit_beats_env_and_cwd(
    tmp_path: Path, no_env_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    explicit, from_env = _named(tmp_path, "explicit"), _named(tmp_path, "fromenv")
    write(no_env_config, 'local = "cwd"\n[clusters.cwd]\nbootstrap_servers = ["h:1"]\n')
    monkeypatch.setenv("PARTSYNC_CONFIG", str(from_env))
    cfg = load_config(str(explicit))
    assert cfg.local == "explicit" and cfg.path == explicit
    assert find_config_path(explicit) == explicit


def test_precedence_env_beats_cwd(
    tmp_path: Path, no_env_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_env = _named(tmp_path, "fromenv")
    write(no_env_config, 'local = "cwd"\n[clusters.cwd]\nbootstrap_servers = ["h:1"]\n')
    monkeypatch.setenv("PARTSYNC_CONFIG", str(from_env))
    cfg = load_config(None)
    assert cfg.local == "fromenv" and cfg.path == from_env


def test_precedence_cwd_file(no_env_config: Path) -> None:
    write(no_env_config, 'local = "cwd"\n[clusters.cwd]\nbootstrap_servers = ["h:1"]\n')
    cfg = load_config(None)
    assert cfg.local == "cwd"
    assert cfg.path == Path(DEFAULT_CONFIG_NAME)
    assert Path(os.getcwd()) / cfg.path == no_env_config / DEFAULT_CONFIG_NAME


def test_no_file_anywhere_is_fine(no_env_config: Path) -> None:
    assert find_config_path(None) is None
    cfg = load_config(None)
    assert cfg == Config(clusters={})


def test_env_pointing_at_missing_file_is_an_error(
    tmp_path: Path, no_env_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARTSYNC_CONFIG", str(tmp_path / "gone.toml"))
    write(no_env_config, "")  # a ./partsync.toml must not be used as a fallback
    with pytest.raises(ConfigError, match="gone.toml does not exist"):
        load_config(None)


def test_empty_env_var_falls_through_to_cwd(
    no_env_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARTSYNC_CONFIG", "")
    write(no_env_config, 'local = "cwd"\n[clusters.cwd]\nbootstrap_servers = ["h:1"]\n')
    assert load_config(None).local == "cwd"


def test_env_mapping_argument_overrides_os_environ(
    tmp_path: Path, no_env_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARTSYNC_CONFIG", str(tmp_path / "ignored.toml"))
    other = _named(tmp_path, "mapped")
    assert find_config_path(None, env={"PARTSYNC_CONFIG": str(other)}) == other
    assert find_config_path(None, env={}) is None


DEFAULTS = """
local = "dc1"

[defaults]
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_plain_username = "partsync"
sasl_plain_password_env = "PARTSYNC_TEST_SASL"
client_id = "mirror"

[clusters.dc1]
bootstrap_servers = ["k1:9093"]

[clusters.dc2]
bootstrap_servers = ["k2:9093"]
client_id = "mirror-dc2"
security_protocol = "PLAINTEXT"
"""


def test_defaults_apply_to_every_cluster_and_to_a_bare_address(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, DEFAULTS), env={"PARTSYNC_TEST_SASL": "s3cret"})
    dc1, dc2 = cfg.resolve("dc1"), cfg.resolve("dc2")
    assert dc1.client_id == "mirror" and dc1.security.sasl_mechanism == "SCRAM-SHA-512"
    assert dc1.security.sasl_plain_password == "s3cret"
    # A cluster's own keys win.
    assert dc2.client_id == "mirror-dc2" and dc2.security.security_protocol == "PLAINTEXT"
    bare = cfg.resolve("k9.example:9093")
    assert bare.bootstrap_servers == (("k9.example", 9093),)
    assert bare.security.security_protocol == "SASL_SSL" and bare.client_id == "mirror"
    assert "s3cret" not in repr(bare)  # secrets stay out of repr (and so out of logs)


def test_defaults_errors_name_the_file_and_the_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, '[defaults]\nbootstrap_servers = ["x:1"]\n'))
    assert "partsync.toml: [defaults]: unknown key(s) bootstrap_servers" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, DEFAULTS), env={})
    assert "partsync.toml: [clusters.dc1] (with [defaults]): environment variable " in str(
        exc.value
    )
    cfg = load_config(write(tmp_path, "[defaults]\nssl_check_hostname = 1\n"))
    with pytest.raises(ConfigError, match=r"cluster h:1 \(with \[defaults\]\): ssl_check_hostname"):
        cfg.resolve("h:1")


def test_timeouts_are_client_settings_checked_and_used(tmp_path: Path) -> None:
    from partsync.io.cluster import Cluster

    cfg = load_config(
        write(
            tmp_path,
            "[defaults]\nrequest_timeout_ms = 5000\n"
            '[clusters.a]\nbootstrap_servers = ["h:1"]\n'
            "connect_timeout_ms = 2500\n",
        )
    )
    a = cfg.resolve("a")
    assert (a.request_timeout_ms, a.connect_timeout_ms) == (5000, 2500)
    assert cfg.resolve("h:2").connect_timeout_ms == 30_000  # the built-in default
    assert Cluster(a).timeout == 5.0  # each request's time limit, unless a call gives its own
    for bad in ("0", "true", '"5s"', "3600001"):
        with pytest.raises(ConfigError, match=r"\[clusters.b\]: request_timeout_ms must be"):
            load_config(
                write(
                    tmp_path,
                    f'[clusters.b]\nbootstrap_servers = ["h:1"]\nrequest_timeout_ms = {bad}\n',
                )
            )


def _sasl(tmp_path: Path, extra: str, env: dict[str, str] | None = None) -> ClusterRef:
    text = f"""
[clusters.x]
bootstrap_servers = ["h:1"]
security_protocol = "SASL_SSL"
{extra}
"""
    return load_config(write(tmp_path, text), env=env or {}).clusters["x"]


def test_secrets_from_files(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(SECRET + "\n")  # as `echo` writes it: the newline is not part
    (tmp_path / "key-pw").write_text(SSL_SECRET)
    ref = _sasl(
        tmp_path,
        f'sasl_plain_username = "u"\nsasl_plain_password_file = '
        f'"{tmp_path / "pw"}"\nssl_password_file = "{tmp_path / "key-pw"}"',
    )
    assert ref.security.sasl_plain_password == SECRET
    assert ref.security.ssl_password == SSL_SECRET
    assert SECRET not in repr(ref) and SSL_SECRET not in repr(ref)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'sasl_plain_username = "u"\nsasl_plain_password_file = "{d}/none"',
            "sasl_plain_password_file: cannot read",
        ),
        (
            'sasl_plain_username = "u"\nsasl_plain_password_file = "{d}/empty"',
            "sasl_plain_password_file: '{d}/empty' is empty",
        ),
        (
            'sasl_plain_username = "u"\nsasl_plain_password_file = "{d}/pw"\nsasl_plain_password_env = "PW"',
            "give sasl_plain_password_env or sasl_plain_password_file, not both",
        ),
        (
            'sasl_plain_username = "u"',
            "SASL needs sasl_plain_password_env or sasl_plain_password_file",
        ),
        ('sasl_mechanism = "OAUTHBEARER"', "OAUTHBEARER needs sasl_oauthbearer_token_file"),
    ],
)
def test_secret_file_errors_name_the_key_and_file(tmp_path: Path, extra: str, message: str) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "pw").write_text(SECRET)
    with pytest.raises(ConfigError) as exc:
        _sasl(tmp_path, extra.format(d=tmp_path), env={"PW": "x"})
    assert message.format(d=tmp_path) in str(exc.value)
    assert "[clusters.x]" in str(exc.value) and SECRET not in str(exc.value)


def test_oauthbearer_token_from_env_or_a_file_read_at_each_connection(tmp_path: Path) -> None:
    ref = _sasl(
        tmp_path,
        'sasl_mechanism = "OAUTHBEARER"\nsasl_oauthbearer_token_env = "TOK"',
        env={"TOK": "a.b."},
    )
    sec = ref.security
    assert sec.sasl_mechanism == "OAUTHBEARER" and sec.sasl_oauthbearer_token == "a.b."
    assert sec.sasl_plain_username is None and "a.b." not in repr(ref)
    (tmp_path / "tok").write_text("t1")
    ref = _sasl(
        tmp_path,
        f'sasl_mechanism = "oauthbearer"\nsasl_oauthbearer_token_file = "{tmp_path / "tok"}"',
    )
    # Not kept: the connection reads the file each time (a refreshed token is followed).
    assert ref.security.sasl_oauthbearer_token is None
    assert ref.security.sasl_oauthbearer_token_file == str(tmp_path / "tok")


def test_socket_buffer_bytes(tmp_path: Path) -> None:
    text = '[clusters.x]\nbootstrap_servers = ["h:1"]\nsocket_buffer_bytes = 16777216\n'
    assert load_config(write(tmp_path, text), env={}).clusters["x"].socket_buffer_bytes == 16 << 20
    assert ClusterRef("y", (("h", 1),)).socket_buffer_bytes == 4 << 20
    for bad in ("1024", "true", '"big"'):
        text = f'[clusters.x]\nbootstrap_servers = ["h:1"]\nsocket_buffer_bytes = {bad}\n'
        with pytest.raises(ConfigError, match="socket_buffer_bytes must be bytes"):
            load_config(write(tmp_path, text), env={})


def test_a_cluster_secret_file_replaces_a_default_env(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(SECRET)
    text = f"""
[defaults]
security_protocol = "SASL_SSL"
sasl_plain_username = "u"
sasl_plain_password_env = "PW"

[clusters.a]
bootstrap_servers = ["h:1"]

[clusters.b]
bootstrap_servers = ["h:2"]
sasl_plain_password_file = "{tmp_path / "pw"}"
"""
    cfg = load_config(write(tmp_path, text), env={"PW": "from-env"})
    assert cfg.clusters["a"].security.sasl_plain_password == "from-env"
    assert cfg.clusters["b"].security.sasl_plain_password == SECRET


def test_a_secret_file_that_is_not_text_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "pw").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        _sasl(
            tmp_path, f'sasl_plain_username = "u"\nsasl_plain_password_file = "{tmp_path / "pw"}"'
        )


def test_topic_configs_add_and_remove_followed_keys(tmp_path: Path) -> None:
    text = '[topic_configs]\nadd = ["flush.messages"]\nremove = ["segment.ms", "segment.bytes"]\n'
    cfg = load_config(write(tmp_path, text), env={})
    assert cfg.follow_configs == ("flush.messages",)
    assert cfg.unfollow_configs == ("segment.ms", "segment.bytes")
    assert load_config(write(tmp_path, ""), env={}).follow_configs == ()


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ('[topic_configs]\nadd = "flush.messages"\n', "add must list topic config names"),
        ("[topic_configs]\nremove = [1]\n", "remove must list topic config names"),
        ('[topic_configs]\nkeep = ["x"]\n', r"\[topic_configs\]: unknown key\(s\) keep"),
    ],
)
def test_topic_configs_errors_name_the_table(tmp_path: Path, table: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, table), env={})


def test_acls_table(tmp_path: Path) -> None:
    text = (
        '[acls]\nprincipals = ["User:app-*"]\nexclude = ["User:admin"]\n'
        'principal = "User:partsync"\nrecord_topic = "dr.acls"\n'
        '[acls.map]\n"User:app-1" = "User:app-1-dr"\n'
    )
    cfg = load_config(write(tmp_path, text), env={})
    assert cfg.acls == {
        "principals": ("User:app-*",),
        "exclude": ("User:admin",),
        "map": (("User:app-1", "User:app-1-dr"),),
        "principal": "User:partsync",
        "record_topic": "dr.acls",
    }
    empty = load_config(write(tmp_path, ""), env={}).acls
    assert empty.get("principals", ()) == () and empty.get("principal") is None


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ('[acls]\nprincipals = "User:a"\n', r"\[acls\] principals must list principals"),
        ('[acls.map]\n"app" = "User:b"\n', r"\[acls\] map must map principals"),
        ("[acls]\nprincipal = 3\n", r"\[acls\] principal must be a non-empty string"),
        ('[acls]\nrecord-topic = "x"\n', r"\[acls\]: unknown key\(s\) record-topic"),
    ],
)
def test_acls_errors_name_the_table(tmp_path: Path, table: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, table), env={})
