"""What the repository's prose tells a newcomer to run or read exists: every broker mode named
in `PARTSYNC_TEST_BROKER=...` is one the tests accept (with testcontainers only for
`kafka-docker`), and no file points to a document that is not in the repository."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import _ALL_MODES

ROOT = Path(__file__).resolve().parents[2]
_PATTERNS = (
    "*.md",
    "docs/*.md",
    "docker-compose.yml",
    "partsync/**/*.py",
    "tests/**/*.py",
    "scripts/**/*.py",
    "deploy/**/*",
)
_TEXTS = [
    p
    for pattern in _PATTERNS
    for p in sorted(ROOT.glob(pattern))
    if p.is_file() and p != Path(__file__).resolve()
]


def test_the_texts_were_found() -> None:
    names = {p.name for p in _TEXTS}
    assert {"README.md", "cli.md", "docker-compose.yml", "cli.py"} <= names


def test_broker_modes_named_are_real() -> None:
    wrong = []
    for path in _TEXTS:
        for line in path.read_text(errors="replace").splitlines():
            for value in re.findall(r"PARTSYNC_TEST_BROKER=([\w.,-]+)", line):
                modes = value.split(",")
                if not all(m in (*_ALL_MODES, "kafka") for m in modes) or (
                    "testcontainers" in line and modes != ["kafka-docker"]
                ):
                    wrong.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert not wrong


def test_no_pointer_to_a_document_outside_the_repository() -> None:
    """The team's shared notes (KAFKA-FACTS.md, STYLE.md) live outside this repository."""
    wrong = [
        str(p.relative_to(ROOT))
        for p in _TEXTS
        if re.search(r"KAFKA-FACTS|STYLE\.md", p.read_text(errors="replace"))
    ]
    assert not wrong


def test_the_readme_runs_partsync_from_where_its_install_put_it() -> None:
    """The README installs into .venv, whose bin is not on PATH: a bare `partsync` in its code
    blocks must come after an activation of that venv (it did not)."""
    readme = (ROOT / "README.md").read_text()
    active = False
    for block in re.findall(r"```bash\n(.*?)```", readme, re.DOTALL):
        for line in block.splitlines():
            active = active or line.startswith(
                (". .venv/bin/activate", "source .venv/bin/activate")
            )
            if re.match(r"(?:\S+ && )*partsync ", line) or " && partsync " in line:
                assert active, line
