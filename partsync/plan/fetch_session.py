"""Incremental fetch sessions (KIP-227), the client's side: what each Fetch must carry.

A follower's tails long-poll every waiting partition's leader. Without a session each Fetch
names every partition and each answer lists them all, so an idle follower of 10,000
partitions would encode and decode 10,000 entries twice a second. With a session the broker
remembers the partitions and their fetch offsets: a request names only what changed (a
partition added or at a new offset, ``forgotten`` ones removed) and an answer only the
partitions with something new (records, a moved high watermark or log start, an error).

Kafka's rules (``FetchSession.scala``, ``FetchMetadata``):

- epoch 0 with session id 0 asks for a new session: a full request; the answer's session id is
  the new session's, or 0 where the broker has no slot for it
  (``max.incremental.fetch.session.cache.slots``, 1000 per broker, shared by every client);
- then epochs 1, 2, ... (after 2^31-1 comes 1 again), one per request, each incremental;
- epoch -1 (final) with session id 0: a full request without a session;
- FETCH_SESSION_ID_NOT_FOUND (the session was evicted) or INVALID_FETCH_SESSION_EPOCH: the
  session is gone; start again with a full request.

A partition left in a session is fetched on every request, from the offset last sent: one
whose data was seen must be forgotten (or sent at its new offset), or a ``min_bytes=1`` poll
answers at once with the same bytes. Pure: no I/O, table-tested.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "FETCH_SESSION_ID_NOT_FOUND",
    "INVALID_FETCH_SESSION_EPOCH",
    "FetchSession",
    "SessionRequest",
]

TopicPartition = tuple[str, int]

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
_FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1
# Where a broker declined a session (no slot), full requests without one; a new session is
# asked for again after this many of them.
RETRY_SESSION_AFTER = 100


@dataclass(frozen=True)
class SessionRequest:
    session_id: int
    epoch: int
    fetch: dict[TopicPartition, int]  # partitions to (re)send, at their fetch offsets
    forgotten: tuple[TopicPartition, ...]

    @property
    def full(self) -> bool:
        return self.epoch in (0, _FINAL_EPOCH)


@dataclass
class FetchSession:
    """One connection's fetch session with one broker (one per connection: a session id is
    the broker's, and a new connection may reach another broker behind the same address)."""

    session_id: int = 0
    epoch: int = 0  # the next request's epoch: 0 asks for a new session
    sent: dict[TopicPartition, int] = field(default_factory=dict)  # what the broker holds
    full_without_session: int = 0  # full requests since a broker declined a session

    def request(self, wanted: Mapping[TopicPartition, int]) -> SessionRequest:
        """The next request for ``wanted`` (partition -> fetch offset)."""
        if self.session_id == 0:
            ask = self.epoch == 0 or self.full_without_session >= RETRY_SESSION_AFTER
            return SessionRequest(0, 0 if ask else _FINAL_EPOCH, dict(wanted), ())
        changed = {tp: o for tp, o in wanted.items() if self.sent.get(tp) != o}
        forgotten = tuple(tp for tp in self.sent if tp not in wanted)
        return SessionRequest(self.session_id, self.epoch, changed, forgotten)

    def answered(self, req: SessionRequest, error: int, session_id: int) -> None:
        """The broker answered ``req`` with a top-level ``error`` and ``session_id``. Any
        top-level error ends the session (the two session errors say it is gone; after another
        the broker's state is not known): the next request is a full one."""
        if error:
            self.reset()
            return
        if req.session_id == 0:
            self.sent = dict(req.fetch)
            if req.epoch == 0 and session_id != 0:
                self.session_id, self.epoch, self.full_without_session = session_id, 1, 0
            else:  # declined (or not asked): full requests, and a new ask now and then
                self.session_id = 0
                self.full_without_session = 0 if req.epoch == 0 else self.full_without_session + 1
                self.epoch = _FINAL_EPOCH
            return
        for tp in req.forgotten:
            self.sent.pop(tp, None)
        self.sent.update(req.fetch)
        self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1

    def lost(self) -> None:
        """The request's answer never came (the connection failed): the broker may or may
        not have applied it, so the session cannot go on."""
        self.reset()

    def reset(self) -> None:
        self.session_id, self.epoch, self.sent, self.full_without_session = 0, 0, {}, 0
