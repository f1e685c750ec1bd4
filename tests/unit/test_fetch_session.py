"""KIP-227 fetch sessions, the client's side (``plan.fetch_session``): what each request
carries as partitions come and go, and how a session ends and starts again."""

from __future__ import annotations

from kafka.protocol.consumer.fetch import FetchRequest

from partsync._kafka.fetch_requests import _fetch_request
from partsync.plan.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    RETRY_SESSION_AFTER,
    FetchSession,
)

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def _started(session_id: int = 7) -> FetchSession:
    s = FetchSession()
    req = s.request({A0: 10, A1: 20})
    s.answered(req, 0, session_id)
    return s


def test_the_first_request_is_full_and_asks_for_a_session() -> None:
    s = FetchSession()
    req = s.request({A0: 10, A1: 20})
    assert (req.session_id, req.epoch, req.fetch, req.forgotten, req.full) == (
        0,
        0,
        {A0: 10, A1: 20},
        (),
        True,
    )
    s.answered(req, 0, 7)
    assert (s.session_id, s.epoch, s.sent) == (7, 1, {A0: 10, A1: 20})


def test_an_idle_poll_names_no_partition() -> None:
    s = _started()
    for epoch in (1, 2, 3):
        req = s.request({A0: 10, A1: 20})
        assert (req.session_id, req.epoch, req.fetch, req.forgotten, req.full) == (
            7,
            epoch,
            {},
            (),
            False,
        )
        s.answered(req, 0, 7)


def test_only_changes_are_sent_and_partitions_that_left_are_forgotten() -> None:
    s = _started()
    # A0 rang (its round runs: not waiting), A1 waits further on, B0 is new.
    req = s.request({A1: 25, B0: 0})
    assert (req.fetch, req.forgotten) == ({A1: 25, B0: 0}, (A0,))
    s.answered(req, 0, 7)
    assert s.sent == {A1: 25, B0: 0}
    # A0 parks again at its new offset: sent again, nothing forgotten.
    req = s.request({A0: 11, A1: 25, B0: 0})
    assert (req.fetch, req.forgotten, req.epoch) == ({A0: 11}, (), 2)


def test_an_evicted_session_starts_again_with_a_full_request() -> None:
    for code in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
        s = _started()
        req = s.request({A0: 10})
        s.answered(req, code, 0)
        req = s.request({A0: 10, A1: 20})
        assert (req.session_id, req.epoch, req.fetch) == (0, 0, {A0: 10, A1: 20})
        s.answered(req, 0, 9)
        assert (s.session_id, s.epoch) == (9, 1)


def test_any_other_error_or_a_lost_answer_also_ends_the_session() -> None:
    s = _started()
    s.answered(s.request({A0: 10}), 35, 0)  # e.g. UNSUPPORTED_VERSION
    assert (s.session_id, s.epoch, s.sent) == (0, 0, {})
    s = _started()
    s.request({A0: 10})
    s.lost()
    assert s.request({A0: 10}).full


def test_a_declined_session_means_full_requests_and_a_new_ask_now_and_then() -> None:
    """A broker with no free session slot (or Fetch < v7) answers session id 0: every request
    is then a full one without a session (epoch -1), and a session is asked for again later."""
    s = FetchSession()
    s.answered(s.request({A0: 10}), 0, 0)
    epochs = []
    for _ in range(RETRY_SESSION_AFTER + 1):
        req = s.request({A0: 10})
        assert req.full and req.session_id == 0 and req.fetch == {A0: 10}
        epochs.append(req.epoch)
        s.answered(req, 0, 0)
    assert epochs == [-1] * RETRY_SESSION_AFTER + [0]


def test_the_epoch_wraps_to_one() -> None:
    s = _started()
    s.epoch = 2**31 - 1
    s.answered(s.request({A0: 10, A1: 20}), 0, 7)
    assert s.epoch == 1


def test_the_request_carries_the_session_and_the_forgotten_partitions() -> None:
    """As Kafka decodes it (v11): session id and epoch, and the forgotten partitions."""
    req = _fetch_request(
        {"a": [(1, 25, 1024)]},
        500,
        1,
        1 << 20,
        session_id=7,
        session_epoch=3,
        forgotten={"a": [0]},
    )
    back = FetchRequest.decode(req.encode(version=11), version=11)
    assert (back.session_id, back.session_epoch) == (7, 3)
    assert [(t.topic, t.partitions) for t in back.forgotten_topics_data] == [("a", [0])]
    assert [(p.partition, p.fetch_offset) for p in back.topics[0].partitions] == [(1, 25)]
