"""The start gate's watchdog: only a batch with jobs that could wait for a slot gets one, and one
thread per route serves every such batch (issue 29: no thread started per batch).

The watchdog's clock and its wait are injected (:class:`Steps`): the thread moves only when the
test lets it take a step, and virtual time passes only inside its wait, so nothing here sleeps or
races the wall clock. The ``timeout=60`` of the hand-offs below only keeps a broken build from
hanging the suite."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import pytest
from workerless._handler.startgate import WATCHDOG_MARGIN_SECONDS, HandedBackError, RunTimes, StartGate, Watchdog

LAMBDA_TIMEOUT = 900.0
_WATCHDOGS: list[Watchdog] = []


@pytest.fixture(autouse=True)
def _watchdogs_closed() -> Iterator[None]:
    """Each test's watchdog threads end with it (none left to wake in a later test)."""
    yield
    while _WATCHDOGS:
        watchdog = _WATCHDOGS.pop()
        thread = watchdog.thread
        watchdog.close()
        if thread is not None:
            thread.join(timeout=60)
            assert not thread.is_alive()


def _watchdog(steps: Steps) -> Watchdog:
    watchdog = Watchdog(clock=steps.clock, wait=steps.wait)
    _WATCHDOGS.append(watchdog)
    return watchdog


class Steps:
    """A virtual clock and the watchdog thread's wait: a wait ends when the watchdog is notified (a
    batch with an earlier deadline: no time passes) or at :meth:`step`, which moves the clock on by
    the time the thread asked to wait (none when it waited for a change)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._stepped = False
        self._condition: threading.Condition | None = None
        self._entered: queue.Queue[float] = queue.Queue()

    def clock(self) -> float:
        return self.now

    def wait(self, condition: threading.Condition, timeout: float) -> bool:
        self._condition = condition
        self._entered.put(timeout)
        condition.wait(timeout=60)  # the real wait: released by a notify (a step, a batch, the close)
        if self._stepped:
            self._stepped = False
            self.now += timeout
        return True

    def waiting(self) -> float:
        """Until the thread waits again; how long it waits for."""
        return self._entered.get(timeout=60)

    def step(self) -> float:
        """Let the thread wake once, do its round and wait again; how long it then waits for."""
        self.wake()
        return self.waiting()

    def wake(self) -> None:
        """Let the thread wake once (its wait ending at its timeout)."""
        assert self._condition is not None
        with self._condition:
            self._stepped = True
            self._condition.notify()


def _ended(watchdog: Watchdog, thread: threading.Thread | None) -> bool:
    """Whether the watchdog's thread has ended (it ends when it has nothing left to watch)."""
    assert thread is not None
    thread.join(timeout=60)
    return not thread.is_alive() and watchdog.thread is None


def _gate(steps: Steps, watchdog: Watchdog, message_ids: list[str], handed: list[str]) -> StartGate:
    return StartGate(
        lambda: LAMBDA_TIMEOUT - steps.now,
        runs=RunTimes(),
        hand_back=handed.append,
        message_ids=message_ids,
        watchdog=watchdog,
    )


def _threads_started(body: Callable[[], None]) -> list[threading.Thread]:
    started: list[threading.Thread] = []
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started.append(self)
        original(self)

    threading.Thread.start = start  # type: ignore[method-assign]
    try:
        body()
    finally:
        threading.Thread.start = original  # type: ignore[method-assign]
    return started


def _run_batch(gate: StartGate, message_ids: list[str]) -> None:
    with gate:
        for message_id in message_ids:
            gate.admit(message_id)
            gate.run(lambda: None)


def test_a_batch_of_one_message_starts_no_watchdog_thread() -> None:
    """GIVEN a batch of one message THEN no watchdog thread starts: its only job always starts, so
    there is nothing to hand back (a thread and a context copy spared per such invocation)."""
    steps = Steps()
    watchdog = _watchdog(steps)
    started = _threads_started(lambda: _run_batch(_gate(steps, watchdog, ["m1"], []), ["m1"]))
    assert started == []


def test_one_watchdog_thread_serves_every_batch_of_a_route() -> None:
    """GIVEN five batches of two messages, one after another, on one route's watchdog THEN one
    thread is started (at the first), not one per batch, and no batch's watch fires."""
    steps = Steps()
    watchdog = _watchdog(steps)
    handed: list[str] = []

    def batches() -> None:
        first = _gate(steps, watchdog, ["b0-m1", "b0-m2"], handed)
        with first:
            # The thread waits for the first batch's deadline ...
            assert steps.waiting() == LAMBDA_TIMEOUT - WATCHDOG_MARGIN_SECONDS
            for message_id in ["b0-m1", "b0-m2"]:
                first.admit(message_id)
        for n in range(1, 5):  # ... and the later ones, no earlier, wake nobody
            ids = [f"b{n}-m1", f"b{n}-m2"]
            _run_batch(_gate(steps, watchdog, ids, handed), ids)

    started = _threads_started(batches)
    assert [t.name for t in started] == ["workerless-watchdog"]
    # Its deadline, every batch having ended, finds nothing to fire: the thread ends (the next
    # batch of two or more starts another), none left behind.
    steps.wake()
    assert _ended(watchdog, started[0])
    assert steps.now == LAMBDA_TIMEOUT - WATCHDOG_MARGIN_SECONDS
    assert handed == []


def test_the_watchdog_hands_back_the_jobs_not_started_when_a_job_runs_past_its_deadline() -> None:
    """GIVEN a batch of three whose first job is still running WHEN the invocation's time reaches
    the watchdog's margin before the timeout THEN the two jobs not started are handed back, and
    the gate refuses them afterwards."""
    steps = Steps()
    watchdog = _watchdog(steps)
    handed: list[str] = []
    ids = ["m1", "m2", "m3"]
    gate = _gate(steps, watchdog, ids, handed)
    seen_while_running: list[str] = []

    def long_job() -> None:
        # The job runs past the deadline: the watchdog thread's wait moves the clock there; having
        # fired, it has nothing left to watch and ends.
        assert steps.waiting() == LAMBDA_TIMEOUT - WATCHDOG_MARGIN_SECONDS
        thread = watchdog.thread
        steps.wake()
        assert _ended(watchdog, thread)
        seen_while_running.extend(handed)

    with gate:
        gate.admit("m1")
        gate.run(long_job)
        with pytest.raises(HandedBackError) as refused:
            gate.admit("m2")
    assert seen_while_running == ["m2", "m3"]
    assert handed == ["m2", "m3"]
    assert refused.value.message_id == "m2"
    assert steps.now == LAMBDA_TIMEOUT - WATCHDOG_MARGIN_SECONDS


def test_each_batch_is_fired_at_its_own_deadline_by_the_shared_thread() -> None:
    """GIVEN two batches running at once on one route's watchdog (local mode), the second begun
    with less time left WHEN its deadline comes THEN only its jobs not started are handed back; the
    first's are handed back at its own, later, deadline."""
    steps = Steps()
    watchdog = _watchdog(steps)
    first_handed: list[str] = []
    second_handed: list[str] = []
    first = _gate(steps, watchdog, ["a1", "a2"], first_handed)
    second = StartGate(
        lambda: 100.0 - steps.now,
        runs=RunTimes(),
        hand_back=second_handed.append,
        message_ids=["b1", "b2"],
        watchdog=watchdog,
    )
    with first:
        first.admit("a1")
        assert steps.waiting() == LAMBDA_TIMEOUT - WATCHDOG_MARGIN_SECONDS
        with second:  # an earlier deadline: the thread is woken to wait for it instead
            second.admit("b1")
            assert steps.waiting() == 100.0 - WATCHDOG_MARGIN_SECONDS  # woken, no time passed
            assert steps.step() == LAMBDA_TIMEOUT - 100.0  # the second fired; now the first's
            assert (second_handed, first_handed) == (["b2"], [])
            thread = watchdog.thread
            steps.wake()  # the first fires; nothing is left to watch: the thread ends
            assert _ended(watchdog, thread)
            assert (second_handed, first_handed) == (["b2"], ["a2"])
