"""The Dockerfile, checked without building it (no container engine or registry here; docs/
deploy.md): its stages, that the images run `partsync` as a non-root user, that the runtime
stages install only the wheel and extras pyproject declares (no dev or test dependencies), and
that .dockerignore lets in what the build stage copies."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
IMAGE_STAGES = ("runtime", "spark")


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def _stages() -> dict[str, list[tuple[str, str]]]:
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for word, rest in _instructions((ROOT / "Dockerfile").read_text()):
        if word == "FROM":
            m = re.fullmatch(r"(?:--\S+\s+)*(\S+)\s+AS\s+(\S+)", rest, flags=re.IGNORECASE)
            assert m, f"every stage is named: FROM {rest}"
            current = stages.setdefault(m.group(2), [("FROM", m.group(1))])
        elif current is not None:
            current.append((word, rest))
    return stages


STAGES = _stages()


def _chain(stage: str) -> list[tuple[str, str]]:
    """A stage's instructions including those of the stages it is built FROM."""
    base = STAGES[stage][0][1]
    return (_chain(base) if base in STAGES else []) + STAGES[stage]


def _last(stage: str, word: str) -> str:
    values = [rest for w, rest in _chain(stage) if w == word]
    assert values, f"stage {stage} has no {word}"
    return values[-1]


def test_stages_build_the_wheel_apart_and_runtime_is_the_default() -> None:
    assert list(STAGES) == ["build", "base", "spark", "runtime"]  # the last one is the default
    assert any(w == "RUN" and "python -m build --wheel" in r for w, r in STAGES["build"])
    for stage in IMAGE_STAGES:
        assert STAGES[stage][0] == ("FROM", "base")
        copies = [r for w, r in STAGES[stage] if w == "COPY"]
        # Only the wheel comes in: no sources, no tests, no build tools from the context.
        assert copies and all(c.startswith("--from=build ") for c in copies), copies


@pytest.mark.parametrize("stage", IMAGE_STAGES)
def test_the_image_runs_partsync_as_a_non_root_user(stage: str) -> None:
    assert json.loads(_last(stage, "ENTRYPOINT")) == ["partsync"]
    user = _last(stage, "USER").split(":")[0]
    assert user not in ("0", "root"), user
    # USER comes after the last RUN: nothing after it runs as root again.
    words = [w for w, _ in STAGES[stage]]
    assert words.index("USER") > max(i for i, w in enumerate(words) if w == "RUN")


def _pip_installs(stage: str) -> list[list[str]]:
    out = []
    for word, rest in _chain(stage):
        if word != "RUN":
            continue
        for command in re.split(r"&&|;", rest):
            argv = shlex.split(command)
            if argv[:2] == ["pip", "install"] or argv[1:4] == ["-m", "pip", "install"]:
                out.append(argv)
    return out


@pytest.mark.parametrize(("stage", "extras"), [("runtime", set()), ("spark", {"spark"})])
def test_runtime_stages_install_the_wheel_with_declared_runtime_extras_only(
    stage: str, extras: set[str]
) -> None:
    installs = _pip_installs(stage)
    assert len(installs) == 1, installs
    (target,) = [a for a in installs[0][2:] if not a.startswith("-")]
    m = re.fullmatch(r'"?\$1(?:\[([\w,]+)\])?"?', target)
    assert m, f"installs only the wheel built in the build stage: {target}"
    wanted = set(m.group(1).split(",")) if m.group(1) else set()
    assert wanted == extras
    assert wanted <= set(PYPROJECT["project"]["optional-dependencies"])
    assert "-e" not in installs[0] and "--editable" not in installs[0]
    every_run = " ".join(r for w, r in _chain(stage) if w == "RUN")
    for dev_only in ("dev", "brokers", "pytest", "ruff", "mypy", "build"):
        assert not re.search(rf"\b{dev_only}\b", every_run), f"{stage} installs {dev_only}"


def test_the_spark_image_has_a_java_runtime() -> None:
    runs = " ".join(r for w, r in STAGES["spark"] if w == "RUN")
    assert re.search(r"apt-get install .*openjdk-\d+-jre-headless", runs)
    assert "openjdk" not in " ".join(r for w, r in STAGES["runtime"] if w == "RUN")


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    ignored = False
    for p in patterns:
        negated, p = p.startswith("!"), p.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, p) or path.startswith(p + "/"):
            ignored = not negated
    return ignored


def test_dockerignore_lets_in_exactly_what_the_build_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = []
    for word, rest in STAGES["build"]:
        if word == "COPY" and not rest.startswith("--from"):
            sources += rest.split()[:-1]
    # What setuptools reads to build the wheel: the project table, its readme, the packages.
    assert {"pyproject.toml", PYPROJECT["project"]["readme"], "partsync"} <= set(sources)
    for source in sources:
        assert not _ignored(source, patterns), f".dockerignore keeps {source} out"
    for kept_out in (".venv", ".git", "tests", "docs", "partsync/__pycache__"):
        assert _ignored(kept_out, patterns), f".dockerignore lets {kept_out} in"


def test_image_user_and_port_match_the_helm_chart() -> None:
    values = yaml.safe_load((ROOT / "deploy/helm/partsync/values.yaml").read_text())
    uid, gid = _last("runtime", "USER").split(":")
    assert values["podSecurityContext"]["runAsUser"] == int(uid)
    assert values["podSecurityContext"]["runAsGroup"] == int(gid)
    assert _last("runtime", "EXPOSE") == str(values["metrics"]["port"])
