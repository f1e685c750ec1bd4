"""Who writes which local partition: the group's assignment, pure (no sockets).

partsync processes that sync the same job join one group on the LOCAL cluster. The coordinator
picks a leader among them; the leader runs ``assign()`` over every member's subscription and the
local topics' partitions, and the coordinator hands each member its share. The encodings here
are partsync's own (protocol type ``partsync``), versioned, and JSON so that
``kafka-consumer-groups.sh --describe`` output and broker logs stay readable.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "PROTOCOL",
    "PROTOCOL_TYPE",
    "Subscription",
    "assign",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "grown",
]

PROTOCOL_TYPE = "partsync"
PROTOCOL = "balanced-v1"
_VERSION = 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    # Free-form "host:pid" so operators can tell members apart in group listings.
    client: str = ""
    # Partition counts a member grew its topics to: a changed subscription makes the
    # coordinator rebalance, so the new partitions are handed out (the leader assigns from the
    # local cluster's metadata, not from these).
    partitions: tuple[tuple[str, int], ...] = ()


def grown(sub: Subscription, partitions: Mapping[str, int]) -> Subscription:
    """``sub`` with its topics grown to ``partitions`` (a topic not in it joins it)."""
    counts = dict(sub.partitions)
    counts.update(partitions)
    topics = tuple(sorted(set(sub.topics) | set(partitions)))
    return dataclasses.replace(sub, topics=topics, partitions=tuple(sorted(counts.items())))


def encode_subscription(sub: Subscription) -> bytes:
    d: dict[str, object] = {"v": _VERSION, "topics": sorted(sub.topics), "client": sub.client}
    if sub.partitions:
        d["partitions"] = dict(sorted(sub.partitions))
    return json.dumps(d, separators=(",", ":")).encode()


def decode_subscription(data: bytes) -> Subscription:
    try:
        d = json.loads(data)
        counts = tuple(sorted((str(t), int(n)) for t, n in d.get("partitions", {}).items()))
        return Subscription(tuple(str(t) for t in d["topics"]), str(d.get("client", "")), counts)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"not a partsync group subscription: {data[:80]!r}") from e


def encode_assignment(parts: Sequence[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    return json.dumps(
        {"v": _VERSION, "partitions": {t: sorted(ps) for t, ps in sorted(by_topic.items())}},
        separators=(",", ":"),
    ).encode()


def decode_assignment(data: bytes) -> list[TopicPartition]:
    if not data:
        return []
    try:
        d = json.loads(data)
        return sorted((str(t), int(p)) for t, ps in d["partitions"].items() for p in ps)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"not a partsync group assignment: {data[:80]!r}") from e


def assign(
    members: Mapping[str, Subscription],
    partitions: Mapping[str, int],
) -> dict[str, list[TopicPartition]]:
    """Spread every partition of every subscribed topic over the members subscribed to it.

    ``partitions`` is the local partition count per topic. Each partition goes to the eligible
    member holding the fewest so far (ties by member id), so shares differ by at most one when
    everyone subscribes to the same topics, and the result depends only on the inputs: members
    that compute it see the same answer.
    """
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    order = sorted(members)
    for topic in sorted(partitions):
        eligible = [m for m in order if topic in members[m].topics]
        if not eligible:
            continue
        for p in range(partitions[topic]):
            m = min(eligible, key=lambda x: (len(out[x]), order.index(x)))
            out[m].append((topic, p))
    return out
