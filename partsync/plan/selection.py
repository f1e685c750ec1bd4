"""Partition selection specs like ``0,3-5``. Pure."""

from __future__ import annotations

from partsync.errors import UsageError

__all__ = ["parse_partitions", "select"]


def parse_partitions(spec: str | None) -> frozenset[int] | None:
    """``None`` (flag not given) means all partitions; otherwise a set of partition numbers.

    An explicitly empty spec is an error, not "all": an unset shell variable must not silently
    widen a run to every partition.
    """
    if spec is None:
        return None
    if not spec.strip():
        raise UsageError(
            "empty partition spec: give partitions like 0,3-5, or leave out --partitions"
        )
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo_s, sep, hi_s = part.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if sep else lo
        except ValueError:
            raise UsageError(f"bad partition spec {spec!r}: {part!r} is not N or N-M") from None
        if lo < 0 or hi < lo:
            raise UsageError(f"bad partition spec {spec!r}: {part!r} is not an ascending range")
        out.update(range(lo, hi + 1))
    if not out:
        raise UsageError(f"bad partition spec {spec!r}: no partitions")
    return frozenset(out)


def select(count: int, wanted: frozenset[int] | None, *, topic: str) -> list[int]:
    """The selected partitions of a topic with ``count`` partitions, refusing unknown ones."""
    if wanted is None:
        return list(range(count))
    missing = sorted(p for p in wanted if p >= count)
    if missing:
        raise UsageError(
            f"topic {topic} has {count} partitions; selected partition(s) "
            f"{', '.join(map(str, missing))} do not exist"
        )
    return sorted(wanted)
