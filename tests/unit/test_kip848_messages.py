"""KIP-848's messages, built by kafka-python's loader from the specs partsync vendors
(``partsync/_kafka/schemas``): golden bytes written out field by field from Kafka's wire format
(flexible version 0: compact strings and arrays, tagged-field sections)."""

from __future__ import annotations

import uuid

from partsync._kafka.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

TOPIC_ID = uuid.UUID("7c7fa1d0-8dbf-48f5-8c3a-976a1bc34a57")


def test_a_join_heartbeat_encodes_as_kafka_reads_it() -> None:
    req = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id="",
        member_epoch=0,
        rebalance_timeout_ms=1000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )
    req.API_VERSION = 0
    assert ConsumerGroupHeartbeatRequest.API_KEY == 68
    assert bytes(req.encode(header=False)) == (
        b"\x02g"  # group id "g" (compact: length + 1)
        b"\x01"  # member id "" (the coordinator assigns one)
        b"\x00\x00\x00\x00"  # member epoch 0: join
        b"\x00"  # instance id null
        b"\x00"  # rack id null
        b"\x00\x00\x03\xe8"  # rebalance timeout 1000 ms
        b"\x02\x02t"  # subscribed topics ["t"]
        b"\x00"  # server assignor null (the broker's default)
        b"\x01"  # owned partitions: an empty array, not null
        b"\x00"  # no tagged fields
    )


def test_an_assignment_decodes_to_topic_ids_and_partitions() -> None:
    body = (
        b"\x00\x00\x00\x00"  # throttle
        b"\x00\x00"  # error code
        b"\x00"  # error message null
        b"\x03m1"  # member id "m1"
        b"\x00\x00\x00\x07"  # member epoch 7
        b"\x00\x00\x13\x88"  # heartbeat interval 5000 ms
        b"\x01"  # assignment present
        b"\x02" + TOPIC_ID.bytes + b"\x03\x00\x00\x00\x00\x00\x00\x00\x02\x00"  # [0, 2]
        b"\x00"  # assignment's tagged fields
        b"\x00"  # response's tagged fields
    )
    res = ConsumerGroupHeartbeatResponse.decode(body, version=0, header=False)
    assert (res.error_code, res.member_id, res.member_epoch) == (0, "m1", 7)
    assert res.heartbeat_interval_ms == 5000
    [tp] = res.assignment.topic_partitions
    assert (tp.topic_id, list(tp.partitions)) == (TOPIC_ID, [0, 2])


def test_a_heartbeat_without_news_has_no_assignment() -> None:
    body = b"\x00\x00\x00\x00\x00\x00\x00\x03m1\x00\x00\x00\x07\x00\x00\x13\x88\xff\x00"
    res = ConsumerGroupHeartbeatResponse.decode(body, version=0, header=False)
    assert res.assignment is None


def test_describe_names_each_members_current_and_target_partitions() -> None:
    req = ConsumerGroupDescribeRequest(group_ids=["g"], include_authorized_operations=False)
    req.API_VERSION = 0
    assert ConsumerGroupDescribeRequest.API_KEY == 69
    assert bytes(req.encode(header=False)) == b"\x02\x02g\x00\x00"

    def assignment(parts: bytes) -> bytes:
        return b"\x02" + TOPIC_ID.bytes + b"\x02t" + parts + b"\x00" + b"\x00"

    body = (
        b"\x00\x00\x00\x00"  # throttle
        b"\x02"  # one group
        b"\x00\x00\x00\x02g\x07Stable"  # error, message null, id "g", state
        b"\x00\x00\x00\x03\x00\x00\x00\x03\x08uniform"  # group epoch, assignment epoch, assignor
        b"\x02"  # one member
        b"\x03m1\x00\x00\x00\x00\x00\x03"  # id, instance null, rack null, member epoch 3
        b"\x09partsync\x0b/127.0.0.1"  # client id, client host
        b"\x02\x02t\x00"  # subscribed ["t"], regex null
        + assignment(b"\x02\x00\x00\x00\x01")  # current [1]
        + assignment(b"\x03\x00\x00\x00\x01\x00\x00\x00\x03")  # target [1, 3]
        + b"\x00"  # member's tagged fields
        b"\x80\x00\x00\x00"  # authorized operations: not asked
        b"\x00"  # group's tagged fields
        b"\x00"  # response's tagged fields
    )
    res = ConsumerGroupDescribeResponse.decode(body, version=0, header=False)
    [g] = res.groups
    assert (g.error_code, g.group_id, g.group_state) == (0, "g", "Stable")
    [m] = g.members
    assert m.member_id == "m1"
    assert [list(t.partitions) for t in m.assignment.topic_partitions] == [[1]]
    assert [(t.topic_name, list(t.partitions)) for t in m.target_assignment.topic_partitions] == [
        ("t", [1, 3])
    ]
