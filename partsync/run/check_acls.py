"""``partsync check`` with ``--sync-acls`` / ``--read-only``: the rights an ACL pass needs on
each cluster, whether the local cluster can keep a mirror read-only, and which local grants
would let someone else write a mirror; and whether its clients can create a missing mirror
topic by asking (``auto.create.topics.enable``). Reads only (DescribeAcls, DescribeCluster,
Metadata, DescribeConfigs)."""

from __future__ import annotations

from partsync.errors import PartsyncError
from partsync.io.acls import cluster_acls, local_authorizer
from partsync.io.cluster import Cluster
from partsync.io.old_primary import auto_create_topics
from partsync.io.probes import Rights, topic_rights
from partsync.plan.acls import Acl, AclOptions, other_writers
from partsync.plan.preflight import Finding, Op, Verdict, ops_verdict
from partsync.plan.promotion import PROMOTIONS_TOPIC, SOURCE_ENDS_TOPIC
from partsync.run.acl_sync import own_principal
from partsync.run.topic_plan import SyncRequest

__all__ = ["auto_create_finding", "local_acl_findings", "record_findings", "source_acl_findings"]


def _can_list(cluster: Cluster, why: str) -> tuple[Finding, set[Acl] | None]:
    try:
        acls = cluster_acls(cluster)
    except PartsyncError as e:
        return Finding("cluster", "DESCRIBE", Verdict.MISSING, f"{why}: {e.reason}"), None
    return Finding("cluster", "DESCRIBE", Verdict.OK, f"{why} (DescribeAcls)"), acls


def source_acl_findings(cluster: Cluster) -> list[Finding]:
    """--sync-acls reads the source's ACLs: DESCRIBE on its cluster resource."""
    return [_can_list(cluster, "--sync-acls reads the topics' ACLs")[0]]


def local_acl_findings(
    cluster: Cluster, req: SyncRequest, cluster_ops: frozenset[int] | None
) -> list[Finding]:
    opts: AclOptions = req.acls
    found, have = _can_list(cluster, "the ACL pass reads the mirrors' ACLs")
    out = [found]
    if opts.sync:
        why = "--sync-acls creates and deletes ACLs (CreateAcls, DeleteAcls)"
        out.append(ops_verdict(cluster_ops, Op.ALTER, "cluster", why))
        topic = opts.record_topic
        ops = topic_rights(cluster, (topic,)).get(topic, Rights())
        subject = f"topic {topic}"
        what = "the record of the ACLs partsync created"
        if cluster.topic(topic) is None:
            out.append(ops_verdict(ops.allowed, Op.CREATE, subject, f"creating {what}"))
        for op in (Op.READ, Op.WRITE):
            out.append(ops_verdict(ops.allowed, op, subject, what))
    if not opts.read_only:
        return out
    try:
        closed, doubt = local_authorizer(cluster)
    except PartsyncError as e:
        out.append(Finding("cluster", "authorizer", Verdict.UNKNOWN, f"--read-only: {e.reason}"))
    else:
        if closed:
            out.append(Finding("cluster", "authorizer", Verdict.MISSING, f"--read-only: {closed}"))
        else:
            out.append(Finding("cluster", "authorizer", Verdict.OK, "--read-only: an authorizer"))
            if doubt:
                out.append(
                    Finding("cluster", "allow.everyone.if.no.acl.found", Verdict.UNKNOWN, doubt)
                )
    try:
        own = own_principal(opts, req.local)
    except PartsyncError as e:
        out.append(Finding("cluster", "principal", Verdict.MISSING, e.reason))
        return out
    for t in req.topics if have is not None else ():
        writers = other_writers(have or (), t, own)
        out.append(
            Finding(
                f"topic {t}",
                "read-only",
                Verdict.MISSING if writers else Verdict.OK,
                "writable by others: " + "; ".join(a.describe() for a in writers)
                if writers
                else f"no grant lets a principal other than {own} change it",
            )
        )
    return out


def record_findings(cluster: Cluster) -> list[Finding]:
    """partsync's own records on the local cluster: every run reads which topics were promoted
    (DESCRIBE and READ on ``partsync.promotions``; without them a promoted topic is not
    recognised, and the run says so), and a follower writes the sources' ends it sees
    (``partsync.source-ends``). Missing rights are warnings: the copy itself runs."""
    ops = topic_rights(cluster, (PROMOTIONS_TOPIC, SOURCE_ENDS_TOPIC))
    needs = (
        (PROMOTIONS_TOPIC, (Op.DESCRIBE, Op.READ), "reading which topics were promoted"),
        (SOURCE_ENDS_TOPIC, (Op.WRITE,), "--follow: recording the sources' ends it sees"),
    )
    out = []
    for topic, wanted, why in needs:
        rights = ops.get(topic, Rights())
        for op in wanted:
            f = ops_verdict(None if rights.denied else rights.allowed, op, f"topic {topic}", why)
            if rights.denied or f.verdict is Verdict.MISSING:
                f = Finding(f.subject, f.need, Verdict.WARNING, f"{why}: not authorized")
            out.append(f)
    return out


def auto_create_finding(cluster: Cluster) -> Finding:
    """``auto.create.topics.enable`` (Kafka's default: true) on the local cluster: a client that
    asks for a missing topic creates it with the broker's defaults. A mirror topic is missing
    for a moment when ``partsync failback`` deletes a diverged one to create it again; one
    created in between is refused (not as it was), so the warning says to turn it off."""
    need = "auto.create.topics.enable"
    try:
        on = auto_create_topics(cluster)
    except PartsyncError as e:
        return Finding("cluster", need, Verdict.UNKNOWN, f"not read: {e.reason}")
    if on is None:
        return Finding("cluster", need, Verdict.UNKNOWN, "the brokers do not report it")
    if on:
        return Finding(
            "cluster",
            need,
            Verdict.WARNING,
            "true: a client that asks for a missing topic creates it with the broker's "
            "defaults, as one may between failback deleting a diverged mirror topic and "
            "creating it again (failback then refuses it); set it to false",
        )
    return Finding("cluster", need, Verdict.OK, "false: clients cannot create topics by asking")
