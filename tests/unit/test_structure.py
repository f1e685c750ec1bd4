"""Structure (issue 38): the formatter owns the layout, partsync's modules import each other
without cycles, modules and classes stay small enough to read, and tests script a broker's
answers through one double.

Each rule has an explicit allowlist of today's exceptions that may only shrink: an exception
that is gone (a cycle removed, a module split below the limit) fails here until it is taken off
its list too, so the list records what is left to do and nothing comes back unnoticed.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Collection, Mapping
from pathlib import Path

import partsync
from tests.unit.imports_graph import cycles, import_graph

PACKAGE_DIR = Path(partsync.__file__).parent
REPO = PACKAGE_DIR.parent
CHECKED_DIRS = ("partsync", "tests", "scripts")

# -- the formatter owns the layout ------------------------------------------------------------

# ruff's (and black's) markers that take lines away from the formatter: "fmt" then "skip" or
# "off" in a comment, with or without spaces.
_FMT_MARKER = re.compile(r"#\s*fmt:\s*(?:skip|off)\b")


def _python_files() -> list[Path]:
    return sorted(p for d in CHECKED_DIRS for p in (REPO / d).rglob("*.py"))


def test_no_formatter_markers() -> None:
    """``ruff format`` lays out every line: nothing takes lines away from it."""
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in _python_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _FMT_MARKER.search(line)
    ]
    assert found == [], "remove these formatter markers and let ruff format the lines"


def test_the_formatter_marker_pattern_can_fail() -> None:
    # "<" stands for the comment sign, or the check above would find these lines here.
    marked = ["x = 1  < fmt: skip", "< fmt: off", "y = (1,)  <fmt:skip", "    < fmt:  off"]
    for line in (m.replace("<", "#") for m in marked):
        assert _FMT_MARKER.search(line), line
    for line in ("# fmt: on", "# format: skip", "fmt = 'skip'", "# fmt: skipped-ish"):
        assert not _FMT_MARKER.search(line), line


# -- no import cycles -------------------------------------------------------------------------

# Import cycles of today, each the set of modules in it (counting imports inside functions and
# under TYPE_CHECKING). The list only shrinks: a cycle that no longer exists fails the test
# until it is removed here, and any cycle not listed fails it.
KNOWN_CYCLES: list[frozenset[str]] = []


def _cycle_problems(found: list[frozenset[str]], known: list[frozenset[str]]) -> list[str]:
    problems = [
        f"import cycle {sorted(c)}: move what both need into a lower module, or pass a "
        "callable or a Protocol instead of importing back"
        for c in found
        if c not in known
    ]
    problems += [
        f"listed cycle {sorted(c)} no longer exists: take it off KNOWN_CYCLES"
        + (" (a smaller cycle may be left: list that one instead)" if found else "")
        for c in known
        if c not in found
    ]
    return problems


def test_no_import_cycles() -> None:
    assert _cycle_problems(cycles(import_graph(PACKAGE_DIR)), KNOWN_CYCLES) == []


def test_the_cycle_finder_finds_a_cycle_in_a_synthetic_graph() -> None:
    graph = {
        "a": {"b"},
        "b": {"c", "d"},
        "c": {"a"},  # a -> b -> c -> a
        "d": {"e"},
        "e": {"d"},  # d <-> e
        "f": {"a", "g"},  # into a cycle, not part of one
        "g": set(),
    }
    assert cycles(graph) == [frozenset("abc"), frozenset("de")]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"a"}}) == []  # a module naming itself is no cycle between modules


def test_the_cycle_check_fails_on_a_new_or_a_stale_cycle() -> None:
    ab, cd = frozenset({"a", "b"}), frozenset({"c", "d"})
    assert _cycle_problems([ab], [ab]) == []
    assert len(_cycle_problems([ab, cd], [ab])) == 1  # cd is new
    assert len(_cycle_problems([], [ab])) == 1  # ab is gone: shrink the list


def test_the_import_graph_counts_hidden_imports(tmp_path: Path) -> None:
    """Imports inside functions and under TYPE_CHECKING are edges, and ``from pkg import mod``
    is an import of the module ``pkg.mod``."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "sub/__init__.py": "",
        "sub/low.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from pkg.high import High
        """,
        "high.py": """
            def make():
                from pkg.sub import low
                return low
        """,
        "other.py": "import pkg.sub.low\nfrom pkg.sub.low import thing\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    graph = import_graph(pkg)
    assert graph["pkg.high"] == {"pkg.sub.low"}
    assert graph["pkg.sub.low"] == {"pkg.high"}
    assert graph["pkg.other"] == {"pkg.sub.low"}
    assert cycles(graph) == [frozenset({"pkg.high", "pkg.sub.low"})]


# -- modules and classes of a readable size ---------------------------------------------------

MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 200

# Today's modules over MAX_MODULE_LINES. The list only shrinks: a module split below the limit
# fails the test until it is taken off here.
OVERSIZED_MODULES: set[str] = set()

# Today's classes over MAX_CLASS_LINES, as "module path::class"; the same rule.
OVERSIZED_CLASSES: set[str] = set()


def _class_sizes(path: Path, rel: str) -> dict[str, int]:
    """Lines of every class in a module (nested ones by their dotted path), from the ``class``
    line to the last line of its body."""
    sizes: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                sizes[f"{rel}::{name}"] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, f"{prefix}{child.name}.<locals>.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return sizes


def _size_problems(
    sizes: Mapping[str, int], limit: int, allowed: Collection[str], what: str, listing: str
) -> list[str]:
    problems = [
        f"{name} has {n} lines, over the {limit} a {what} may have: split it"
        for name, n in sorted(sizes.items())
        if n > limit and name not in allowed
    ]
    problems += [
        f"{name} is within {limit} lines now (or gone): take it off {listing}"
        for name in sorted(allowed)
        if sizes.get(name, 0) <= limit
    ]
    return problems


def test_modules_are_at_most_500_lines() -> None:
    sizes = {
        path.relative_to(REPO).as_posix(): len(path.read_text().splitlines())
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
    }
    problems = _size_problems(
        sizes, MAX_MODULE_LINES, OVERSIZED_MODULES, "module", "OVERSIZED_MODULES"
    )
    assert problems == []


def test_classes_are_at_most_200_lines() -> None:
    sizes: dict[str, int] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        sizes.update(_class_sizes(path, path.relative_to(REPO).as_posix()))
    problems = _size_problems(
        sizes, MAX_CLASS_LINES, OVERSIZED_CLASSES, "class", "OVERSIZED_CLASSES"
    )
    assert problems == []


def test_the_size_checks_can_fail() -> None:
    assert _size_problems({"a.py": 501, "b.py": 10}, 500, {"a.py"}, "module", "L") == []
    assert len(_size_problems({"a.py": 501}, 500, set(), "module", "L")) == 1  # new offender
    assert len(_size_problems({"a.py": 500}, 500, {"a.py"}, "module", "L")) == 1  # shrunk
    assert len(_size_problems({}, 500, {"a.py"}, "module", "L")) == 1  # removed or renamed


def test_class_sizes_are_measured_from_the_source(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "class A:\n    class B:\n        x = 1\n        y = 2\n\n\ndef f():\n    class C:\n"
        "        pass\n"
    )
    assert _class_sizes(path, "m.py") == {"m.py::A": 4, "m.py::A.B": 3, "m.py::f.<locals>.C": 2}


# -- one scripted broker double ---------------------------------------------------------------

# Tests that need a broker's answers without a broker share one stand-in for a broker
# connection; a second hand-rolled one would drift from it and from Kafka.
BROKER_DOUBLE = "tests/support/scripted_broker.py::ScriptedBroker"

# Class names of a broker or connection double: "Broker", "_Conn", "FakeBroker",
# "StubConnection", "ScriptedBrokerConn"; not "KafkaJvmBroker" (a real broker) or "BrokerInfo".
_BROKER_DOUBLE_NAME = re.compile(
    r"_?(?:(?:Scripted|Fake|Stub|Mock|Dummy)\w*)?(?:Broker|Conn|Connection)"
)


def _broker_doubles(root: Path) -> list[str]:
    """Every class under ``root`` named like a broker double, nested ones included, as
    "path::name" relative to ``root``'s parent."""
    return [
        f"{path.relative_to(root.parent).as_posix()}::{node.name}"
        for path in sorted(root.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, ast.ClassDef) and _BROKER_DOUBLE_NAME.fullmatch(node.name)
    ]


def test_one_scripted_broker_double() -> None:
    """Unit tests script a broker through ``ScriptedBroker``: extend it rather than write another."""
    assert _broker_doubles(REPO / "tests") == [BROKER_DOUBLE]


def test_the_broker_double_check_can_fail(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "unit").mkdir(parents=True)
    (tests / "support.py").write_text("class ScriptedBroker:\n    pass\n")
    (tests / "unit" / "test_a.py").write_text(
        "class KafkaJvmBroker:\n    pass\n\n\nclass BrokerInfo:\n    pass\n\n\n"
        "def test_x():\n    class _FakeConnection:\n        pass\n"
    )
    (tests / "unit" / "test_b.py").write_text("class Broker:\n    pass\n")
    assert _broker_doubles(tests) == [
        "tests/support.py::ScriptedBroker",
        "tests/unit/test_a.py::_FakeConnection",
        "tests/unit/test_b.py::Broker",
    ]


# -- every retry through partsync.retry ---------------------------------------------------------

# A loop that waits on a Backoff of its own repeats what retry_until and retry_on do (and can
# drift from them: a deadline, a cancel event, what is raised at the end). Today's loops that
# do not fit them, as "module path::function", each with a comment saying why; the list only
# shrinks.
OWN_BACKOFF_LOOPS = {
    "partsync/io/group.py::GroupMember._run",  # a supervisor, not a retry
}


def _is_backoff_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Backoff"
    )


def _own_backoff_loops(source: str, rel: str) -> list[str]:
    """Each function of a module with a ``while`` or ``for`` loop that calls ``<x>.wait()``
    where ``<x>`` was assigned a ``Backoff(...)`` or is a parameter annotated ``Backoff``."""
    tree = ast.parse(source)
    backoffs = {
        ast.unparse(target)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and node.value is not None
        and any(_is_backoff_call(n) for n in ast.walk(node.value))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
    }
    backoffs |= {
        node.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.arg) and node.annotation is not None
        if "Backoff" in ast.unparse(node.annotation)
    }

    def waits(loop: ast.AST) -> bool:
        return any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "wait"
            and ast.unparse(n.func.value) in backoffs
            for n in ast.walk(loop)
        )

    found: set[str] = set()

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, f"{where}.{child.name}" if where else child.name)
            elif isinstance(child, ast.While | ast.For | ast.AsyncFor) and waits(child):
                found.add(f"{rel}::{where or '<module>'}")
            else:
                visit(child, where)

    visit(tree, "")
    return sorted(found)


def test_retries_go_through_the_retry_helpers() -> None:
    """No module but partsync/retry.py waits on a Backoff in a loop of its own (issue 38)."""
    found = {
        loop
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if path != PACKAGE_DIR / "retry.py"
        for loop in _own_backoff_loops(path.read_text(), path.relative_to(REPO).as_posix())
    }
    assert sorted(found - OWN_BACKOFF_LOOPS) == [], "use retry_until or retry_on"
    assert sorted(OWN_BACKOFF_LOOPS - found) == [], "gone: take it off OWN_BACKOFF_LOOPS"


def test_the_own_backoff_loop_check_can_fail() -> None:
    source = textwrap.dedent(
        """
        def patiently(call):
            backoff = Backoff(0.1, 1.0, deadline=5)
            while True:
                try:
                    return call()
                except OSError:
                    if not backoff.wait():
                        raise

        class Reader:
            def lazily(self):
                backoff: Backoff | None = None
                for _ in range(3):
                    backoff = backoff or Backoff(0.1, 1.0)
                    backoff.wait()

            def given(self, backoff: Backoff):
                while not backoff.wait():
                    pass

        def fine(event, call):
            backoff = Backoff(0.1, 1.0)
            backoff.wait()  # once, not in a loop
            while not event.wait(1.0):  # an event, not a Backoff
                call()
            return retry_until(call, backoff)
        """
    )
    assert _own_backoff_loops(source, "m.py") == [
        "m.py::Reader.given",
        "m.py::Reader.lazily",
        "m.py::patiently",
    ]
