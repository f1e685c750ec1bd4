"""``partsync check``: connect to every cluster of a sync, authenticate, and report what the run
would need and whether it has it. Reads only: Metadata, ApiVersions, DescribeCluster,
FindCoordinator, DescribeGroups, DescribeAcls and the planner's reads (ListOffsets, Fetch,
DescribeConfigs); no InitProducerId (that would fence a running job's writer), no group join,
no topic created. (FindCoordinator itself makes Kafka create ``__transaction_state`` or
``__consumer_offsets`` on a cluster that never had them, as sync would.)"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from partsync.copy.producer import transactional_id
from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.pool import ClusterPool
from partsync.io.probes import (
    Reach,
    Rights,
    broker_version,
    cluster_rights,
    group_coordinator,
    group_rights,
    offers,
    topic_rights,
    transactional_id_acls,
    txn_coordinators,
)
from partsync.plan.comparator import Condition
from partsync.plan.preflight import (
    CheckReport,
    ClusterCheck,
    Finding,
    Op,
    Verdict,
    acl_verdict,
    ops_verdict,
)
from partsync.run.acl_sync import principal_of
from partsync.run.check_acls import (
    auto_create_finding,
    local_acl_findings,
    record_findings,
    source_acl_findings,
)
from partsync.run.planner import SyncRequest, TopicPlan, plan_topics

__all__ = ["CheckOptions", "check_clusters"]

log = logging.getLogger(__name__)

_COORDINATOR_WAIT_S = 10.0


@dataclass(frozen=True)
class CheckOptions:
    """What the checked run would do beyond copying: join ``group`` (None: --no-group), fence
    (--fencing)."""

    group: str | None
    fencing: bool = True


def check_clusters(req: SyncRequest, pool: ClusterPool, opts: CheckOptions) -> CheckReport:
    pool.watch((req.local, *req.sources), req.topics)
    checks = [_reach(pool.get(ref), "source") for ref in req.sources]
    for c, ref in zip(checks, req.sources, strict=True):
        if c.error is None:
            source = pool.get(ref)
            _step(c, "topics", lambda: _source_findings(source, req))  # noqa: B023 (called now)
            if req.acls.sync:
                _step(c, "acls", lambda: source_acl_findings(source))  # noqa: B023 (called now)
    _tolerate_partial_sources(checks, req.topics)
    local = pool.get(req.local)
    local_check = _reach(local, "local")
    if local_check.error is None:
        _local_findings(local_check, local, req, pool, opts)
    return CheckReport(req.topics, [*checks, local_check])


def _reach(cluster: Cluster, role: str) -> ClusterCheck:
    check = ClusterCheck(cluster.name, role, cluster.ref.bootstrap)
    try:
        md = cluster.metadata(refresh=True)
        check.brokers = len(md.brokers)
        check.broker_version = broker_version(cluster)
    except PartsyncError as e:
        check.error = e.reason
    return check


def _step(check: ClusterCheck, what: str, findings: Callable[[], list[Finding]]) -> bool:
    """Add what ``findings`` finds; an error is a finding of its own (what could not be
    checked, and why), and the other steps still run. False on an error."""
    try:
        check.findings.extend(findings())
        return True
    except PartsyncError as e:
        check.findings.append(Finding(what, "check", Verdict.MISSING, f"could not check: {e}"))
        return False


def _tolerate_partial_sources(checks: list[ClusterCheck], topics: tuple[str, ...]) -> None:
    """A topic missing on some sources but not all is planned without them (sync goes on):
    a warning there, not a problem."""
    for t in topics:
        subject = f"topic {t}"
        if not any(
            f.subject == subject and f.need == "exists" and f.verdict is Verdict.OK
            for c in checks
            for f in c.findings
        ):
            continue
        for c in checks:
            c.findings[:] = [
                Finding(
                    subject, "exists", Verdict.WARNING, "not on this source; the others serve it"
                )
                if f.subject == subject and f.need == "exists" and f.verdict is Verdict.MISSING
                else f
                for f in c.findings
            ]


def _source_findings(cluster: Cluster, req: SyncRequest) -> list[Finding]:
    out = []
    rights = topic_rights(cluster, req.topics)
    for t in req.topics:
        subject = f"topic {t}"
        topic_ops = rights.get(t, Rights())
        allowed = topic_ops.allowed
        if topic_ops.denied:
            out.append(
                Finding(
                    subject,
                    "DESCRIBE",
                    Verdict.MISSING,
                    "listing the topic's partitions and bounds: not authorized",
                )
            )
            continue
        info = cluster.topic(t)
        if info is None:
            out.append(Finding(subject, "exists", Verdict.MISSING, "no such topic here"))
            continue
        out.append(Finding(subject, "exists", Verdict.OK, f"{info.partitions} partitions"))
        out.append(ops_verdict(allowed, Op.DESCRIBE, subject, "bounds (ListOffsets)"))
        out.append(ops_verdict(allowed, Op.READ, subject, "copying (Fetch)"))
        if req.create_missing or req.sync_configs:
            why = "--sync-configs" if req.sync_configs else "--create-missing"
            out.append(ops_verdict(allowed, Op.DESCRIBE_CONFIGS, subject, f"{why}: its configs"))
    return out


def _local_findings(
    check: ClusterCheck, cluster: Cluster, req: SyncRequest, pool: ClusterPool, opts: CheckOptions
) -> None:
    cluster_ops: frozenset[int] | None = None

    def on_cluster() -> list[Finding]:
        nonlocal cluster_ops
        cluster_ops = cluster_rights(cluster)
        return []

    _step(check, "cluster", on_cluster)
    # Only a super user or a grant of ClusterAction or All on the cluster shows CLUSTER_ACTION;
    # such a principal may need no ACL elsewhere, which ACLs cannot show.
    maybe_super = cluster_ops is not None and Op.CLUSTER_ACTION in cluster_ops
    plans: list[TopicPlan] = []

    def plan() -> list[Finding]:
        plans.extend(plan_topics(req, pool))
        return [f for tp in plans for f in _plan_findings(tp)]

    _step(check, "plan", plan)

    def rights() -> list[Finding]:
        ops = topic_rights(cluster, req.topics)
        return [
            f
            for tp in plans
            for f in _local_topic_findings(tp, ops.get(tp.topic, Rights()), cluster_ops, req)
        ]

    _step(check, "topics", rights)
    if opts.fencing:
        _step(check, "fencing", lambda: _fencing_findings(cluster, plans, maybe_super))
        _step(check, "transactions", lambda: [_replay_finding(cluster)])
    else:
        check.findings.append(_idempotent_finding(cluster_ops, check.findings))
    if req.acls.active:
        _step(check, "acls", lambda: local_acl_findings(cluster, req, cluster_ops))
    _step(check, "records", lambda: record_findings(cluster))
    _step(check, "auto-create", lambda: [auto_create_finding(cluster)])
    if opts.group is not None:
        group = opts.group
        _step(check, f"group {group}", lambda: _group_findings(cluster, group))


def _replay_finding(cluster: Cluster) -> Finding:
    """Whether a replay of transactions (sync's default with fencing) can leave a local
    transaction open for the next run to resume (a source transaction without its marker yet,
    or a run killed in the middle of one): that needs the local cluster to offer KIP-664
    (Kafka 3.0+)."""
    need = "DescribeTransactions, DescribeProducers, ListTransactions"
    if cluster.can_resume_transactions():
        return Finding(
            "cluster",
            need,
            Verdict.OK,
            "a source transaction still open at the end of a run, or a run killed "
            "mid-transaction, is resumed by the next run (KIP-664)",
        )
    return Finding(
        "cluster",
        need,
        Verdict.WARNING,
        "not all offered (Kafka < 3.0?): a replay holds each source transaction back "
        "until its marker, so a topic whose transactions overlap (exactly-once "
        "writers) stays behind, and a run killed while replaying a transaction leaves "
        "it to be aborted, where the partition then diverges; sync with "
        "--transactions refuse to copy no transactions",
    )


def _idempotent_finding(cluster_ops: frozenset[int] | None, found: list[Finding]) -> Finding:
    """--no-fencing: a producer id without a transactional id needs IDEMPOTENT_WRITE on the
    cluster or, since Kafka 2.8 (KIP-679, the brokers that report cluster rights), WRITE on
    any topic."""
    why = "--no-fencing: producer ids (InitProducerId)"
    if cluster_ops is not None and Op.IDEMPOTENT_WRITE in cluster_ops:
        return Finding("cluster", "IDEMPOTENT_WRITE", Verdict.OK, why)
    if any(
        f.need == "WRITE" and f.subject.startswith("topic ") and f.verdict is Verdict.OK
        for f in found
    ):
        return Finding(
            "cluster",
            "IDEMPOTENT_WRITE",
            Verdict.OK,
            f"{why}: WRITE on a topic suffices (Kafka 2.8+)",
        )
    return Finding(
        "cluster",
        "IDEMPOTENT_WRITE",
        Verdict.UNKNOWN,
        f"{why} need IDEMPOTENT_WRITE on the cluster or WRITE on a topic",
    )


def _plan_findings(tp: TopicPlan) -> list[Finding]:
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
        return [
            Finding(
                subject,
                "plan",
                Verdict.MISSING,
                f"sync would refuse partition {first.partition}{more}: {first.reason}",
            )
        ]
    behind = sum(1 for p in tp.partitions if p.condition is Condition.BEHIND)
    missing = sum(p.missing for p in tp.partitions if p.condition is Condition.BEHIND)
    what = (
        f"{behind} of {len(tp.partitions)} partitions behind, {missing} offsets to copy"
        if behind
        else f"all {len(tp.partitions)} partitions in sync"
    )
    if tp.create is not None:
        what = f"to be created with {tp.create.partitions} partitions; {what}"
    return [Finding(subject, "plan", Verdict.OK, what)]


def _local_topic_findings(
    tp: TopicPlan,
    topic_ops: Rights,
    cluster_ops: frozenset[int] | None,
    req: SyncRequest,
) -> list[Finding]:
    subject = f"topic {tp.topic}"
    allowed = topic_ops.allowed
    if topic_ops.denied:
        return [Finding(subject, "DESCRIBE", Verdict.MISSING, "seeing the topic: not authorized")]
    out = []
    if tp.create is not None:
        # Metadata reports rights on a topic that does not exist yet from its topic ACLs;
        # CREATE may come from the cluster instead.
        if cluster_ops is not None and Op.CREATE in cluster_ops:
            out.append(Finding(subject, "CREATE", Verdict.OK, "--create-missing (on the cluster)"))
        elif allowed is None and cluster_ops is None:
            out.append(
                Finding(
                    subject,
                    "CREATE",
                    Verdict.UNKNOWN,
                    "--create-missing; the broker does not report authorized operations",
                )
            )
        else:
            out.append(
                ops_verdict(
                    allowed or frozenset(),
                    Op.CREATE,
                    subject,
                    "--create-missing (on the topic or the cluster)",
                )
            )
    out += [
        ops_verdict(allowed, Op.DESCRIBE, subject, "bounds (ListOffsets)"),
        ops_verdict(allowed, Op.READ, subject, "reading the local log's last batch (Fetch)"),
        ops_verdict(allowed, Op.WRITE, subject, "appending (Produce)"),
        ops_verdict(
            allowed,
            Op.DESCRIBE_CONFIGS,
            subject,
            "reading the configs that decide identity (without it sync assumes "
            "Kafka's defaults, unverified)",
        ),
    ]
    if tp.grow is not None:
        out.append(
            ops_verdict(
                allowed, Op.ALTER, subject, f"growing it to {tp.grow.partitions} partitions"
            )
        )
    if req.sync_configs:
        why = "--sync-configs sets its configs as the source has them"
        out.append(ops_verdict(allowed, Op.ALTER_CONFIGS, subject, why))
    if req.options.fill_holes and tp.create is None:
        out.append(
            Finding(
                subject,
                "cleanup.policy",
                Verdict.OK,
                "compacted: --compaction-holes fill can put hole records there",
            )
            if tp.rules.compacted
            else Finding(
                subject,
                "cleanup.policy",
                Verdict.MISSING,
                "--compaction-holes fill needs a "
                "compacted local topic (cleanup.policy with compact); sync refuses at the "
                "first compaction hole",
            )
        )
    starts = [p.partition for p in tp.partitions if p.bootstrap]
    if starts or req.policy.retention_gap == "skip":
        why = (
            f"starting partition {starts[0]} at its sources' log start (DeleteRecords)"
            if starts
            else "--on-retention-gap skip (DeleteRecords)"
        )
        out.append(ops_verdict(allowed, Op.DELETE, subject, why))
    return out


def _fencing_findings(cluster: Cluster, plans: list[TopicPlan], maybe_super: bool) -> list[Finding]:
    """Fencing takes a producer id under each partition's transactional id: the coordinator
    must be there, and the ids' ACLs allow DESCRIBE (FindCoordinator answers) and WRITE (only
    DescribeAcls can tell, where this client may read ACLs). One id per topic: its first
    partition's."""
    ids = [
        transactional_id(tp.topic, tp.partitions[0].partition if tp.partitions else 0)
        for tp in plans
        if not tp.error and not tp.refused
    ]
    if not ids:
        return []
    if not offers(cluster, "InitProducerId"):
        return [
            Finding(
                "transactional ids",
                "InitProducerId",
                Verdict.MISSING,
                "fencing: the broker does not offer InitProducerId (--no-fencing "
                "appends without it)",
            )
        ]
    found = txn_coordinators(cluster, ids, timeout=_COORDINATOR_WAIT_S)
    out = []
    for tid in ids:
        subject = f"transactional id {tid}"
        coord = found[tid]
        if coord.reach is Reach.DENIED:
            out.append(
                Finding(
                    subject,
                    "DESCRIBE",
                    Verdict.MISSING,
                    "fencing: not authorized (ACLs on TransactionalId, prefix 'partsync:')",
                )
            )
            continue
        if coord.reach is Reach.NOT_READY:  # a new cluster's coordinator still starting
            out.append(
                Finding(
                    subject,
                    "coordinator",
                    Verdict.UNKNOWN,
                    f"fencing: the coordinator is not ready yet ({coord.error})",
                )
            )
            continue
        if coord.reach is Reach.MISSING:
            out.append(
                Finding(
                    subject,
                    "coordinator",
                    Verdict.MISSING,
                    f"fencing: no transaction coordinator ({coord.error})",
                )
            )
            continue
        out.append(Finding(subject, "coordinator", Verdict.OK, f"broker {coord.node_id}"))
        acl_code, rules = transactional_id_acls(cluster, tid)
        out.append(
            acl_verdict(
                acl_code,
                rules,
                principal_of(cluster.ref),
                Op.WRITE,
                subject,
                "fencing (InitProducerId)",
                maybe_super_user=maybe_super,
            )
        )
    return out


def _group_findings(cluster: Cluster, group: str) -> list[Finding]:
    subject = f"group {group}"
    coord = group_coordinator(cluster, group, timeout=_COORDINATOR_WAIT_S)
    if coord.reach is Reach.DENIED:
        return [
            Finding(
                subject,
                "DESCRIBE",
                Verdict.MISSING,
                "sharing partitions between processes: not authorized (--no-group "
                "runs without the group)",
            )
        ]
    if coord.reach is Reach.NOT_READY:
        return [
            Finding(
                subject,
                "coordinator",
                Verdict.UNKNOWN,
                f"the coordinator is not ready yet ({coord.error})",
            )
        ]
    if coord.reach is Reach.MISSING:
        return [
            Finding(
                subject, "coordinator", Verdict.MISSING, f"no group coordinator ({coord.error})"
            )
        ]
    out = [Finding(subject, "coordinator", Verdict.OK, f"broker {coord.node_id}")]
    rights = group_rights(cluster, coord, group)
    if rights.denied:
        out.append(Finding(subject, "READ", Verdict.MISSING, "joining the group: not authorized"))
    elif rights.error:
        out.append(
            Finding(
                subject,
                "READ",
                Verdict.UNKNOWN,
                f"joining the group: DescribeGroups answered {rights.error}",
            )
        )
    else:
        out.append(ops_verdict(rights.allowed, Op.READ, subject, "joining the group"))
    return out
