"""The ACL decisions (``partsync.plan.acls``) as tables: which source ACLs a mirror gets, what
partsync may remove (only what its record holds), who else could write a read-only mirror;
and the record's key and batch bytes."""

from __future__ import annotations

import pytest

from partsync.plan.acls import (
    ALL,
    ALLOW,
    DENY,
    GROUP,
    LITERAL,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    Acl,
    AclPolicy,
    acl_changes,
    in_scope,
    mirror_acls,
    other_writers,
)
from partsync.wire.batch import Batch
from partsync.wire.keyed import keyed_batch
from partsync.wire.records import decode_records

DESCRIBE, DESCRIBE_CONFIGS, DELETE = 8, 10, 6


def acl(
    name: str = "orders",
    who: str = "User:app",
    op: int = READ,
    perm: int = ALLOW,
    pattern: int = LITERAL,
    rt: int = TOPIC,
) -> Acl:
    return Acl(rt, name, pattern, who, "*", op, perm)


@pytest.mark.parametrize(
    ("a", "topics", "groups", "expected"),
    [
        (acl("orders"), ["orders"], [], True),
        (acl("orders"), ["orders2"], [], False),
        (acl("ord", pattern=PREFIXED), ["orders"], [], True),
        (acl("orders-", pattern=PREFIXED), ["orders"], [], False),
        (acl("*"), ["orders"], [], True),  # the wildcard applies (and is then skipped)
        (acl("g1", rt=GROUP), ["g1"], [], False),  # a group ACL needs a group of that name
        (acl("g1", rt=GROUP), [], ["g1"], True),
        (acl("orders", rt=5), ["orders"], ["orders"], False),  # a transactional id: never
    ],
)
def test_scope(a: Acl, topics: list[str], groups: list[str], expected: bool) -> None:
    assert in_scope(a, topics, groups) is expected


POLICY = AclPolicy()


@pytest.mark.parametrize(
    ("source", "policy", "read_only", "wanted", "skipped"),
    [
        # Reads and denies on the mirrored topic follow; another topic's do not.
        (
            [acl(), acl(who="User:x", perm=DENY), acl("other")],
            POLICY,
            False,
            [acl(), acl(who="User:x", perm=DENY)],
            [],
        ),
        # A wildcard resource is never copied: it would apply to local-only topics.
        ([acl("*")], POLICY, False, [], ["wildcard"]),
        # Principal filters and mapping.
        (
            [acl(who="User:app"), acl(who="User:admin"), acl(who="User:ops")],
            AclPolicy(
                principals=("User:a*", "User:ops"),
                exclude=("User:admin",),
                mapping=(("User:app", "User:app-dr"),),
            ),
            False,
            [acl(who="User:app-dr"), acl(who="User:ops")],
            ["not selected"],
        ),
        # Writes follow a writable mirror...
        ([acl(op=WRITE)], POLICY, False, [acl(op=WRITE)], []),
        # ...and are withheld from a read-only one; ALL becomes the reads it includes.
        ([acl(op=WRITE), acl(op=DELETE)], POLICY, True, [], ["withheld", "withheld"]),
        (
            [acl(op=ALL, pattern=PREFIXED, name="ord")],
            POLICY,
            True,
            [acl(op=o, pattern=PREFIXED, name="ord") for o in (READ, DESCRIBE, DESCRIBE_CONFIGS)],
            ["withheld"],
        ),
        # A DENY for every principal would deny partsync too: never copied.
        ([acl(who="User:*", perm=DENY)], POLICY, False, [], ["every principal"]),
        # A DENY WRITE only narrows: copied under --read-only too.
        ([acl(op=WRITE, perm=DENY)], POLICY, True, [acl(op=WRITE, perm=DENY)], []),
        # Group ACLs are not topic writes.
        ([acl("g", rt=GROUP, op=ALL)], POLICY, True, [acl("g", rt=GROUP, op=ALL)], []),
    ],
)
def test_mirror_acls(
    source: list[Acl],
    policy: AclPolicy,
    read_only: bool,
    wanted: list[Acl],
    skipped: list[str],
) -> None:
    got, left = mirror_acls(source, ["orders"], ["g"], policy, read_only=read_only)
    assert got == frozenset(wanted)
    assert len(left) == len(skipped)
    for s, why in zip(left, skipped, strict=True):
        assert why in s.why


A, B, C, D = acl(who="User:a"), acl(who="User:b"), acl(who="User:c"), acl(who="User:d")
ELSEWHERE = acl("elsewhere", who="User:e")


@pytest.mark.parametrize(
    ("wanted", "local", "recorded", "create", "delete", "forget", "foreign"),
    [
        # New on the source: created (and recorded by the caller).
        ({A}, set(), set(), {A}, set(), set(), set()),
        # Present and ours: nothing to do.
        ({A}, {A}, {A}, set(), set(), set(), set()),
        # Present but an operator's: left alone, never recorded.
        ({A}, {A}, set(), set(), set(), set(), {A}),
        # Ours, gone from the source: deleted. An operator's gone from the source: kept.
        (set(), {A, B}, {A}, set(), {A}, set(), set()),
        # Ours, deleted by someone meanwhile: forgotten. Ours, deleted, wanted again: created.
        ({C}, set(), {B, C}, {C}, set(), {B}, set()),
        # Another job's recorded ACL (a topic this run does not mirror) is not judged here.
        (set(), {ELSEWHERE}, {ELSEWHERE}, set(), set(), set(), set()),
        ({D}, {D}, {D, ELSEWHERE}, set(), set(), set(), set()),
    ],
)
def test_acl_changes(
    wanted: set[Acl],
    local: set[Acl],
    recorded: set[Acl],
    create: set[Acl],
    delete: set[Acl],
    forget: set[Acl],
    foreign: set[Acl],
) -> None:
    ch = acl_changes(frozenset(wanted), frozenset(local), frozenset(recorded), ["orders"], [])
    assert (ch.create, ch.delete, ch.forget, ch.foreign) == (create, delete, forget, foreign)
    assert bool(ch) == bool(create or delete or forget)


@pytest.mark.parametrize(
    ("local", "writers"),
    [
        ([acl(op=READ)], []),
        ([acl(op=WRITE, who="User:partsync")], []),
        ([acl(op=WRITE)], ["User:app"]),
        ([acl(op=ALL, pattern=PREFIXED, name="or")], ["User:app"]),
        ([acl(op=WRITE, who="User:*", name="*")], ["User:*"]),  # matches everyone
        ([acl(op=DELETE)], ["User:app"]),  # DeleteRecords would change the mirror too
        ([acl(op=11)], ["User:app"]),  # ALTER_CONFIGS: e.g. compaction turned on
        ([acl(op=WRITE, perm=DENY)], []),
        ([acl(op=WRITE, name="other")], []),
    ],
)
def test_other_writers(local: list[Acl], writers: list[str]) -> None:
    assert [a.principal for a in other_writers(local, "orders", "User:partsync")] == writers


@pytest.mark.parametrize(
    "a",
    [acl(), acl("a group with spaces", who="User:CN=x, O=y", rt=GROUP, pattern=PREFIXED)],
)
def test_record_key_round_trips(a: Acl) -> None:
    assert Acl.from_record_key(a.record_key()) == a


@pytest.mark.parametrize("key", ["", "[1,2]", '{"a": 1}', "not json"])
def test_a_foreign_record_key_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="not an ACL record key"):
        Acl.from_record_key(key)


def test_describe_names_every_field() -> None:
    assert acl(pattern=PREFIXED, op=WRITE, perm=DENY).describe() == (
        "TOPIC:PREFIXED:orders User:app@* WRITE DENY"
    )


# A client's batch of two records, key "k" value "v" and key "x" (a tombstone), CreateTime
# 1000: byte for byte what kafka-python's DefaultRecordBatchBuilder writes for them.
GOLDEN = bytes.fromhex(
    "0000000000000000000000420000000002c1cf032200000000000100000000000003e800000000000003e8"
    "ffffffffffffffffffffffffffff0000000210000000026b0276000e00000202780100"
)


def test_keyed_batch_golden_bytes() -> None:
    raw = keyed_batch([(b"k", b"v"), (b"x", None)], 1000)
    assert raw == GOLDEN
    b = Batch.parse(memoryview(raw))
    assert b.crc_ok() and (b.producer_id, b.record_count) == (-1, 2)
    assert [(r.key, r.value) for r in decode_records(b)] == [(b"k", b"v"), (b"x", None)]


def test_keyed_batch_needs_a_record() -> None:
    with pytest.raises(ValueError):
        keyed_batch([], 1)


W = acl(op=WRITE)


@pytest.mark.parametrize(
    ("wanted", "withheld", "local", "recorded", "recorded_withheld", "withhold", "release"),
    [
        # Withheld for the first time: recorded as such, for a failover to grant.
        (set(), {W}, set(), set(), set(), {W}, set()),
        # Recorded already: nothing to write.
        (set(), {W}, set(), set(), {W}, set(), set()),
        # An operator granted it already: nothing to keep back, nothing recorded.
        (set(), {W}, {W}, set(), set(), set(), set()),
        # The source dropped the grant: the withheld record goes.
        (set(), set(), set(), set(), {W}, set(), {W}),
        # --read-only turned off: created (and recorded as created, the same key), not released.
        ({W}, set(), set(), set(), {W}, set(), set()),
        # Created before --read-only, withheld now: deleted and recorded as withheld at once.
        (set(), {W}, {W}, {W}, set(), {W}, set()),
        # Another job's withheld record is not this job's to judge.
        (set(), set(), set(), set(), {ELSEWHERE}, set(), set()),
    ],
)
def test_withheld_acls_are_recorded_and_released(
    wanted: set[Acl],
    withheld: set[Acl],
    local: set[Acl],
    recorded: set[Acl],
    recorded_withheld: set[Acl],
    withhold: set[Acl],
    release: set[Acl],
) -> None:
    ch = acl_changes(
        frozenset(wanted),
        frozenset(local),
        frozenset(recorded),
        ["orders"],
        [],
        frozenset(withheld),
        frozenset(recorded_withheld),
    )
    assert (ch.withhold, ch.release) == (withhold, release)


def test_a_withheld_grant_is_named_as_its_local_acl() -> None:
    _wanted, skipped = mirror_acls(
        [acl(op=WRITE, who="User:app")],
        ["orders"],
        [],
        AclPolicy(mapping=(("User:app", "User:app-dr"),)),
        read_only=True,
    )
    assert [s.withheld for s in skipped] == [acl(op=WRITE, who="User:app-dr")]
