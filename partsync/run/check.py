"""``partsync check``: connect to every cluster of a sync, authenticate, and report what the run
would need and whether it has it. Read-only: Metadata, ApiVersions, DescribeCluster,
FindCoordinator, DescribeGroups, DescribeAcls, DescribeConfigs and the planner's reads; no
InitProducerId (that would fence a running job's writer), no group join, no topic created."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from partsync._kafka import GROUP_KEY, TXN_KEY, AclEntry, ErrorCode, error_name
from partsync.config import ClusterRef, read_secret_file
from partsync.copy.producer import transactional_id
from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import Condition
from partsync.plan.preflight import (
    AclRule,
    CheckReport,
    ClusterCheck,
    Finding,
    Op,
    Verdict,
    acl_verdict,
    jwt_subject,
    ops_verdict,
)
from partsync.run.planner import SyncRequest, TopicPlan, plan_topics

__all__ = ["CheckOptions", "check_clusters"]

log = logging.getLogger(__name__)

_TRANSACTIONAL_ID = 5  # ACL resource type
_TOPIC_AUTHORIZATION_FAILED = 29
_TXN_ID_AUTHORIZATION_FAILED = 53
_COORDINATOR_WAIT_S = 10.0


@dataclass(frozen=True)
class CheckOptions:
    """What the checked run would do beyond copying: join ``group`` (None: --no-group), fence
    (--fencing)."""

    group: str | None
    fencing: bool = True


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
    if not sec.uses_ssl:
        return "User:ANONYMOUS"
    return None


def check_clusters(req: SyncRequest, pool: ClusterPool, opts: CheckOptions) -> CheckReport:
    checks = [_reach(pool.get(ref), "source") for ref in req.sources]
    local = pool.get(req.local)
    local_check = _reach(local, "local")
    checks.append(local_check)
    for c, ref in zip(checks, req.sources, strict=False):
        if c.error is None:
            source = pool.get(ref)
            _probe(c, lambda: _source_findings(source, req.topics))  # noqa: B023 (called now)
    if local_check.error is None:
        _probe(local_check, lambda: _local_findings(local, req, pool, opts))
    return CheckReport(req.topics, checks)


def _reach(cluster: Cluster, role: str) -> ClusterCheck:
    check = ClusterCheck(cluster.name, role, cluster.ref.bootstrap)
    try:
        md = cluster.metadata(refresh=True)
        check.brokers = len(md.brokers)
        check.broker_version = cluster.ask(lambda c: c.broker_version())
    except PartsyncError as e:
        check.error = e.reason
    return check


def _probe(check: ClusterCheck, findings: Callable[[], list[Finding]]) -> None:
    """Add what ``findings`` finds; a cluster that stops answering half way is reported as
    such, with what was found before."""
    try:
        check.findings.extend(findings())
    except PartsyncError as e:
        check.error = f"stopped answering during the check: {e.reason}"


def _topic_ops(
    cluster: Cluster, topics: tuple[str, ...]
) -> dict[str, tuple[int, frozenset[int] | None]]:
    return cluster.ask(lambda c: c.topic_operations(list(topics)))


def _source_findings(cluster: Cluster, topics: tuple[str, ...]) -> list[Finding]:
    out = []
    ops = _topic_ops(cluster, topics)
    for t in topics:
        subject = f"topic {t}"
        code, allowed = ops.get(t, (0, None))
        if code == _TOPIC_AUTHORIZATION_FAILED:
            out.append(Finding(subject, "DESCRIBE", Verdict.MISSING,
                               "listing the topic's partitions and bounds: not authorized"))  # fmt: skip
            continue
        info = cluster.topic(t)
        if info is None:
            out.append(Finding(subject, "exists", Verdict.MISSING, "no such topic here"))
            continue
        out.append(Finding(subject, "exists", Verdict.OK, f"{info.partitions} partitions"))
        out.append(ops_verdict(allowed, Op.DESCRIBE, subject, "bounds (ListOffsets)"))
        out.append(ops_verdict(allowed, Op.READ, subject, "copying (Fetch)"))
    return out


def _local_findings(
    cluster: Cluster, req: SyncRequest, pool: ClusterPool, opts: CheckOptions
) -> list[Finding]:
    out: list[Finding] = []
    _code, cluster_ops = cluster.ask(lambda c: c.cluster_operations())
    # Only brokers and super users hold CLUSTER_ACTION: ACLs say nothing about a super user.
    super_user = cluster_ops is not None and Op.CLUSTER_ACTION in cluster_ops
    plans = plan_topics(req, pool)
    ops = _topic_ops(cluster, req.topics)
    for tp in plans:
        out.extend(_plan_findings(tp, cluster.name))
        out.extend(_local_topic_findings(cluster, tp, ops.get(tp.topic, (0, None)),
                                         cluster_ops, super_user, req))  # fmt: skip
    if opts.fencing:
        out.extend(_fencing_findings(cluster, req, super_user))
    elif cluster_ops is not None and (Op.IDEMPOTENT_WRITE in cluster_ops or super_user):
        out.append(Finding("cluster", "IDEMPOTENT_WRITE", Verdict.OK, "--no-fencing: producer ids"))
    else:
        out.append(Finding("cluster", "IDEMPOTENT_WRITE", Verdict.UNKNOWN,
                           "--no-fencing: producer ids need IDEMPOTENT_WRITE on the cluster, or "
                           "(Kafka 3.0+) WRITE on the topic"))  # fmt: skip
    if opts.group is not None:
        out.extend(_group_findings(cluster, opts.group))
    return out


def _plan_findings(tp: TopicPlan, local: str) -> list[Finding]:
    """What the plan (read-only) says sync would refuse or fail on."""
    subject = f"topic {tp.topic}"
    if tp.error:
        return [Finding(subject, "plan", Verdict.MISSING, tp.error)]
    if tp.refused:
        return [Finding(subject, "plan", Verdict.MISSING, f"sync would refuse it: {tp.refused}")]
    unsafe = [p for p in tp.partitions if p.condition is Condition.UNSAFE]
    if unsafe:
        first = unsafe[0]
        more = f" (and {len(unsafe) - 1} more partitions)" if len(unsafe) > 1 else ""
        return [Finding(subject, "plan", Verdict.MISSING,
                        f"sync would refuse partition {first.partition}{more}: {first.reason}")]  # fmt: skip
    behind = sum(1 for p in tp.partitions if p.condition is Condition.BEHIND)
    missing = sum(p.missing for p in tp.partitions if p.condition is Condition.BEHIND)
    what = (f"{behind} of {len(tp.partitions)} partitions behind, {missing} offsets to copy"
            if behind else f"all {len(tp.partitions)} partitions in sync")  # fmt: skip
    return [Finding(subject, "plan", Verdict.OK, what)]


def _local_topic_findings(
    cluster: Cluster,
    tp: TopicPlan,
    topic_ops: tuple[int, frozenset[int] | None],
    cluster_ops: frozenset[int] | None,
    super_user: bool,
    req: SyncRequest,
) -> list[Finding]:
    subject = f"topic {tp.topic}"
    code, allowed = topic_ops
    if tp.create is not None:
        # A topic that does not exist has no authorized operations: CREATE on the cluster
        # covers every topic; otherwise a topic ACL may grant it.
        if cluster_ops is not None and (Op.CREATE in cluster_ops or super_user):
            return [Finding(subject, "CREATE", Verdict.OK, "--create-missing (on the cluster)")]
        acl_code, rules = cluster.ask(lambda c: c.describe_acls(2, tp.topic))
        return [acl_verdict(acl_code, _rules(rules), principal_of(cluster.ref), Op.CREATE,
                            subject, "--create-missing", super_user=super_user)]  # fmt: skip
    if code == _TOPIC_AUTHORIZATION_FAILED:
        return [Finding(subject, "DESCRIBE", Verdict.MISSING, "reading its bounds: not authorized")]
    out = [
        ops_verdict(allowed, Op.DESCRIBE, subject, "bounds (ListOffsets)"),
        ops_verdict(allowed, Op.WRITE, subject, "appending (Produce)"),
        ops_verdict(allowed, Op.DESCRIBE_CONFIGS, subject, "the configs that decide identity"),
    ]
    if tp.grow is not None:
        out.append(ops_verdict(allowed, Op.ALTER, subject,
                               f"growing it to {tp.grow.partitions} partitions"))  # fmt: skip
    starts = [p.partition for p in tp.partitions if p.bootstrap]
    if starts or req.policy.retention_gap == "skip":
        why = (f"starting partition {starts[0]} at its sources' log start (DeleteRecords)"
               if starts else "--on-retention-gap skip (DeleteRecords)")  # fmt: skip
        out.append(ops_verdict(allowed, Op.DELETE, subject, why))
        if starts and not cluster.ask(lambda c: c.supports("DeleteRecords")):
            out.append(Finding(subject, "DeleteRecords", Verdict.MISSING,
                               f"{why}: the broker does not offer DeleteRecords"))  # fmt: skip
    return out


def _rules(entries: list[AclEntry]) -> list[AclRule]:
    return [AclRule(e.principal, e.host, e.operation, e.permission) for e in entries]


def _fencing_findings(cluster: Cluster, req: SyncRequest, super_user: bool) -> list[Finding]:
    """Fencing takes a producer id under each partition's transactional id: the coordinator
    must be there, and the id's ACLs allow DESCRIBE (FindCoordinator answers) and WRITE (only
    DescribeAcls can tell, where this client may read ACLs)."""
    if not req.topics:
        return []
    tid = transactional_id(req.topics[0], 0)
    subject = f"transactional id {tid}"
    if not cluster.ask(lambda c: c.supports("InitProducerId")):
        return [Finding(subject, "InitProducerId", Verdict.MISSING,
                        "fencing: the broker does not offer InitProducerId (--no-fencing "
                        "appends without it)")]  # fmt: skip
    code, coord = cluster.find_coordinator(tid, TXN_KEY, timeout=_COORDINATOR_WAIT_S)
    if code == _TXN_ID_AUTHORIZATION_FAILED:
        return [Finding(subject, "DESCRIBE", Verdict.MISSING,
                        "fencing: not authorized (ACLs on TransactionalId, prefix 'partsync:')")]  # fmt: skip
    if code or coord is None:
        return [Finding(subject, "coordinator", Verdict.MISSING,
                        f"fencing: no transaction coordinator ({error_name(code)}); the "
                        "__transaction_state topic must be creatable")]  # fmt: skip
    out = [Finding(subject, "coordinator", Verdict.OK, f"broker {coord.node_id}")]
    acl_code, rules = cluster.ask(lambda c: c.describe_acls(_TRANSACTIONAL_ID, tid))
    out.append(acl_verdict(acl_code, _rules(rules), principal_of(cluster.ref), Op.WRITE, subject,
                           "fencing (InitProducerId)", super_user=super_user))  # fmt: skip
    return out


def _group_findings(cluster: Cluster, group: str) -> list[Finding]:
    subject = f"group {group}"
    code, coord = cluster.find_coordinator(group, GROUP_KEY, timeout=_COORDINATOR_WAIT_S)
    if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        return [Finding(subject, "DESCRIBE", Verdict.MISSING,
                        "sharing partitions between processes: not authorized (--no-group "
                        "runs without the group)")]  # fmt: skip
    if code or coord is None:
        return [Finding(subject, "coordinator", Verdict.MISSING,
                        f"no group coordinator ({error_name(code)})")]  # fmt: skip
    out = [Finding(subject, "coordinator", Verdict.OK, f"broker {coord.node_id}")]
    gcode, ops = cluster.broker_conn(coord.node_id).group_operations(group)
    if gcode == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        out.append(Finding(subject, "READ", Verdict.MISSING, "joining the group: not authorized"))
    elif gcode:
        out.append(Finding(subject, "READ", Verdict.UNKNOWN,
                           f"joining the group: DescribeGroups answered {error_name(gcode)}"))  # fmt: skip
    else:
        out.append(ops_verdict(ops, Op.READ, subject, "joining the group"))
    return out
