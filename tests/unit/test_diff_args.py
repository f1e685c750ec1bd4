"""``diff``'s options into ``DiffArgs`` and its ``DiffRequest``: each check a row with the
message users' scripts see (exit 2), in the order they have always come in (the empty topic
name before the config is read; then the clusters, --hole-key, --partitions), parsed by the
command's own click declarations, without any broker or config file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from partsync.config import ClusterRef, Config, ConfigError, Security
from partsync.errors import ExitStatus, UsageError
from partsync.plan.diff_model import DiffOptions, Level
from partsync.ui.cli_diff import diff
from partsync.ui.diff_args import DiffArgs
from partsync.wire.holes import HOLE_KEY
from tests.support.recording import Recording

TWO = "127.0.0.1:1,127.0.0.1:2"


def _ref(name: str, port: int, security: Security | None = None) -> ClusterRef:
    return ClusterRef(name, (("127.0.0.1", port),), security=security or Security())


NO_CA = Security(security_protocol="SSL", ssl_cafile="/nonexistent/partsync-test/ca.pem")
CONFIG = Config(
    clusters={"dc1": _ref("dc1", 1), "dc2": _ref("dc2", 2), "tls": _ref("tls", 3, NO_CA)}
)
MISSING_CA = "[clusters.tls]: ssl_cafile '/nonexistent/partsync-test/ca.pem': no such file"
HOLE_KEY_EMPTY = "--hole-key: the key of hole records cannot be empty"
TOO_FEW = "diff needs at least two clusters"


def _params(argv: list[str]) -> dict[str, Any]:
    with diff.make_context(diff.name, list(argv)) as ctx:  # click consumes the list
        return dict(ctx.params)


def _args(argv: list[str], clusters: str = TWO) -> DiffArgs:
    return DiffArgs.from_click(_params(["--clusters", clusters, *argv]))


@pytest.mark.parametrize(
    ("argv", "clusters", "message"),
    [
        # Before the config is read.
        (["--topic", ""], TWO, "empty topic name"),
        (["--topic", "t", "--topic", "  "], TWO, "empty topic name"),
        (["--topic", "", "--hole-key", ""], "unknown", "empty topic name"),
        # The clusters, resolved in the config.
        (["--topic", "t"], "127.0.0.1:1", TOO_FEW),
        (["--topic", "t"], "dc1", TOO_FEW),
        (["--topic", "t", "--hole-key", "", "--partitions", "x"], "dc1", TOO_FEW),
        # Then --hole-key, then --partitions.
        (["--topic", "t", "--hole-key", ""], TWO, HOLE_KEY_EMPTY),
        (["--topic", "t", "--hole-key", "", "--partitions", "x"], "dc1,dc2", HOLE_KEY_EMPTY),
        (
            ["--topic", "t", "--partitions", "x"],
            TWO,
            "bad partition spec 'x': 'x' is not N or N-M",
        ),
        (
            ["--topic", "t", "--partitions", "3-1"],
            TWO,
            "bad partition spec '3-1': '3-1' is not an ascending range",
        ),
        (
            ["--topic", "t", "--partitions", ""],
            TWO,
            "empty partition spec: give partitions like 0,3-5, or leave out --partitions",
        ),
    ],
)
def test_each_check_refuses_with_its_message(argv: list[str], clusters: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        _args(argv, clusters).request(CONFIG)
    assert str(caught.value) == message
    assert caught.value.exit_status is ExitStatus.USAGE


@pytest.mark.parametrize(
    ("clusters", "message"),
    [
        (",", "no clusters given"),
        ("dc1,dc1", "cluster 'dc1' is listed twice"),
        ("127.0.0.1:1,127.0.0.1:1", "cluster '127.0.0.1:1' is listed twice"),
        # A missing TLS file is found before the count, and before --hole-key/--partitions.
        ("tls", MISSING_CA),
        ("dc1,tls", MISSING_CA),
    ],
)
def test_clusters_are_checked_in_the_config_first(clusters: str, message: str) -> None:
    args = _args(["--topic", "t", "--hole-key", "", "--partitions", "x"], clusters)
    with pytest.raises(ConfigError) as caught:
        args.request(CONFIG)
    assert str(caught.value) == message
    assert caught.value.exit_status is ExitStatus.USAGE


def test_an_unknown_cluster_is_a_config_error_before_the_other_checks() -> None:
    args = _args(["--topic", "t", "--hole-key", ""], "dc1,nowhere")
    with pytest.raises(ConfigError, match="unknown cluster 'nowhere'"):
        args.request(CONFIG)


def test_the_defaults_make_the_default_request() -> None:
    args = _args(["--topic", "t"], "dc1, dc2")
    assert (args.engine, args.spark_master, args.slice_offsets) == ("local", None, None)
    assert (args.parallelism, args.as_json, args.html_path) == (4, False, None)
    req = args.request(CONFIG)
    assert req.topics == ("t",)
    assert req.clusters == (CONFIG.clusters["dc1"], CONFIG.clusters["dc2"])
    assert req.partitions is None
    assert req.options == DiffOptions(level=Level.BATCH, chunk_offsets=10_000, hole_key=HOLE_KEY)


def test_every_option_is_carried_into_the_request(tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    argv = ["--topic", "b", "--topic", "a", "--topic", "b", "--partitions", "0,3-4"]
    argv += ["--level", "record", "--chunk-offsets", "7", "--compaction-holes", "fill"]
    argv += ["--hole-key", "hk", "--parallelism", "2", "--json", "--html", str(report)]
    argv += ["--engine", "spark", "--spark-master", "local[2]", "--slice-offsets", "9"]
    args = _args(argv, "dc2,127.0.0.1:5,dc1")
    assert args.topics == ("b", "a")  # each once, in the order given
    assert (args.parallelism, args.as_json, args.html_path) == (2, True, str(report))
    assert (args.engine, args.spark_master, args.slice_offsets) == ("spark", "local[2]", 9)
    req = args.request(CONFIG)
    assert [c.name for c in req.clusters] == ["dc2", "127.0.0.1:5", "dc1"]  # the first: ties
    assert req.partitions == frozenset({0, 3, 4})
    assert req.options == DiffOptions(
        level=Level.RECORD, chunk_offsets=7, compaction_holes=True, hole_key=b"hk"
    )
    assert not report.exists()  # written after the comparison, not while parsing


def test_every_option_of_the_command_is_read() -> None:
    """An option added to the command but not to its dataclass would be silently ignored."""
    kw = Recording(_params(["--topic", "t", "--clusters", TWO]))
    DiffArgs.from_click(kw)
    assert kw.read == set(kw.data)
