#!/usr/bin/env bash
# Run the README's first command, exactly as written, in a scratch copy of the repository: a
# fresh venv with only the `brokers` extra, then `partsync demo` (the test command's venv has
# every extra, so the suite cannot tell if the demo needs one the first command leaves out).
# About a minute with a warm pip cache. Usage: scripts/check_first_command.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/partsync-first.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# The first fenced bash block of the README.
cmd="$(awk '/^```bash$/{inside=1; next} /^```$/{if (inside) exit} inside' "$repo/README.md")"
[ -n "$cmd" ] || { echo "no bash block in README.md"; exit 1; }
echo "README's first command: $cmd"

(cd "$repo" && git ls-files -z) | (cd "$repo" && xargs -0 cp --parents -t "$tmp")
cd "$tmp"
bash -euo pipefail -c "$cmd" >"$tmp/demo.log" 2>&1 || { tail -40 "$tmp/demo.log"; exit 1; }
tail -3 "$tmp/demo.log"
