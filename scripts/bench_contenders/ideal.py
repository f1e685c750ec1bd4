"""Ideal raw producer: the ceiling partsync is judged against.

Fetches the source's raw batches and appends them to the destination as fast as Kafka's client
rules allow, with nothing else: no plan, no agreement or boundary checks, no CRC check of the
fetched batches, no base-offset verification of the appends. What it still does is what the
broker needs (Kafka's ProducerStateManager and UnifiedLog rules): baseOffset 0, the writer's own idempotent producer id/epoch and
per-partition sequence, a valid CRC (``rewrite_parts``), at most one batch per partition
per Produce request, acks=all.

``--option one_in_flight=1`` keeps at most one batch per partition in flight, as partsync
does (an append is verified before the next is sent): the ceiling under partsync's own rule.

``--option fenced=1`` gives each partition partsync's identity instead of one shared producer
id: a transactional id of its own, initialised before the copy (all asked at once, on the
destination, which must be a single-node cluster: its transaction coordinator), as partsync
fences each partition it writes. The difference to the plain ideal is what that identity
costs the broker and the start; partsync cannot do without it (docs/how-it-works.md, fencing).

Pipelining: partitions are spread over ``lanes`` (option, default 4), each with its own source
and destination connection. In a lane a fetcher thread asks for every partition with buffer
room in one Fetch request; a producer thread packs the head batch of many partitions into each
Produce request and keeps up to 5 requests in flight (the idempotence window), and a receiver
thread reads the answers and checks only their error codes.
"""

from __future__ import annotations

import collections
import os
import queue
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Job, host_port, parse_args, report

from partsync._kafka import Connection, error_name
from partsync._kafka.raw import Buffer, Parts
from partsync.wire.batch import Rewritten, iter_batches, rewrite_parts

IN_FLIGHT = 5  # Produce requests in flight: the broker dedupes over the last 5 per partition
_END = object()


class IdealCopy:
    """One lane: a set of partitions with its own source and destination connection."""

    def __init__(self, job: Job, parts: list[int], producers: dict[int, tuple[int, int]]) -> None:
        self.job = job
        self.partition_fetch_bytes = job.options.get("partition_fetch_bytes", 4 << 20)
        self.fetch_max_bytes = job.options.get("fetch_max_bytes", 64 << 20)
        self.partition_buffer = job.options.get("partition_buffer_bytes", 8 << 20)
        self.request_max_bytes = job.options.get("request_max_bytes", 32 << 20)
        self.src = Connection(*host_port(job.source), cluster="source", client_id="bench-ideal")
        self.dst = Connection(*host_port(job.dest), cluster="dest", client_id="bench-ideal")
        self.producers = producers  # partition -> (producer id, epoch)
        self.parts = parts
        self.queues: dict[int, collections.deque[Rewritten]] = {
            p: collections.deque() for p in self.parts
        }
        self.buffered = dict.fromkeys(self.parts, 0)
        self.one_in_flight = bool(job.options.get("one_in_flight", 0))
        self.busy: set[int] = set()  # partitions with an unanswered batch (one_in_flight)
        self.cv = threading.Condition()
        self.fetch_done = False
        self.error: BaseException | None = None
        self.records = 0
        self.batches = 0

    def fail(self, e: BaseException) -> None:
        with self.cv:
            if self.error is None:
                self.error = e
            self.cv.notify_all()

    # -- fetching -------------------------------------------------------------------------

    def fetch_loop(self) -> None:
        try:
            ends = self.job.ends
            offsets = dict.fromkeys(self.parts, 0)
            sequence = dict.fromkeys(self.parts, 0)
            active = set(self.parts)
            while active:
                with self.cv:
                    while self.error is None and not any(
                        self.buffered[p] < self.partition_buffer for p in active
                    ):
                        self.cv.wait()
                    if self.error is not None:
                        return
                    wanted = [
                        (p, offsets[p], self.partition_fetch_bytes)
                        for p in sorted(active)
                        if self.buffered[p] < self.partition_buffer
                    ]
                # send + receive: the records come back as views of the response, not copies.
                self.src.send_fetch(
                    self.job.topic,
                    wanted,
                    max_wait_ms=500,
                    min_bytes=1,
                    max_bytes=self.fetch_max_bytes,
                )
                fetched = self.src.receive_fetch()
                ready: dict[int, list[Rewritten]] = {}
                for p, f in fetched.items():
                    if f.error_code:
                        raise RuntimeError(f"fetch {p}@{offsets[p]}: {error_name(f.error_code)}")
                    out = ready.setdefault(p, [])
                    for b in iter_batches(f.records, start=offsets[p]):
                        if b.base_offset >= ends[p]:
                            break
                        out.append(rewrite_parts(b, *self.producers[p], sequence[p]))
                        sequence[p] = (sequence[p] + b.record_count) & 0x7FFFFFFF
                        offsets[p] = b.next_offset
                        self.records += b.record_count
                        self.batches += 1
                    if offsets[p] >= ends[p]:
                        active.discard(p)
                with self.cv:
                    for p, batches in ready.items():
                        self.queues[p].extend(batches)
                        self.buffered[p] += sum(len(b) for b in batches)
                    self.cv.notify_all()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            self.fail(e)
        finally:
            with self.cv:
                self.fetch_done = True
                self.cv.notify_all()

    # -- producing ------------------------------------------------------------------------

    def receive_loop(self, inflight: queue.Queue[object], slots: threading.Semaphore) -> None:
        try:
            while True:
                item = inflight.get()
                if item is _END:
                    return
                res = self.dst.receive_produce()
                slots.release()
                if self.one_in_flight:
                    with self.cv:
                        self.busy.difference_update(item)  # type: ignore[arg-type]
                        self.cv.notify_all()
                for p in item:  # type: ignore[attr-defined]
                    r = res.get(p)
                    if r is None or r.error_code:
                        code = r.error_code if r else -1
                        raise RuntimeError(f"produce to partition {p}: {error_name(code)}")
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            self.fail(e)
            slots.release()

    def run(self) -> None:
        fetcher = threading.Thread(target=self.fetch_loop, name="fetch", daemon=True)
        inflight: queue.Queue[object] = queue.Queue()
        slots = threading.Semaphore(IN_FLIGHT)
        receiver = threading.Thread(
            target=self.receive_loop, args=(inflight, slots), name="receive", daemon=True
        )
        fetcher.start()
        receiver.start()
        turn = 0
        n = len(self.parts)
        try:
            while True:
                request: dict[int, Buffer | Parts] = {}
                size = 0
                with self.cv:
                    while (
                        self.error is None
                        and not (self.fetch_done and not any(self.queues.values()))
                        and not any(q and p not in self.busy for p, q in self.queues.items())
                    ):
                        self.cv.wait()
                    if self.error is not None:
                        break
                    if self.fetch_done and not any(self.queues.values()):
                        break
                    # The head batch of as many partitions as fit, starting at a rotating one.
                    for i in range(n):
                        p = self.parts[(turn + i) % n]
                        q = self.queues[p]
                        if p in self.busy:
                            continue
                        if q and (not request or size + len(q[0]) <= self.request_max_bytes):
                            data = q.popleft()
                            request[p] = data
                            size += len(data)
                            self.buffered[p] -= len(data)
                            if self.one_in_flight:
                                self.busy.add(p)
                    turn += 1
                    self.cv.notify_all()
                slots.acquire()
                if self.error is not None:
                    break
                self.dst.send_produce(self.job.topic, request, acks=-1)
                inflight.put(list(request))
        finally:
            inflight.put(_END)
            receiver.join()
            fetcher.join(timeout=5)
        if self.error is not None:
            raise self.error

    def run_safe(self) -> None:
        try:
            self.run()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            self.fail(e)
        finally:
            self.src.close()
            self.dst.close()


def _fenced_ids(conn: Connection, parts: list[int]) -> dict[int, tuple[int, int]]:
    """A transactional id per partition, initialised (all requests sent before the first
    answer is read), as partsync fences each partition it writes."""
    ids = [f"bench-ideal-{os.getpid()}-{p}" for p in parts]
    out: dict[int, tuple[int, int]] = {}
    for p, answer in zip(parts, conn.try_init_producer_ids(ids), strict=True):
        if not isinstance(answer, tuple) or answer[0]:
            code = answer[0] if isinstance(answer, tuple) else answer
            raise RuntimeError(
                f"InitProducerId for partition {p}: {code} (fenced=1 needs a "
                "single-node destination, its transaction coordinator)"
            )
        out[p] = (answer[1], answer[2])
    return out


def main() -> None:
    job = parse_args(__doc__.splitlines()[0])
    parts = sorted(p for p, end in job.ends.items() if end > 0)
    n_lanes = max(1, min(job.options.get("lanes", 4), len(parts)))
    with Connection(*host_port(job.dest), cluster="dest", client_id="bench-ideal") as conn:
        if job.options.get("fenced", 0):
            producers = _fenced_ids(conn, parts)
        else:
            shared = conn.init_producer_id()  # sequences are per partition: lanes share the id
            producers = dict.fromkeys(parts, shared)
    lanes = [IdealCopy(job, parts[i::n_lanes], producers) for i in range(n_lanes)]
    threads = [
        threading.Thread(target=lane.run_safe, name=f"lane-{i}") for i, lane in enumerate(lanes)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for lane in lanes:
        if lane.error is not None:
            raise lane.error
    report(sum(lane.records for lane in lanes), sum(lane.batches for lane in lanes), lanes=n_lanes)


if __name__ == "__main__":
    main()
