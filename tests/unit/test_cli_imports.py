"""What the command line loads before it runs a command: every run pays it, and a cron job's
``sync --json`` run with nothing to render should not pay for rich, the codecs, a TOML parser
it has no file for, or ``importlib.metadata`` (which ``crc32c``'s package imports)."""

from __future__ import annotations

import subprocess
import sys

LAZY = ("rich", "lz4", "zstandard", "snappy", "gzip", "tomllib", "importlib.metadata")


def _loaded(code: str) -> list[str]:
    probe = f"{code}; import sys; print(' '.join(m for m in {LAZY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    return done.stdout.split()


def test_the_cli_loads_neither_rich_nor_the_codecs_until_needed() -> None:
    assert _loaded("import partsync.ui.cli") == []


def test_a_sync_run_loads_none_of_them_until_needed() -> None:
    # What ``sync --json`` imports to plan and copy (ui.cli_sync imports these when it runs).
    modules = "partsync.ui.cli, partsync.io.pool, partsync.run.planner, partsync.run.sync"
    assert _loaded(f"import {modules}") == []


def test_the_probe_sees_a_loaded_module() -> None:
    # The probe itself can fail: rendering a table loads rich.
    assert "rich" in _loaded("import partsync.ui.render")


def test_the_probe_sees_what_crc32cs_package_would_load() -> None:
    assert "importlib.metadata" in _loaded("import crc32c")
