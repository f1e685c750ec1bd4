"""How `partsync check` judges what brokers answered (partsync.plan.preflight): authorized
operations, ACLs by Kafka's rules, and the report's exit status."""

from __future__ import annotations

from partsync.errors import ExitStatus
from partsync.plan.preflight import (
    SECURITY_DISABLED,
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

ALLOW, DENY = 3, 2
CLUSTER_AUTHORIZATION_FAILED = 31
ME = "User:alice"


def _acl(op: Op, permission: int = ALLOW, principal: str = ME, host: str = "*") -> AclRule:
    return AclRule(principal, host, int(op), permission)


def _verdict(rules: list[AclRule], op: Op = Op.WRITE, **kw: object) -> Verdict:
    return acl_verdict(0, rules, ME, op, "transactional id x", "fencing", **kw).verdict  # type: ignore[arg-type]


def test_authorized_operations() -> None:
    assert ops_verdict(frozenset({Op.READ, Op.DESCRIBE}), Op.READ, "t", "why").verdict is Verdict.OK
    missing = ops_verdict(frozenset({Op.DESCRIBE}), Op.READ, "topic t", "copying (Fetch)")
    assert missing == Finding("topic t", "READ", Verdict.MISSING, "copying (Fetch): not authorized")
    assert ops_verdict(None, Op.WRITE, "t", "w").verdict is Verdict.UNKNOWN


def test_acls_allow_deny_and_implied_operations() -> None:
    assert _verdict([_acl(Op.WRITE)]) is Verdict.OK
    assert _verdict([_acl(Op.ALL)]) is Verdict.OK
    assert _verdict([_acl(Op.WRITE, principal="User:*")]) is Verdict.OK
    # A DENY wins over any ALLOW, also one for ALL.
    assert _verdict([_acl(Op.WRITE), _acl(Op.ALL, DENY)]) is Verdict.MISSING
    assert _verdict([_acl(Op.ALL), _acl(Op.WRITE, DENY, principal="User:*")]) is Verdict.MISSING
    # Another principal's rules do not count: the resource has ACLs, none allows it to us.
    assert _verdict([_acl(Op.WRITE, principal="User:bob")]) is Verdict.MISSING
    # WRITE implies DESCRIBE (an ALLOW), but a DENY of WRITE does not deny DESCRIBE.
    assert _verdict([_acl(Op.WRITE)], Op.DESCRIBE) is Verdict.OK
    assert _verdict([_acl(Op.DESCRIBE), _acl(Op.WRITE, DENY)], Op.DESCRIBE) is Verdict.OK
    assert _verdict([_acl(Op.DESCRIBE)], Op.WRITE) is Verdict.MISSING


def test_what_acls_cannot_decide_is_unknown() -> None:
    # No ACL on the resource at all: allow.everyone.if.no.acl.found decides.
    assert _verdict([]) is Verdict.UNKNOWN
    # A rule for one host: Kafka compares it with the client's address, unknown here.
    assert _verdict([_acl(Op.WRITE, host="10.0.0.9")]) is Verdict.UNKNOWN
    assert _verdict([_acl(Op.WRITE), _acl(Op.WRITE, DENY, host="10.0.0.9")]) is Verdict.UNKNOWN
    # A principal that may be a super user (allowed before any ACL is read).
    bob_only = [_acl(Op.WRITE, principal="User:bob")]
    assert _verdict(bob_only, maybe_super_user=True) is Verdict.UNKNOWN
    assert _verdict([_acl(Op.ALL, DENY)], maybe_super_user=True) is Verdict.UNKNOWN


def test_acls_that_cannot_be_read() -> None:
    no_authorizer = acl_verdict(SECURITY_DISABLED, [], ME, Op.WRITE, "s", "fencing")
    assert no_authorizer.verdict is Verdict.OK and "no authorizer" in no_authorizer.detail
    hidden = acl_verdict(CLUSTER_AUTHORIZATION_FAILED, [], ME, Op.WRITE, "s", "fencing")
    assert hidden.verdict is Verdict.UNKNOWN and "DESCRIBE on the cluster" in hidden.detail
    tls = acl_verdict(0, [_acl(Op.WRITE)], None, Op.WRITE, "s", "fencing")
    assert tls.verdict is Verdict.UNKNOWN and "principal" in tls.detail


def test_report_exit_status_counts_missing_and_unreachable_not_unknown() -> None:
    ok = ClusterCheck("a", "source", "h:1", findings=[Finding("t", "READ", Verdict.UNKNOWN)])
    assert CheckReport(("t",), [ok]).exit_status is ExitStatus.OK
    gone = ClusterCheck("b", "source", "h:2", error="cannot connect")
    bad = ClusterCheck("l", "local", "h:3", findings=[Finding("t", "WRITE", Verdict.MISSING)])
    report = CheckReport(("t",), [ok, gone, bad])
    assert report.exit_status is ExitStatus.FAILURE
    doc = report.to_dict()
    assert doc["ok"] is False and doc["problems"] == 2 and doc["exit_code"] == 1
    assert doc["clusters"][1] == {  # type: ignore[index]
        "cluster": "b",
        "role": "source",
        "bootstrap": "h:2",
        "reachable": False,
        "error": "cannot connect",
        "broker_version": None,
        "brokers": 0,
        "ok": False,
        "findings": [],
    }


def test_jwt_subject_names_the_principal_without_verifying() -> None:
    import base64
    import json

    def part(d: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

    token = f"{part({'alg': 'none'})}.{part({'sub': 'alice', 'exp': 1})}."
    assert jwt_subject(token) == "alice"
    assert jwt_subject(f"{part({'alg': 'none'})}.{part({'exp': 1})}.") is None
    assert jwt_subject("not-a-jwt") is None and jwt_subject("a.%%%.b") is None
