"""What a sync needs from each cluster, and how ``partsync check`` judges what it found.

Pure: the probes (``partsync.run.check``) hand in what brokers answered (authorized operation
codes, ACLs, error codes); this module decides ``ok``, ``missing`` or ``unknown`` and says why.
Operation and resource codes are Kafka's (``AclOperation``, ``ResourceType``).
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from partsync.errors import ExitStatus

__all__ = [
    "AclRule",
    "CheckReport",
    "ClusterCheck",
    "Finding",
    "Op",
    "Verdict",
    "acl_verdict",
    "jwt_subject",
    "ops_verdict",
]


class Op(enum.IntEnum):
    """Kafka ACL operations (codes as on the wire)."""

    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


# Operations that imply others, as Kafka's authorizer applies them (AclEntry.implies):
# DESCRIBE by READ, WRITE, DELETE or ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS.
_IMPLIED_BY: dict[Op, tuple[Op, ...]] = {
    Op.DESCRIBE: (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER),
    Op.DESCRIBE_CONFIGS: (Op.ALTER_CONFIGS,),
}

# DescribeAcls answers: codes of the permission and of the error meaning "no authorizer".
_DENY, _ALLOW = 2, 3
SECURITY_DISABLED = 54


def jwt_subject(token: str) -> str | None:
    """The ``sub`` claim of a JWT (not verified: only to name the principal Kafka's default
    OAUTHBEARER rules derive from it), or None."""
    parts = token.strip().split(".")
    if len(parts) < 2:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, TypeError):
        return None
    sub = payload.get("sub") if isinstance(payload, dict) else None
    return sub if isinstance(sub, str) and sub else None


class Verdict(str, enum.Enum):
    OK = "ok"
    MISSING = "missing"  # sync would fail (or refuse) for want of it
    UNKNOWN = "unknown"  # the broker would not say; not counted as a problem
    WARNING = "warning"  # sync works, but not as fully as it could; not counted either


@dataclass(frozen=True)
class Finding:
    """One thing checked on one cluster: ``subject`` (e.g. ``topic orders``), ``need`` (e.g.
    ``READ``), the verdict and why it matters or what was seen."""

    subject: str
    need: str
    verdict: Verdict
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "subject": self.subject,
            "need": self.need,
            "verdict": self.verdict.value,
            "detail": self.detail,
        }


def ops_verdict(ops: frozenset[int] | None, op: Op, subject: str, why: str) -> Finding:
    """Whether ``op`` is among a resource's authorized operations (KIP-430), as the broker
    reported them; ``None`` (the broker does not report them) is unknown."""
    name = op.name
    if ops is None:
        return Finding(
            subject,
            name,
            Verdict.UNKNOWN,
            f"{why}; the broker does not report authorized operations",
        )
    if op in ops or Op.ALL in ops:
        return Finding(subject, name, Verdict.OK, why)
    return Finding(subject, name, Verdict.MISSING, f"{why}: not authorized")


@dataclass(frozen=True)
class AclRule:
    """One ACL entry that applies to a resource: principal, host, operation, permission."""

    principal: str
    host: str
    operation: int
    permission: int


def acl_verdict(
    code: int,
    rules: Iterable[AclRule],
    principal: str | None,
    op: Op,
    subject: str,
    why: str,
    *,
    maybe_super_user: bool = False,
) -> Finding:
    """Whether the ACLs listed for a resource (DescribeAcls, error ``code``) let ``principal``
    do ``op``, by the StandardAuthorizer's rules: a matching DENY wins, then a matching ALLOW
    (the principal's or ``User:*``; an ALLOW also grants the operations it implies, a DENY
    only its own). Where the answer depends on what ACLs cannot show, it is unknown: a rule
    for one host (Kafka compares it with the client's address), no ACL on the resource at all
    (``allow.everyone.if.no.acl.found`` decides), a principal that may be a super user
    (``maybe_super_user``: super users are allowed before any ACL is read)."""
    name = op.name
    if code == SECURITY_DISABLED:
        return Finding(subject, name, Verdict.OK, f"{why}; the cluster has no authorizer")
    if code:
        return Finding(
            subject,
            name,
            Verdict.UNKNOWN,
            f"{why}; ACLs not readable here "
            "(DescribeAcls needs DESCRIBE on the cluster), so not verified",
        )
    if principal is None:
        return Finding(
            subject,
            name,
            Verdict.UNKNOWN,
            f"{why}; this client's principal is not known here (a TLS client "
            "certificate maps to one by the broker's rules), so not verified",
        )
    rules = list(rules)
    if not rules:
        return Finding(
            subject,
            name,
            Verdict.UNKNOWN,
            f"{why}; no ACL names this resource: allowed only where the brokers set "
            "allow.everyone.if.no.acl.found=true, or for a super user",
        )
    ours = [r for r in rules if r.principal in (principal, "User:*")]
    denies = {Op.ALL, op}
    allows = {Op.ALL, op, *_IMPLIED_BY.get(op, ())}
    deny = [r for r in ours if r.permission == _DENY and r.operation in denies]
    allow = [r for r in ours if r.permission == _ALLOW and r.operation in allows]
    if any(r.host == "*" for r in deny):
        if maybe_super_user:
            return Finding(
                subject,
                name,
                Verdict.UNKNOWN,
                f"{why}: denied by an ACL for {principal}, unless it is a super user",
            )
        return Finding(subject, name, Verdict.MISSING, f"{why}: denied by an ACL for {principal}")
    if deny:
        return Finding(
            subject,
            name,
            Verdict.UNKNOWN,
            f"{why}; an ACL denies it to {principal} from host(s) "
            f"{', '.join(sorted({r.host for r in deny}))}",
        )
    if any(r.host == "*" for r in allow):
        return Finding(subject, name, Verdict.OK, why)
    if allow:
        return Finding(
            subject,
            name,
            Verdict.UNKNOWN,
            f"{why}; allowed to {principal} only from host(s) "
            f"{', '.join(sorted({r.host for r in allow}))}",
        )
    if maybe_super_user:
        return Finding(
            subject,
            name,
            Verdict.UNKNOWN,
            f"{why}: no ACL allows it for {principal}, unless it is a super user",
        )
    return Finding(subject, name, Verdict.MISSING, f"{why}: no ACL allows it for {principal}")


@dataclass
class ClusterCheck:
    """What ``check`` found on one cluster, in the role the run gives it."""

    name: str
    role: str  # "source" or "local"
    bootstrap: str
    error: str | None = None  # could not connect or authenticate: nothing else was checked
    broker_version: str | None = None
    brokers: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict is Verdict.MISSING]

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems

    def to_dict(self) -> dict[str, object]:
        return {
            "cluster": self.name,
            "role": self.role,
            "bootstrap": self.bootstrap,
            "reachable": self.error is None,
            "error": self.error,
            "broker_version": self.broker_version,
            "brokers": self.brokers,
            "ok": self.ok,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(frozen=True)
class CheckReport:
    topics: tuple[str, ...]
    clusters: Sequence[ClusterCheck]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.clusters)

    @property
    def exit_status(self) -> ExitStatus:
        return ExitStatus.OK if self.ok else ExitStatus.FAILURE

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "topics": list(self.topics),
            "clusters": [c.to_dict() for c in self.clusters],
            "problems": sum(len(c.problems) + (c.error is not None) for c in self.clusters),
            "exit_code": int(self.exit_status),
        }
