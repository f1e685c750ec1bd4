"""``scripts/bench_claims.py`` (the one command behind docs/benchmarks.md's claims table): its
table and its refusal of unknown claims. The benchmarks it runs have their own smoke tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_claims", ROOT / "scripts" / "bench_claims.py")
assert _spec is not None and _spec.loader is not None
claims = importlib.util.module_from_spec(_spec)
sys.modules["bench_claims"] = claims  # its dataclass looks itself up there
_spec.loader.exec_module(claims)


def test_the_table_says_which_claims_are_met_missed_or_failed() -> None:
    rows = [
        claims.Row("1", "a", "+0.10 s", "<= +0.5 s", True, 1.0),
        claims.Row("2b", "b", "5.40 s", "<= 1.5 s", False, 1.0),
        claims.Row("6", "(the benchmark failed)", "boom", "", None, 1.0),
    ]
    lines = claims.markdown(rows).splitlines()
    assert lines[0] == "| claim | what | measured | goal | met |"
    assert lines[2:] == [
        "| 1 | a | +0.10 s | <= +0.5 s | yes |",
        "| 2b | b | 5.40 s | <= 1.5 s | **no** |",
        "| 6 | (the benchmark failed) | boom |  | failed |",
    ]


def test_an_unknown_claim_is_refused_before_anything_runs() -> None:
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_claims.py"), "--only", "9"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2
    assert "unknown claim" in p.stderr and "$" not in p.stdout
