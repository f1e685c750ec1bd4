"""Membership in a partsync group on the LOCAL cluster: which process writes which partition.

partsync processes of one job (follow mode, or overlapping cron runs) join one group on the
local cluster's group coordinator. There is no coordination, group or offset traffic with any
source cluster, and no offsets are committed anywhere: the local log end is the position.

Two protocols, one guarantee (a partition is written by one member at a time):
- KIP-848's consumer protocol (``io.group_consumer``) where the local cluster offers it: no
  first-join delay, and partitions move only after their owner released them.
- the classic protocol (``io.group_classic``), which every broker speaks, with partsync's own
  protocol type and eager rebalances.
Ownership is also a lease (``io.group_lease``): a member whose last successful heartbeat is older
than most of the session timeout stops writing on its own. Producer-epoch fencing and the
base-offset check of every append back this up (see docs/how-it-works.md).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence

from partsync._kafka import GROUP_KEY, Connection, ErrorCode, error_name
from partsync.errors import ClusterError, GroupError, PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.group_classic import ClassicSession
from partsync.io.group_consumer import MEMBER_CLIENT_ID, ConsumerSession, FallBackToClassic
from partsync.io.group_lease import GroupListener, Lease, TopicPartition
from partsync.io.group_session import Session
from partsync.plan.assign import Subscription, grown
from partsync.retry import Backoff

__all__ = ["PROTOCOLS", "GroupListener", "GroupMember"]

log = logging.getLogger(__name__)

# --group-protocol: auto picks KIP-848's consumer protocol where the local cluster offers it.
PROTOCOLS = ("auto", "consumer", "classic")

_MIXED = (
    "; members of this group use different group protocols (an older partsync, or a run with "
    "--group-protocol classic): run every member of the job with the same --group-protocol"
)
# What to do about a group error that needs a person.
_HINTS: dict[int, str] = {
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "; grant the partsync principal READ on the group",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: (
        "; another kind of group (e.g. consumers) already uses this name, or" + _MIXED[1:]
    ),
    ErrorCode.GROUP_ID_NOT_FOUND: _MIXED,
    ErrorCode.INVALID_GROUP_ID: "; group ids must not be empty",
    ErrorCode.INVALID_SESSION_TIMEOUT: (
        "; the broker's group.min/max.session.timeout.ms do not allow this session timeout"
    ),
    ErrorCode.GROUP_MAX_SIZE_REACHED: "; the broker's group.consumer.max.size is reached",
}


class GroupMember:
    def __init__(
        self,
        local: Cluster,
        group: str,
        topics: Sequence[str],
        listener: GroupListener,
        *,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        heartbeat_interval_ms: int | None = None,
        join_timeout: float | None = None,
        protocol: str = "auto",
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"group protocol {protocol!r} is not one of {PROTOCOLS}")
        self.local = local
        self.group = group
        self.topics = tuple(topics)
        self.listener = listener
        self.protocol = protocol
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = (
            heartbeat_interval_ms or max(200, session_timeout_ms // 5)
        ) / 1000
        # Give up (GroupError) when no assignment arrives in this long; None: keep trying.
        self.join_timeout = join_timeout
        self.subscription = Subscription(self.topics, f"{socket.gethostname()}:{os.getpid()}")
        self.member_id = ""
        self.generation = -1
        self.rebalances = 0
        self.error: PartsyncError | None = None
        self.joined = threading.Event()  # set once the member holds all it was assigned
        self.stopping = threading.Event()
        self.rejoin = threading.Event()
        # The coordinator also gives a member's partitions away when it takes longer than the
        # rebalance timeout to release those it was asked to: the lease stays below both.
        self.lease = Lease(
            group,
            listener,
            min(session_timeout_ms, rebalance_timeout_ms),
            self.stopping,
            on_lost=self.joined.clear,
        )
        self.coordinator_node: int | None = None
        self._conn: Connection | None = None
        self._session: Session | None = None
        self._thread = threading.Thread(target=self._run, name=f"group-{group}", daemon=True)

    # -- public ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self.lease.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop writing (in-flight appends confirmed), leave the group, return."""
        self.stopping.set()
        conn = self._conn
        if conn is not None and not self.joined.is_set():
            conn.close()  # interrupt a JoinGroup that waits for other members
        self._thread.join(timeout)
        self.lease.join(2)

    def resubscribe(self, partitions: dict[str, int]) -> None:
        """The job's topics grew to ``partitions`` (or a topic joined the job: a follower's
        topic planned at last): make the group hand out the new ones."""
        self.subscription = grown(self.subscription, partitions)
        self.topics = self.subscription.topics
        # Acted on by the session's thread: the classic protocol rejoins with the new
        # subscription (the coordinator rebalances only for a member whose metadata changed);
        # with the consumer protocol the coordinator saw the new partitions itself, and the
        # member hands its assignment to the runner again, which now has tasks for them.
        self.rejoin.set()

    @property
    def protocol_in_use(self) -> str | None:
        return self._session.name if self._session is not None else None

    @property
    def owned(self) -> list[TopicPartition]:
        return self.lease.owned

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- for the protocol sessions --------------------------------------------------------

    def coordinator(self) -> Connection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        code, coord = self.local.find_coordinator(
            self.group, GROUP_KEY, timeout=self.session_timeout_ms / 1000
        )
        if code or coord is None:
            raise self.fatal(code, "finding the group coordinator")
        self.coordinator_node = coord.node_id
        # A connection of its own: JoinGroup blocks until every member rejoined (up to the
        # rebalance timeout), which must not hold up other requests to that broker.
        self._conn = self.local.connect_to(
            coord, timeout=self.rebalance_timeout_ms / 1000 + 10, client_id=MEMBER_CLIENT_ID
        )
        return self._conn

    def close_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def check_join_timeout(self, started: float) -> None:
        if self.join_timeout is not None and time.monotonic() - started > self.join_timeout:
            raise GroupError(
                f"group {self.group!r}: no assignment within {self.join_timeout:g}s (a member "
                "that died may still be registered; rerun, or use --no-group if no other "
                "partsync process writes these topics)",
                cluster=self.local.name,
            )

    def extend_join_timeout(self, seconds: float) -> None:
        """A dead member keeps its partitions for the broker's session timeout: wait longer."""
        if self.join_timeout is not None:
            self.join_timeout = max(self.join_timeout, seconds)

    def fatal(self, code: int, what: str, message: str | None = None) -> GroupError:
        detail = f" ({message})" if message else ""
        return GroupError(
            f"group {self.group!r}: {what} failed: {error_name(code)} ({code}){detail}"
            f"{_HINTS.get(code, '')}",
            cluster=self.local.name,
        )

    # -- the member thread ----------------------------------------------------------------

    def _pick_session(self) -> Session:
        if self.protocol == "classic":
            return ClassicSession(self)
        conn = self.coordinator()
        offered = conn.supports("ConsumerGroupHeartbeat") and conn.supports("ConsumerGroupDescribe")
        if offered:
            return ConsumerSession(self)
        if self.protocol == "consumer":
            raise GroupError(
                f"group {self.group!r}: the local cluster does not offer KIP-848's consumer group "
                "protocol (Kafka 4.0+, or 3.9 with group.coordinator.rebalance.protocols="
                "classic,consumer); use --group-protocol auto or classic",
                cluster=self.local.name,
            )
        return ClassicSession(self)

    def _run(self) -> None:
        backoff = Backoff(0.2, 5.0, cancel=self.stopping)
        try:
            while not self.stopping.is_set():  # not retry_until: a supervisor, to run until stopped
                try:
                    if self._session is None:
                        self._session = self._pick_session()
                        log.debug("group %s: %s protocol", self.group, self._session.name)
                    self._session.run()
                    backoff = Backoff(0.2, 5.0, cancel=self.stopping)
                except FallBackToClassic as e:
                    log.info(
                        "group %s: consumer protocol not served (%s); using classic", self.group, e
                    )
                    self._session = ClassicSession(self)
                except GroupError:
                    raise
                except ClusterError as e:
                    if self.stopping.is_set():
                        break  # stop() closed the connection to end a blocking JoinGroup
                    # The coordinator went away or moved: find it again. Owned partitions keep
                    # their lease until it runs out; the watchdog stops them then.
                    log.warning("group %s: %s; reconnecting", self.group, e)
                    self.close_conn()
                    backoff.wait()
        except PartsyncError as e:
            self.error = e
            log.error("group %s: %s", self.group, e)
        except Exception as e:  # pragma: no cover - a bug; stop writing rather than guess
            log.exception("group member crashed")
            self.error = GroupError(f"group member crashed: {e!r}", cluster=self.local.name)
        finally:
            self.lease.revoke_all(wait=True)
            self._leave()
            self.stopping.set()

    def _leave(self) -> None:
        if not self.member_id or self._session is None:
            return
        try:
            self._session.leave()
        except PartsyncError as e:
            log.warning(
                "group %s: leaving failed (%s); the session timeout will expire us", self.group, e
            )
        finally:
            self.close_conn()
