"""Group and transaction coordinators: finding them (FindCoordinator), remembering the
transactional ids' ones, and the one loop that asks a transactional id's coordinator until it
answers, looking it up again where it moved."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar, cast

from partsync._kafka import (
    COORDINATOR_RETRY_CODES,
    TXN_KEY,
    BrokerInfo,
    Connection,
    ErrorCode,
    broker_error,
)
from partsync.errors import PartsyncError
from partsync.io.coalesce import Coalescer
from partsync.io.connections import Connections
from partsync.retry import Backoff, retry_until

__all__ = ["TXN_RETRY_CODES", "Coordinators"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_Found = tuple[int, BrokerInfo | None]  # (error code, coordinator)

# Answers of a transaction coordinator worth asking again: a coordinator loading, moving or
# not there yet, and an earlier holder's transaction still being completed (its markers are
# being written).
TXN_RETRY_CODES = COORDINATOR_RETRY_CODES | {ErrorCode.CONCURRENT_TRANSACTIONS}


class Coordinators:
    def __init__(self, conns: Connections) -> None:
        self.name = conns.name
        self._conns = conns
        self._lock = threading.Lock()
        # Transactional ids' coordinators as last found (``prefetch_txn_coordinators``, or a
        # lookup): a stale one costs a NOT_COORDINATOR answer and a fresh lookup.
        self.txn_coordinators: dict[str, BrokerInfo] = {}

    def find_coordinator(self, key: str, key_type: int, *, timeout: float = 30.0) -> _Found:
        """(error code, coordinator) of a group or transactional id: ``find_coordinators``
        for one key."""
        return self.find_coordinators([key], key_type, timeout=timeout)[key]

    def find_coordinators(
        self, keys: list[str], key_type: int, *, timeout: float = 30.0
    ) -> dict[str, _Found]:
        """(error code, coordinator) of each group or transactional id. Keys whose coordinator
        is loading, not available yet or moved are asked for again, together, until
        ``timeout``; such a key's last error code comes back when it runs out (any other error
        at once). Threads asking at the same moment share one FindCoordinator (KIP-699)."""
        finder = self._finder(key_type)
        out: dict[str, _Found] = {}
        missing = list(dict.fromkeys(keys))

        def attempt() -> tuple[bool, dict[str, _Found]]:
            nonlocal missing
            out.update(finder.get_many(missing))
            missing = [k for k in missing if out[k][0] in COORDINATOR_RETRY_CODES]
            return not missing, out

        return retry_until(attempt, Backoff(0.1, 1.0, deadline=timeout)) if missing else out

    def _finder(self, key_type: int) -> Coalescer[str, _Found]:
        def ask(keys: list[str]) -> dict[str, _Found]:
            return self._conns.bootstrap_call(lambda c: c.find_coordinators(keys, key_type))

        return self._conns.coalescer(("FindCoordinator", key_type), ask)

    def prefetch_txn_coordinators(self, ids: list[str], *, wait: float = 10.0) -> None:
        """Look up the coordinators of many transactional ids in one request, so that each
        partition's fencing asks its coordinator straight away: a first sync of 1000 small
        partitions otherwise sent a FindCoordinator per partition. Only where the broker takes
        many keys per request (FindCoordinator v4+); a failure only means each partition looks
        its own up, as without this.

        Ids whose coordinator is loading or not available yet are asked again for up to
        ``wait`` seconds: a cluster's first transactional ids create ``__transaction_state``,
        and 1000 partitions each retrying their own lookup meanwhile sent ~900 requests."""
        with self._lock:
            missing = [i for i in dict.fromkeys(ids) if i not in self.txn_coordinators]
        if not missing:
            return
        try:
            batches = self._conns.bootstrap_call(
                lambda c: c.supports("FindCoordinator") and c.version("FindCoordinator") >= 4
            )
            if not batches:
                return
            found = self.find_coordinators(missing, TXN_KEY, timeout=wait)
        except PartsyncError as e:
            log.debug("looking up %d transactional ids' coordinators: %s", len(missing), e)
            return
        with self._lock:
            for key, (code, coord) in found.items():
                if not code and coord is not None:
                    self.txn_coordinators[key] = coord
        if unavailable := sum(1 for code, _c in found.values() if code):
            log.debug("%d transactional ids' coordinators not found within %gs", unavailable, wait)

    def known(self, transactional_id: str) -> BrokerInfo | None:
        """The id's coordinator as last found, if any (no lookup)."""
        with self._lock:
            return self.txn_coordinators.get(transactional_id)

    def txn_coordinator(
        self, transactional_id: str, timeout: float
    ) -> tuple[int, BrokerInfo | None, bool]:
        """(error code, coordinator, whether it came from the cache rather than a lookup)."""
        known = self.known(transactional_id)
        if known is not None:
            return 0, known, True
        code, coord = self.find_coordinator(transactional_id, TXN_KEY, timeout=timeout)
        if not code and coord is not None:
            with self._lock:
                self.txn_coordinators[transactional_id] = coord
        return code, coord, False

    def forget(self, transactional_id: str) -> None:
        """The id's coordinator moved or went away: looked up afresh next time."""
        with self._lock:
            self.txn_coordinators.pop(transactional_id, None)

    def ask_txn(
        self,
        transactional_id: str,
        ask: Callable[[Connection], tuple[int, _T]],
        *,
        what: str,
        backoff: Backoff,
        lane: int = 0,
        repeatable: bool = False,
        forget_on_any_error: bool = False,
        hint: str = "",
    ) -> _T:
        """Ask the coordinator of ``transactional_id`` (``ask`` sends the request and returns
        its error code and answer) until it answers 0, over shared connection ``lane``.

        A coordinator that is loading or moved, and CONCURRENT_TRANSACTIONS, are asked again
        (``TXN_RETRY_CODES``) while ``backoff`` lasts; any other error raises, as a broker
        error about ``what`` (plus ``hint``). A coordinator that moved (a retry code, or any
        error with ``forget_on_any_error``) is looked up again. A broken connection raises at
        once, since the request may have been carried out, unless the request is
        ``repeatable`` and the coordinator was only remembered (restarted, moved): then it is
        looked up afresh and asked again. An error ``ask`` raises (e.g. fenced) goes up the
        same way, its coordinator forgotten."""
        failure: list[PartsyncError] = []  # why the last attempt did not succeed

        def attempt() -> tuple[bool, _T | None]:
            failure.clear()
            code, coord, cached = self.txn_coordinator(transactional_id, backoff.remaining or 0.0)
            if not code and coord is not None:
                try:
                    code, answer = ask(self._conns.broker_conn(coord.node_id, lane))
                except PartsyncError as e:
                    self.forget(transactional_id)
                    if not (repeatable and cached):
                        raise
                    failure.append(e)
                    return False, None
                if not code:
                    return True, answer
                if forget_on_any_error or code in COORDINATOR_RETRY_CODES:
                    self.forget(transactional_id)
            err = broker_error(
                code, f"{what} for transactional id {transactional_id!r}", cluster=self.name
            )
            err.reason += hint
            failure.append(err)
            return code not in TXN_RETRY_CODES, None

        answer = retry_until(attempt, backoff)
        if failure:
            raise failure[0]
        return cast(_T, answer)

    def has_group(self, group: str) -> bool | None:
        """Whether any broker lists ``group`` (ListGroups on each: a group is listed by its
        coordinator while it has members or committed offsets); None where a broker does not
        offer ListGroups or does not answer it."""
        for conn in self._conns.each_broker():
            if not conn.supports("ListGroups"):
                return None
            code, groups = conn.list_groups()
            if code:
                return None
            if group in groups:
                return True
        return False
