"""``call``, ``call_raw`` and ``call_many`` for many threads sharing one pipelined connection
(a mixin of ``BrokerConnection``): every caller's request is sent at once, and whichever caller
is reading hands each response to its caller, so no thread waits on a round trip it did not
start."""

import collections
import threading
from typing import TYPE_CHECKING, Any

from partsync._kafka.framed_socket import Answer, Decoder, Pending
from partsync.errors import ClusterError

__all__ = ["SharedCalls"]


class SharedCalls:
    """One-off requests over ``FramedSocket``'s ``send`` and pending queue. A connection is used
    either with ``call()`` or with ``send()``/``receive()``, never both at once."""

    host: str
    port: int
    cluster: str
    _pending: collections.deque[Pending]
    _recv_lock: threading.Lock

    if TYPE_CHECKING:

        def send(self, api: str, request: Any, _answer: Answer | None = None) -> None: ...

        def _read_response(self, pending: Pending) -> Any: ...

        def _read_raw(self, pending: Pending) -> tuple[bytes, int]: ...

        def close(self) -> None: ...

    def __init__(self) -> None:
        # Who reads the next response; waiting callers are woken after each one.
        self._handoff = threading.Condition()
        self._reading = False

    def call(self, api: str, request: Any) -> Any:
        """Send ``request`` and return its response. Other threads' calls may be in flight on
        the connection at the same time: one caller at a time reads the next response and
        hands it to its caller, who returns at once."""
        mine = Answer()
        self.send(api, request, mine)
        return self._wait(mine)

    def call_raw(self, api: str, request: Any, decode: Decoder) -> Any:
        """``call``, its response decoded by ``decode(body, version, offset after the
        header)`` (``raw``'s decoders: nothing copied out of the body) instead of by
        kafka-python; a response that does not decode fails as in ``call``."""
        mine = Answer(decode)
        self.send(api, request, mine)
        return self._wait(mine)

    def call_many(self, api: str, requests: list[Any]) -> list[Any]:
        """Send all ``requests`` at once (the broker works through them one after another,
        with no round trip between them) and return each one's response, or the
        ``ClusterError`` that ended the connection before it came (a failed send fails the
        rest, unsent). Other threads' calls may share the connection meanwhile, as with
        ``call``."""
        answers: list[Answer] = []
        failed: ClusterError | None = None
        for request in requests:
            mine = Answer()
            try:
                self.send(api, request, mine)
            except ClusterError as e:
                failed = e
                break
            answers.append(mine)
        out: list[Any] = []
        for mine in answers:
            try:
                out.append(self._wait(mine))
            except ClusterError as e:
                out.append(e)
        assert failed is not None or len(out) == len(requests)
        return out + [failed] * (len(requests) - len(out))

    def _wait(self, mine: Answer) -> Any:
        """``mine``'s response, read by this thread or by another caller reading meanwhile."""
        while True:
            with self._handoff:
                while self._reading and not mine.done:
                    self._handoff.wait()
                if mine.done:
                    break
                self._reading = True
            try:
                with self._recv_lock:
                    self._answer_next()
            finally:
                with self._handoff:
                    self._reading = False
                    self._handoff.notify_all()
        if mine.error is not None:
            raise mine.error
        return mine.response

    def _answer_next(self) -> None:
        """Read the next response into its caller's answer (the caller holds the reading side).
        Whatever goes wrong, that answer is given an error: its caller must never wait on."""
        pending = self._pending.popleft()
        answer = pending.answer
        if answer is None:
            self.close()
            raise RuntimeError("call() on a connection used for receive()")
        try:
            if answer.decode is None:
                answer.response = self._read_response(pending)
            else:
                body, at = self._read_raw(pending)
                answer.response = answer.decode(body, pending.version, at)
        except ClusterError as e:  # the connection is closed: every later call fails too
            answer.error = e
        except BaseException as e:
            self.close()  # an answer that does not decode, or an interrupted read
            err = ClusterError(
                f"reading {pending.api} response from broker {self.host}:{self.port} failed: {e!r}",
                cluster=self.cluster,
            )
            err.retriable = False  # a response partsync cannot read is not a broker hiccup
            answer.error = err
            if not isinstance(e, Exception):
                raise
        finally:
            answer.done = True
