"""A promoted mirror (``partsync promote``, failover): the record that makes the promotion
durable for every later partsync run, and the failover point it keeps per partition. Pure.

Once a topic is promoted on a cluster it is a primary: producers write it, so nothing may be
mirrored into it any more (an append at "the source's offset" would now land after, or among,
the new primary's own records). Kafka's producer-epoch fencing cannot say so: a cron run or a
Spark task starts a new epoch of its own, and fencing covers only appends, not the decision to
copy. So every run reads the promotion record before it writes and refuses a promoted topic.

The failover point per partition: the local log end at promotion (where the new primary's own
records begin), each source's end where it answered, and for a source that did not answer, its
end as a follower last saw it: what it held beyond the mirror then is at risk (it may reach
the new primary only by a failback's export). Records of source transactions the mirror had
replayed but not ended are aborted at promotion (their outcome is unknown) and counted too.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "PROMOTIONS_TOPIC",
    "SOURCE_ENDS_TOPIC",
    "FailoverPoint",
    "Promotion",
    "at_risk",
]

# Compacted topics on the local (promoted) cluster: key = topic.
PROMOTIONS_TOPIC = "partsync.promotions"
SOURCE_ENDS_TOPIC = "partsync.source-ends"


def at_risk(
    local_end: int,
    answered: Mapping[str, int],
    last_seen: Mapping[str, int],
    unseen: int = 0,
) -> int | None:
    """Offsets some source held beyond the mirror: the most any source that answered holds
    beyond ``local_end`` now, or, for one that did not, held when a follower last saw it
    (``last_seen``). None (unknown) when ``unseen`` sources did not answer and never had an
    end recorded."""
    if unseen:
        return None
    ends = [*answered.values(), *last_seen.values()]
    return max((max(0, e - local_end) for e in ends), default=0)


@dataclass(frozen=True)
class FailoverPoint:
    partition: int
    local_end: int
    # Each source's end at promotion; None for a source that did not answer.
    sources: Mapping[str, int | None] = field(default_factory=dict)
    # For sources that did not answer: their end as last recorded while mirroring.
    last_seen: Mapping[str, int] = field(default_factory=dict)
    at_risk: int | None = 0
    # Records of replayed source transactions left open, aborted at promotion.
    aborted: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "partition": self.partition,
            "local_end": self.local_end,
            "sources": dict(self.sources),
            "last_seen": dict(self.last_seen),
            "at_risk": self.at_risk,
            "aborted": self.aborted,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> FailoverPoint:
        sources = d.get("sources") or {}
        seen = d.get("last_seen") or {}
        risk = d.get("at_risk")
        assert isinstance(sources, dict) and isinstance(seen, dict)
        return cls(
            int(str(d["partition"])),
            int(str(d["local_end"])),
            {str(k): None if v is None else int(v) for k, v in sources.items()},
            {str(k): int(v) for k, v in seen.items()},
            None if risk is None else int(str(risk)),
            int(str(d.get("aborted", 0))),
        )


@dataclass(frozen=True)
class Promotion:
    """A topic promoted on ``cluster`` at ``at_ms`` (by the job ``job``)."""

    topic: str
    cluster: str
    at_ms: int
    job: str | None = None
    partitions: tuple[FailoverPoint, ...] = ()

    @property
    def at_risk(self) -> int | None:
        risks = [p.at_risk for p in self.partitions]
        return None if any(r is None for r in risks) else sum(r or 0 for r in risks)

    def refusal(self) -> str:
        when = datetime.datetime.fromtimestamp(self.at_ms / 1000, tz=datetime.UTC)
        return (
            f"topic {self.topic} was promoted on {self.cluster} at "
            f"{when.isoformat(timespec='seconds').replace('+00:00', 'Z')} (partsync promote): "
            "it is a primary now, and nothing more is mirrored into it; make the old primary its "
            f"mirror instead (failback), or delete the promotion record (topic {PROMOTIONS_TOPIC}, "
            "key = the topic) to mirror into it again"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "cluster": self.cluster,
            "promoted_ms": self.at_ms,
            "job": self.job,
            "at_risk": self.at_risk,
            "partitions": [p.to_dict() for p in self.partitions],
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Promotion:
        """Raises ValueError for a value ``to_json`` did not write."""
        try:
            d = json.loads(data)
            parts = tuple(FailoverPoint.from_dict(p) for p in d.get("partitions", ()))
            job = d.get("job")
            return cls(
                str(d["topic"]),
                str(d["cluster"]),
                int(d["promoted_ms"]),
                None if job is None else str(job),
                parts,
            )
        except (KeyError, TypeError, ValueError, AssertionError, AttributeError) as e:
            raise ValueError(f"not a promotion record: {e}") from e
