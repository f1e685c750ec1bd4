"""Layering: every module imports on its own, each subpackage imports only from the layers
below it (wire -> plan -> _kafka -> io -> copy -> run -> engines -> ui/demo), the pure layers
stay pure, kafka-python's internals are imported only by the adapter package
(``partsync/_kafka/``), the layers above ``io`` do not import that adapter, and no test code
lives in the runtime package.

Like pip-tools' ``test_circular_imports.py``: each module is imported alone in a process where
no other partsync module is loaded, so an import cycle or a hidden import-order dependency fails
here. Pure modules get a fresh interpreter each (they must not load kafka-python, so nothing may
be preloaded); the others are imported in children forked from one interpreter that has already
loaded the heavy third-party libraries (kafka-python, click, rich) but no partsync module, which
keeps the unit suite fast.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import partsync
from tests.unit.imports_graph import import_statements
from tests.unit.imports_graph import imports_in as _imports_in

PACKAGE_DIR = Path(partsync.__file__).parent

# The layers, bottom-up: a module may import partsync modules of its own layer or below.
LAYERS: dict[str, int] = {
    "partsync": 0,
    "partsync.errors": 0,
    "partsync.config": 0,
    "partsync.retry": 0,
    "partsync.wire": 1,
    "partsync.plan": 2,
    "partsync._kafka": 3,
    "partsync.io": 4,
    "partsync.copy": 5,
    "partsync.run": 6,
    "partsync.engines": 7,
    "partsync.ui": 8,
    "partsync.demo": 8,
    "partsync.__main__": 8,
}


def layer_of(module: str) -> str:
    """The layer a module belongs to: its subpackage, or itself for a top-level module."""
    parts = module.split(".")
    if len(parts) >= 2 and ".".join(parts[:2]) in LAYERS:
        return ".".join(parts[:2])
    return "partsync"


def _all_modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


# Modules that must stay free of I/O libraries: the byte and decision layers and the shared
# foundations they use.
PURE = [
    m
    for m in _all_modules()
    if layer_of(m) in ("partsync.wire", "partsync.plan")
    or m in ("partsync.errors", "partsync.config", "partsync.retry")
]
# Top-level modules a pure layer must not pull in, directly or through another partsync module.
FORBIDDEN = ("socket", "ssl", "selectors", "asyncio", "kafka", "confluent_kafka", "pyspark")
# Third-party libraries a pure layer may use. They are imported before the module under test
# so that what *they* import does not count: crc32c imports importlib.metadata, which imports
# email.utils, which imports socket, without any networking.
PURE_DEPENDENCIES = ("crc32c",)
# Importing these runs a program, not a module.
NOT_IMPORTABLE = {"partsync.__main__"}
# Optional extras: a module needing one that is not installed is skipped, not failed.
OPTIONAL = {"pyspark", "testcontainers"}


def _module_names() -> list[str]:
    return [n for n in _all_modules() if n not in NOT_IMPORTABLE]


MODULES = _module_names()

# Third-party libraries preloaded (when installed) before forking the non-pure modules'
# children: kafka-python or pyspark cost 0.2-0.3 s of CPU each, paid once instead of per module.
PRELOAD = (
    "kafka",
    "click",
    "rich.console",
    "rich.table",
    "rich.progress",
    "crc32c",
    "concurrent.futures",
    "pyspark",
)

_PROBE = """
import json, sys
for dep in {deps!r}:
    __import__(dep)
before = set(sys.modules)
try:
    __import__({module!r})
except ModuleNotFoundError as e:
    print(json.dumps({{"missing": e.name}}))
    raise SystemExit(0)
new = sorted(set(sys.modules) - before)
print(json.dumps({{"new": new, "all": sorted(sys.modules)}}))
"""

_FORKING_PROBE = """
import json, os, sys, traceback
for dep in {preload!r}:
    try:
        __import__(dep)
    except ImportError:
        pass
assert not any(m == "partsync" or m.startswith("partsync.") for m in sys.modules)
results = {{}}
for module in {modules!r}:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            __import__(module)
            out = {{"new": [], "all": []}}
        except ModuleNotFoundError as e:
            out = {{"missing": e.name, "stderr": traceback.format_exc()}}
        except BaseException as e:
            out = {{"error": repr(e), "stderr": traceback.format_exc()}}
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(out))
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    results[module] = json.loads(data) if data else {{"error": f"child exit status {{status}}"}}
print(json.dumps(results))
"""


def _run(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    stdout, stderr = proc.communicate(timeout=60)
    if proc.returncode != 0 or not stdout.strip():
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {proc.returncode}"
        return {"error": last, "stderr": stderr}
    doc: dict[str, object] = json.loads(stdout.strip().splitlines()[-1])
    return doc


@pytest.fixture(scope="session")
def imports() -> dict[str, dict[str, object]]:
    """Import every module alone: pure ones in fresh interpreters, the rest forked."""
    others = [m for m in MODULES if m not in PURE]
    forking = _run(_FORKING_PROBE.format(preload=PRELOAD, modules=others))
    fresh = {m: _run(_PROBE.format(deps=PURE_DEPENDENCIES, module=m)) for m in PURE}
    out: dict[str, dict[str, object]] = {m: _result(p) for m, p in fresh.items()}
    forked = _result(forking)
    for m in others:
        got = forked.get(m, forked)  # the whole probe failed: its error for every module
        assert isinstance(got, dict)
        out[m] = got
    return out


def test_module_list_is_sane() -> None:
    assert "partsync._kafka" in MODULES and "partsync.wire.batch" in MODULES
    assert set(PURE) >= {
        "partsync.wire.batch",
        "partsync.wire.records",
        "partsync.plan.comparator",
        "partsync.plan.selection",
        "partsync.plan.results",
        "partsync.errors",
        "partsync.config",
    }
    # Every subpackage has a layer; a new one must be placed in LAYERS on purpose.
    subpackages = {
        f"partsync.{p.name}" for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").exists()
    }
    assert subpackages <= set(LAYERS), subpackages - set(LAYERS)


@pytest.mark.parametrize("module", _all_modules())
def test_imports_point_down_the_layers(module: str) -> None:
    """A module imports partsync modules of its own layer or a lower one, never a higher one."""
    rel = module.split(".", 1)[1].replace(".", "/") if "." in module else "__init__"
    path = PACKAGE_DIR / f"{rel}.py"
    if not path.exists():
        path = PACKAGE_DIR / rel / "__init__.py"
    mine = LAYERS[layer_of(module)]
    bad = []
    for line, name in _imports_in(path):
        if name.split(".")[0] != "partsync" or name == "partsync":
            continue
        theirs = LAYERS[layer_of(name)]
        if theirs > mine:
            bad.append(f"line {line}: {name} ({layer_of(name)} is above {layer_of(module)})")
    assert bad == []


def test_the_layer_check_can_fail() -> None:
    """The direction check is not vacuous: a copy-layer module importing the runner is upward."""
    assert LAYERS[layer_of("partsync.run.runner")] > LAYERS[layer_of("partsync.copy.partition")]
    assert layer_of("partsync.plan.comparator") == "partsync.plan"
    assert LAYERS[layer_of("partsync.errors")] == 0


# The adapter over kafka-python, and the layers above the one built on it: those reach the
# adapter's types and codes through ``io`` (``io.kafka_types``, ``io.broker_errors``) and its
# requests through ``io``'s modules, never ``_kafka`` itself, so a change in the adapter stops
# at ``io``.
ADAPTER = "partsync._kafka"
ABOVE_IO = sorted(layer for layer, n in LAYERS.items() if n > LAYERS["partsync.io"])
_ADAPTER_BY_NAME = re.compile(r"import_module\(\s*['\"]partsync\._kafka\b")


def _adapter_imports(path: Path, package: str) -> list[str]:
    """Where a source file imports the adapter package or one of its modules: ``import
    partsync._kafka.x``, ``from partsync._kafka import y``, ``from partsync import _kafka``,
    relative forms, wherever the statement is (inside functions too), and by name through
    ``importlib.import_module``."""
    found = []
    for line, module, names in import_statements(path, package):
        targets = [module, *(f"{module}.{n}" for n in names)]
        if any(t == ADAPTER or t.startswith(ADAPTER + ".") for t in targets):
            found.append(f"line {line}: {module}{' import ' + ', '.join(names) if names else ''}")
    text = path.read_text()
    found += [
        f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for m in _ADAPTER_BY_NAME.finditer(text)
    ]
    return found


def test_layers_above_io_do_not_import_the_adapter() -> None:
    """Issue 38: ``io`` is the one layer built on ``_kafka``; copy, run, engines, the CLI and
    the demo import only ``io``."""
    assert ABOVE_IO == [
        "partsync.__main__",
        "partsync.copy",
        "partsync.demo",
        "partsync.engines",
        "partsync.run",
        "partsync.ui",
    ]
    offenders = []
    checked = 0
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if layer_of(module) not in ABOVE_IO:
            continue
        checked += 1
        package = ".".join(parts[:-1])
        offenders += [f"{module}: {hit}" for hit in _adapter_imports(path, package)]
    assert checked > 20, checked  # the walk found the layers' modules
    assert offenders == []


def test_the_adapter_check_can_fail(tmp_path: Path) -> None:
    """The check above is not vacuous: it finds each way of importing the adapter, and only
    those."""
    caught = [
        "from partsync._kafka import Connection",
        "import partsync._kafka",
        "import partsync._kafka.codes as codes",
        "from partsync._kafka.codes import ErrorCode",
        "from partsync import _kafka",
        "from partsync import errors, _kafka",
        "from ..._kafka import broker_error",  # from partsync.copy.sub
        "from ... import _kafka",
        "def f():\n    from partsync._kafka import TxnState\n    return TxnState",
        "import importlib\nk = importlib.import_module('partsync._kafka.codes')",
    ]
    passed = [
        "from partsync.io.kafka_types import Connection",
        "from partsync.io.broker_errors import broker_error",
        "import partsync.io.cluster",
        "from partsync import errors",
        "import confluent_kafka",
        "from partsync._kafkaesque import x",
        "# from partsync._kafka import Connection",
        "x = 'partsync._kafka'",
    ]
    for i, source in enumerate(caught + passed):
        path = tmp_path / f"m{i}.py"
        path.write_text(source + "\n")
        found = _adapter_imports(path, "partsync.copy.sub")
        assert bool(found) == (source in caught), (source, found)
    # A module above io is checked, io itself (built on the adapter) is not.
    assert layer_of("partsync.copy.sender") in ABOVE_IO
    assert layer_of("partsync.run.check") in ABOVE_IO
    assert layer_of("partsync.io.cluster") not in ABOVE_IO


def test_no_test_code_in_the_runtime_package() -> None:
    """pytest helpers, the strict proxy and fault hooks live under tests/, not in the wheel."""
    offenders = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for line, name in _imports_in(path):
            if name.split(".")[0] in ("pytest", "tests", "testcontainers"):
                offenders.append(f"{path.relative_to(PACKAGE_DIR)}:{line}: {name}")
    assert offenders == []
    assert not (PACKAGE_DIR / "testing").exists()


@pytest.mark.parametrize("module", MODULES)
def test_imports_alone(module: str, imports: dict[str, dict[str, object]]) -> None:
    result = imports[module]
    if "missing" in result:
        if result["missing"] in OPTIONAL:
            pytest.skip(f"{module} needs the optional {result['missing']}")
        pytest.fail(f"{module}: No module named {result['missing']!r}")
    assert "error" not in result, f"importing {module} alone failed: {result.get('stderr')}"


def _forbidden(names: object) -> list[str]:
    assert isinstance(names, list)
    return sorted(n for n in names if n.split(".")[0] in FORBIDDEN)


@pytest.mark.parametrize("module", PURE)
def test_pure_module_loads_no_io_library(
    module: str, imports: dict[str, dict[str, object]]
) -> None:
    result = imports[module]
    assert "new" in result, result
    # Nothing network-ish newly loaded by the module itself (or the partsync modules it uses) ...
    assert _forbidden(result["new"]) == []
    # ... and no Kafka client or Spark at all, whoever would have imported it.
    assert [
        n
        for n in _forbidden(result["all"])
        if n.split(".")[0] in ("kafka", "confluent_kafka", "pyspark")
    ] == []


@pytest.mark.parametrize("module", PURE)
def test_pure_module_source_imports(module: str) -> None:
    """Also catches imports inside functions, which importing the module never runs. A pure
    module may use the stdlib (minus networking), its pure dependencies and other pure modules."""
    rel = module.split(".", 1)[1].replace(".", "/")
    path = PACKAGE_DIR / f"{rel}.py"
    if not path.exists():
        path = PACKAGE_DIR / rel / "__init__.py"
    bad = []
    for line, name in _imports_in(path):
        top = name.split(".")[0]
        if top in FORBIDDEN:
            bad.append(f"line {line}: {name}")
        elif top == "partsync" and name not in PURE:
            bad.append(f"line {line}: {name} (not a pure module)")
    assert bad == []


_KAFKA_IMPORT = re.compile(r"^\s*(?:import\s+kafka\b|from\s+kafka\b)", re.MULTILINE)


def test_only_the_adapter_imports_kafka_python() -> None:
    """kafka-python moved its internals between 2.x and 3.x: one package, ``_kafka/``, holds
    every import of it."""
    offenders = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        if rel.startswith("_kafka/"):
            continue
        text = path.read_text()
        names = [n for _, n in _imports_in(path) if n.split(".")[0] == "kafka"]
        if (
            _KAFKA_IMPORT.search(text)
            or names
            or re.search(r"import_module\(\s*['\"]kafka\b", text)
        ):
            offenders.append(rel)
    assert offenders == []
    assert _KAFKA_IMPORT.search((PACKAGE_DIR / "_kafka" / "connection.py").read_text())


def test_the_grep_recognises_kafka_imports() -> None:
    """The pattern above must not be vacuous."""
    for line in (
        "import kafka",
        "import kafka.errors as e",
        "from kafka.protocol import x",
        "    from kafka import y",
    ):
        assert _KAFKA_IMPORT.search(line), line
    for line in (
        "import kafka_utils",
        "from confluent_kafka import Producer",
        "# kafka import",
        "import partsync._kafka",
    ):
        assert not _KAFKA_IMPORT.search(line), line
