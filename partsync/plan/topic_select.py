"""Which topics a run copies: the ones named, plus the sources' topics that match a pattern,
less the ones an exclusion matches (``select_topics``). Pure: the caller lists the sources'
topics."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from partsync.errors import TopicError, UsageError

__all__ = [
    "PARTSYNC_RECORDS",
    "TopicSelection",
    "appeared",
    "compile_patterns",
    "lost_by",
    "select_topics",
]

# partsync's own record topics (the ACLs it created, promotions, the sources' ends): a cluster's
# state, never mirrored by a pattern (a source that was promoted, or that partsync mirrors
# into, has its own; mirroring them would overwrite the local cluster's).
PARTSYNC_RECORDS = frozenset({"partsync.acls", "partsync.promotions", "partsync.source-ends"})


@dataclass(frozen=True)
class TopicSelection:
    """``--topic`` names, ``--topic-pattern`` and ``--exclude`` regular expressions (each must
    match a whole topic name, as Kafka's own tools' include lists do)."""

    named: tuple[str, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = ()
    excludes: tuple[re.Pattern[str], ...] = ()

    @property
    def by_pattern(self) -> bool:
        return bool(self.patterns)

    def describe(self) -> str:
        """The selection as given (a job's identity: the same whatever topics it resolves to)."""
        parts = [*self.named, *(f"/{p.pattern}/" for p in self.patterns)]
        parts += [f"-/{p.pattern}/" for p in self.excludes]
        return ",".join(parts)


def select_topics(
    selection: TopicSelection,
    on_sources: Mapping[str, Sequence[str]],
    own: AbstractSet[str] = PARTSYNC_RECORDS,
) -> list[str]:
    """The topics to copy, in order: the named ones as given, then the pattern matches on any
    source (sorted); internal topics (``__`` prefix) and partsync's ``own`` record topics only
    when named. Raises ``TopicError`` when nothing is left."""
    named = list(dict.fromkeys(selection.named))
    matched = sorted(
        {
            t
            for topics in on_sources.values()
            for t in topics
            if not t.startswith("__")
            and t not in own
            and t not in named
            and any(p.fullmatch(t) for p in selection.patterns)
        }
    )
    chosen = [t for t in (*named, *matched) if not any(x.fullmatch(t) for x in selection.excludes)]
    if not chosen:
        excludes = ", ".join(repr(p.pattern) for p in selection.excludes)
        after = f" once --exclude {excludes} is applied" if excludes else ""
        if not selection.by_pattern:
            raise TopicError(f"every --topic is excluded by --exclude {excludes}")
        patterns = ", ".join(repr(p.pattern) for p in selection.patterns)
        raise TopicError(
            f"no topic on {', '.join(on_sources) or 'the sources'} matches "
            f"--topic-pattern {patterns}{after}"
        )
    return chosen


def compile_patterns(values: Sequence[str], option: str) -> tuple[re.Pattern[str], ...]:
    """Each value as a regular expression, or a ``UsageError`` naming the option and value."""
    out = []
    for v in values:
        try:
            out.append(re.compile(v))
        except re.error as e:
            raise UsageError(f"{option} {v!r} is not a regular expression: {e}") from None
    return tuple(out)


def appeared(
    selection: TopicSelection,
    on_sources: Mapping[str, Sequence[str]],
    known: AbstractSet[str],
    own: AbstractSet[str] = PARTSYNC_RECORDS,
) -> list[str]:
    """A follower's topic check: the topics that match ``selection`` on the sources now and are
    not ``known`` to the job yet (in ``select_topics``' order; none while nothing matches)."""
    if not selection.by_pattern or not on_sources:
        return []
    try:
        chosen = select_topics(selection, on_sources, own)
    except TopicError:
        return []
    return [t for t in chosen if t not in known]


def lost_by(
    holders: AbstractSet[str], have: AbstractSet[str], answered: AbstractSet[str]
) -> tuple[tuple[str, ...], bool]:
    """Which sources lost a followed topic: of the sources seen ``holders`` of it, those that
    ``answered`` this check without it (``have``: those that answered with it). And whether it
    is gone everywhere: no source has it and every holder answered (one that did not may still
    have it)."""
    lost = tuple(sorted((holders & answered) - have))
    return lost, bool(lost) and not have and holders <= answered
