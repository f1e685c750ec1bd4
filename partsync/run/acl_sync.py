"""The mirrors' ACLs following the sources' (``--sync-acls``) and the read-only mirror
(``--read-only``): read both clusters' ACLs and partsync's record, apply what
``plan.acls`` decides, and say who else could write a mirror. Used once per run when plans are
applied (``run.topic_changes``), by a follower at every topic check (``run.topic_watch``), by
``plan`` to show what would change, and by ``check``.

What a read-only mirror cannot keep out, and says so in the docs: super users (``super.users``
bypass every ACL) and any principal on a cluster without an authorizer.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from partsync.config import ClusterRef, read_secret_file
from partsync.errors import PartsyncError, UsageError
from partsync.io.acls import (
    AclRecord,
    cluster_acls,
    create_acls,
    delete_acls,
    local_authorizer,
)
from partsync.io.pool import ClusterPool
from partsync.plan.acls import (
    TOPIC,
    Acl,
    AclChanges,
    AclOptions,
    Skipped,
    acl_changes,
    in_scope,
    mirror_acls,
    other_writers,
)
from partsync.plan.preflight import jwt_subject
from partsync.run.topic_plan import TopicPlan

__all__ = [
    "AclReport",
    "follow_acls",
    "principal_of",
    "sync_acls",
    "with_acls",
]

log = logging.getLogger(__name__)


def principal_of(ref: ClusterRef) -> str | None:
    """The principal Kafka's default rules give this client: ``User:<name>`` under SASL (an
    OAUTHBEARER token's ``sub``), ``User:ANONYMOUS`` over PLAINTEXT; unknown over TLS (the
    certificate's mapped name)."""
    sec = ref.security
    if sec.sasl_mechanism == "OAUTHBEARER":
        token = sec.sasl_oauthbearer_token
        if sec.sasl_oauthbearer_token_file:
            try:
                token = read_secret_file(sec.sasl_oauthbearer_token_file, "token")
            except PartsyncError:
                return None
        sub = jwt_subject(token or "")
        return f"User:{sub}" if sub else None
    if sec.uses_sasl:
        return f"User:{sec.sasl_plain_username}"
    if not sec.uses_ssl or not sec.ssl_certfile:  # TLS without a client certificate too
        return "User:ANONYMOUS"
    return None


@dataclass
class AclReport:
    """What one ACL pass found and did."""

    source: str | None = None
    changes: AclChanges = AclChanges()
    skipped: tuple[Skipped, ...] = ()
    # Topic -> the local ACLs that let someone else change it (--read-only).
    writable: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # What --read-only could not verify.
    doubts: list[str] = field(default_factory=list)

    def lines(self, applied: bool) -> list[str]:
        """One line per change, skip and writable mirror, for logs and a topic's warnings."""
        return self.change_lines(applied) + self.notice_lines()

    def change_lines(self, applied: bool) -> list[str]:
        did = ("created", "deleted") if applied else ("would create", "would delete")
        src = self.source
        return [
            f"{did[0]} ACL {a.describe()}, as {src} has it" for a in sorted(self.changes.create)
        ] + [
            f"{did[1]} ACL {a.describe()} (partsync created it; {src} no longer has it)"
            for a in sorted(self.changes.delete)
        ]

    def notice_lines(self) -> list[str]:
        """What stays as it is, and says so at every pass: skipped ACLs, writable mirrors."""
        out = [f"ACL {s.acl.describe()} of {self.source} not copied: {s.why}" for s in self.skipped]
        out += self.doubts
        for topic, acls in sorted(self.writable.items()):
            out.append(
                f"--read-only: mirror topic {topic} is writable by others: {'; '.join(acls)} "
                "(remove those grants: partsync removes only ACLs it created)"
            )
        return out


def own_principal(opts: AclOptions, local: ClusterRef) -> str:
    principal = opts.principal or principal_of(local)
    if principal is None:
        raise UsageError(
            f"--read-only: partsync's principal on cluster {local.name} is not known from its "
            "login (a TLS certificate's mapped name): set [acls] principal in the config file"
        )
    return principal


def sync_acls(
    opts: AclOptions,
    sources: Sequence[ClusterRef],
    local_ref: ClusterRef,
    pool: ClusterPool,
    topics: Sequence[str],
    *,
    apply: bool = True,
) -> AclReport:
    """One pass over the job's ``topics`` (and ``opts.groups``): with ``opts.sync`` the local
    ACLs made what the first answering source's call for (created ones recorded first, only
    recorded ones removed; ``apply`` False only reads), and with ``opts.read_only`` the mirror
    topics others could write. Raises the clusters' errors."""
    report = AclReport()
    local = pool.get(local_ref)
    if opts.read_only:
        why, doubt = local_authorizer(local)
        if why is not None:
            raise UsageError(f"--read-only: {why}")
        if doubt is not None:
            report.doubts.append(f"--read-only: {doubt}")
    have = cluster_acls(local)
    if opts.sync:
        src, last = None, None
        for ref in sources:
            try:
                src = cluster_acls(pool.get(ref))
                report.source = ref.name
                break
            except PartsyncError as e:
                last = e
                log.debug("ACLs of %s: %s", ref.name, e)
        if src is None:
            raise last or UsageError("no source to read ACLs from")
        wanted, report.skipped = mirror_acls(
            src, topics, opts.groups, opts.policy, read_only=opts.read_only
        )
        record = AclRecord(local, opts.record_topic)
        scoped = frozenset(a for a in have if in_scope(a, topics, opts.groups))
        withheld = frozenset(s.withheld for s in report.skipped if s.withheld is not None)
        created, kept_back = record.read()
        report.changes = acl_changes(
            wanted, scoped, created, topics, opts.groups, withheld, kept_back
        )
        if apply:
            ch = report.changes
            record.add(ch.create, report.source or "")  # first: a crash leaves it recorded
            create_acls(local, ch.create)
            delete_acls(local, ch.delete)
            record.drop(ch.delete | ch.forget | ch.release)
            record.add(ch.withhold, report.source or "", withheld=True)
            have = (have | ch.create) - ch.delete
    if opts.read_only:
        own = own_principal(opts, local_ref)
        for t in topics:
            if writers := other_writers(have, t, own):
                report.writable[t] = tuple(a.describe() for a in writers)
    return report


def follow_acls(
    opts: AclOptions,
    sources: Sequence[ClusterRef],
    local: ClusterRef,
    pool: ClusterPool,
    topics: Sequence[str],
    *,
    notice: Callable[[str], None],
) -> None:
    """A follower's topic check: one ACL pass over the followed topics, each change logged,
    and what stays as it is (and errors) passed to ``notice`` (which says each once)."""
    try:
        report = sync_acls(opts, sources, local, pool, topics)
    except PartsyncError as e:
        notice(f"ACLs not synced: {e}")
        return
    for line in report.change_lines(applied=True):
        log.warning("%s", line)
    for line in report.notice_lines():
        notice(line)


def _topic_lines(report: AclReport, topic: str, first: bool, applied: bool) -> list[str]:
    """The report's lines about ``topic`` (group ACLs go with the first topic)."""
    sub = AclReport(
        report.source,
        AclChanges(
            create=frozenset(a for a in report.changes.create if _about(a, topic, first)),
            delete=frozenset(a for a in report.changes.delete if _about(a, topic, first)),
        ),
        tuple(s for s in report.skipped if _about(s.acl, topic, first)),
        {t: w for t, w in report.writable.items() if t == topic},
        report.doubts if first else [],
    )
    return sub.lines(applied)


def _about(acl: Acl, topic: str, first: bool) -> bool:
    return acl.applies_to(TOPIC, topic) or (first and acl.resource_type != TOPIC)


def with_acls(
    opts: AclOptions,
    sources: Sequence[ClusterRef],
    local: ClusterRef,
    pool: ClusterPool,
    plans: list[TopicPlan],
    *,
    apply: bool = True,
) -> list[TopicPlan]:
    """A run's ACL pass over its plans' existing local topics: each plan with the lines about
    its topic among its warnings (``plan``: what would change, ``apply`` False). A cluster
    that cannot be read or written is a warning on every plan: the data is copied anyway."""
    topics = [tp.topic for tp in plans if not (tp.refused or tp.error or tp.create)]
    if not topics:
        return plans
    try:
        report = sync_acls(opts, sources, local, pool, topics, apply=apply)
    except UsageError:
        raise
    except PartsyncError as e:
        why = f"ACLs not synced: {e}"
        log.error("%s", why)
        return [dataclasses.replace(tp, warnings=(*tp.warnings, why)) for tp in plans]
    out = []
    for i, tp in enumerate(plans):
        lines = _topic_lines(report, tp.topic, i == 0, apply) if tp.topic in topics else []
        for line in lines:
            log.warning("%s", line)
        out.append(dataclasses.replace(tp, warnings=(*tp.warnings, *lines)) if lines else tp)
    return out
