"""Which ACLs a mirror gets, and which partsync may remove (``--sync-acls``), and who else could
write a read-only mirror (``--read-only``): pure decisions over plain ACLs.

Kafka's authorizer rules honoured here:

* an ACL applies to a resource through its pattern: LITERAL names it exactly (``*`` is the
  wildcard: every resource of its type), PREFIXED names every resource starting with it;
* a matching DENY beats every ALLOW, and ``User:*`` matches every principal, partsync's too:
  so a read-only mirror cannot be made with a DENY. It is made by granting WRITE to nobody
  but partsync (``withheld``), on a cluster whose authorizer denies what no ACL allows
  (``allow.everyone.if.no.acl.found=false``);
* ALL on a topic includes WRITE, DELETE (DeleteRecords, deleting the topic), ALTER
  (CreatePartitions) and ALTER_CONFIGS (e.g. turning compaction or LogAppendTime on): each
  would change a mirror under partsync.

partsync removes only the ACLs it created itself, as its record says (``AclChanges``): an ACL
of the same shape that an operator created is never guessed to be partsync's.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

__all__ = [
    "ALL",
    "ALLOW",
    "DEFAULT_RECORD_TOPIC",
    "DENY",
    "GROUP",
    "LITERAL",
    "PREFIXED",
    "READ",
    "TOPIC",
    "WRITE",
    "Acl",
    "AclChanges",
    "AclOptions",
    "AclPolicy",
    "Skipped",
    "acl_changes",
    "in_scope",
    "mirror_acls",
    "other_writers",
]

# The compacted topic on the local cluster that records the ACLs partsync created.
DEFAULT_RECORD_TOPIC = "partsync.acls"

# Kafka's codes (org.apache.kafka.common.acl / resource).
TOPIC, GROUP = 2, 3
LITERAL, PREFIXED = 3, 4
DENY, ALLOW = 2, 3
ALL, READ, WRITE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS = (
    2,
    3,
    4,
    6,
    7,
    8,
    10,
    11,
)

_RESOURCES = {TOPIC: "TOPIC", GROUP: "GROUP"}
_PATTERNS = {LITERAL: "LITERAL", PREFIXED: "PREFIXED"}
_PERMISSIONS = {DENY: "DENY", ALLOW: "ALLOW"}
_OPERATIONS = {
    2: "ALL",
    3: "READ",
    4: "WRITE",
    5: "CREATE",
    6: "DELETE",
    7: "ALTER",
    8: "DESCRIBE",
    9: "CLUSTER_ACTION",
    10: "DESCRIBE_CONFIGS",
    11: "ALTER_CONFIGS",
    12: "IDEMPOTENT_WRITE",
}
# What ALL on a mirror topic still grants under --read-only: reading it, as consumers do.
_READ_OPS = (READ, DESCRIBE, DESCRIBE_CONFIGS)
# Operations that change a topic's log: whoever holds one could write a mirror.
_WRITING = frozenset({ALL, WRITE, DELETE, ALTER, ALTER_CONFIGS})


def _name(table: Mapping[int, str], code: int) -> str:
    return table.get(code, str(code))


@dataclass(frozen=True, order=True)
class Acl:
    """One ACL binding, in Kafka's codes."""

    resource_type: int
    name: str
    pattern: int
    principal: str
    host: str
    operation: int
    permission: int

    def describe(self) -> str:
        """The ACL in one line, for messages: ``TOPIC:LITERAL:orders User:app@* READ ALLOW``."""
        return (
            f"{_name(_RESOURCES, self.resource_type)}:{_name(_PATTERNS, self.pattern)}:"
            f"{self.name} {self.principal}@{self.host} {_name(_OPERATIONS, self.operation)} "
            f"{_name(_PERMISSIONS, self.permission)}"
        )

    def record_key(self) -> str:
        """The record's key: JSON, since group names and principals (a certificate's DN) may
        hold spaces and any punctuation."""
        return json.dumps(
            [
                self.resource_type,
                self.name,
                self.pattern,
                self.principal,
                self.host,
                self.operation,
                self.permission,
            ],
            separators=(",", ":"),
        )

    @classmethod
    def from_record_key(cls, key: str) -> Acl:
        """Raises ValueError for a key that is not one ``record_key`` writes."""
        try:
            rt, name, pattern, principal, host, op, perm = json.loads(key)
            fields = (int(rt), str(name), int(pattern), str(principal), str(host))
            return cls(*fields, int(op), int(perm))
        except (TypeError, ValueError) as e:
            raise ValueError(f"not an ACL record key: {key!r}") from e

    def applies_to(self, resource_type: int, name: str) -> bool:
        """Whether the authorizer applies this ACL to the resource ``name``."""
        if resource_type != self.resource_type:
            return False
        if self.pattern == PREFIXED:
            return name.startswith(self.name)
        return self.pattern == LITERAL and self.name in (name, "*")


@dataclass(frozen=True)
class AclPolicy:
    """``[acls]`` in the config file: whose ACLs follow (``principals``: globs, all when empty;
    ``exclude``: globs) and as whom on the local cluster (``mapping``: source principal ->
    local principal)."""

    principals: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    mapping: tuple[tuple[str, str], ...] = ()

    def selects(self, principal: str) -> bool:
        if self.principals and not any(fnmatch.fnmatchcase(principal, g) for g in self.principals):
            return False
        return not any(fnmatch.fnmatchcase(principal, g) for g in self.exclude)

    def mapped(self, principal: str) -> str:
        return dict(self.mapping).get(principal, principal)


@dataclass(frozen=True)
class AclOptions:
    """``--sync-acls``, ``--read-only`` and the config file's ``[acls]``: the ACLs on the job's
    topics and ``groups`` (--sync-groups) follow the sources' (``policy`` filters and maps
    principals), recorded in ``record_topic``; under ``read_only`` nobody but ``principal``
    (partsync's on the local cluster; from its login when not given) may change a mirror."""

    sync: bool = False
    read_only: bool = False
    policy: AclPolicy = AclPolicy()
    record_topic: str = DEFAULT_RECORD_TOPIC
    principal: str | None = None
    groups: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.sync or self.read_only


@dataclass(frozen=True)
class Skipped:
    """A source ACL that is not copied, and why; ``withheld``: the local ACL it would be, kept
    back by --read-only until a failover grants it."""

    acl: Acl
    why: str
    withheld: Acl | None = None


def in_scope(acl: Acl, topics: Iterable[str], groups: Iterable[str]) -> bool:
    """Whether ``acl`` applies to one of the job's topics or groups."""
    names = topics if acl.resource_type == TOPIC else groups if acl.resource_type == GROUP else ()
    return any(acl.applies_to(acl.resource_type, n) for n in names)


def mirror_acls(
    source: Iterable[Acl],
    topics: Iterable[str],
    groups: Iterable[str],
    policy: AclPolicy,
    *,
    read_only: bool,
) -> tuple[frozenset[Acl], tuple[Skipped, ...]]:
    """The local ACLs the source's ACLs on ``topics`` and ``groups`` call for (principals
    mapped), and the source ACLs left out, with why. Under ``read_only`` no grant that would
    let anyone but partsync change a mirror topic is copied (withheld until failover); a grant
    of ALL becomes the reads it includes."""
    topics, groups = tuple(topics), tuple(groups)
    wanted: set[Acl] = set()
    skipped: list[Skipped] = []
    for acl in sorted(set(source)):
        if not in_scope(acl, topics, groups):
            continue
        if acl.pattern == LITERAL and acl.name == "*":
            why = "a wildcard resource: it would apply to every local topic, not only mirrors"
            skipped.append(Skipped(acl, why))
            continue
        if acl.permission == DENY and acl.principal == "User:*":
            why = "a DENY for every principal (User:*) would deny partsync's own access too"
            skipped.append(Skipped(acl, why))
            continue
        if not policy.selects(acl.principal):
            skipped.append(Skipped(acl, "principal not selected by [acls] principals/exclude"))
            continue
        local = replace(acl, principal=policy.mapped(acl.principal))
        writes = acl.operation in _WRITING and acl.permission == ALLOW
        if read_only and acl.resource_type == TOPIC and writes:
            skipped.append(Skipped(acl, "withheld: --read-only (granted at failover)", local))
            if acl.operation == ALL:
                wanted.update(replace(local, operation=op) for op in _READ_OPS)
            continue
        wanted.add(local)
    return frozenset(wanted), tuple(skipped)


@dataclass(frozen=True)
class AclChanges:
    """What makes the local ACLs what the source calls for: ``create`` (and record first),
    ``delete`` (partsync's own, no longer called for; then forget), ``forget`` (recorded but
    already gone), ``foreign`` (called for and present, but not partsync's: left alone);
    ``withhold`` (--read-only: record as withheld, for a failover to grant) and ``release``
    (withheld records no longer called for: forget)."""

    create: frozenset[Acl] = frozenset()
    delete: frozenset[Acl] = frozenset()
    forget: frozenset[Acl] = frozenset()
    foreign: frozenset[Acl] = frozenset()
    withhold: frozenset[Acl] = frozenset()
    release: frozenset[Acl] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.create or self.delete or self.forget or self.withhold or self.release)


def acl_changes(
    wanted: frozenset[Acl],
    local: frozenset[Acl],
    recorded: frozenset[Acl],
    topics: Iterable[str],
    groups: Iterable[str],
    withheld: frozenset[Acl] = frozenset(),
    recorded_withheld: frozenset[Acl] = frozenset(),
) -> AclChanges:
    """The changes, given the local ACLs on the job's resources, and the record of those
    partsync created (and withheld). Only recorded ACLs on the job's ``topics`` and ``groups``
    may go: another job's are not this job's to judge. A withheld ACL that is present locally
    already (an operator's) needs no record."""
    topics, groups = tuple(topics), tuple(groups)
    stale = frozenset(a for a in recorded - wanted if in_scope(a, topics, groups))
    create = wanted - local
    delete = stale & local
    return AclChanges(
        create=create,
        delete=delete,
        forget=stale - local,
        foreign=(wanted & local) - recorded,
        # Against the local ACLs as this pass leaves them: a grant partsync created before
        # --read-only, deleted now, is recorded as withheld in the same pass.
        withhold=withheld - (local - delete) - recorded_withheld,
        release=frozenset(
            a for a in recorded_withheld - withheld - create if in_scope(a, topics, groups)
        ),
    )


def other_writers(local: Iterable[Acl], topic: str, own: str) -> tuple[Acl, ...]:
    """The ALLOW ACLs on ``topic`` that let a principal other than ``own`` (partsync's) change
    it: what keeps a mirror from being read-only. ``User:*`` counts: it matches everyone."""
    return tuple(
        a
        for a in sorted(set(local))
        if a.permission == ALLOW
        and a.operation in _WRITING
        and a.principal != own
        and a.applies_to(TOPIC, topic)
    )
