"""The start gate's watchdog: only a batch with jobs that could wait for a slot gets one."""

from __future__ import annotations

import threading

from workerless._handler.startgate import RunTimes, StartGate


def _timers_started(message_ids: list[str]) -> list[threading.Timer]:
    started: list[threading.Timer] = []
    original = threading.Timer.start

    def start(self: threading.Timer) -> None:
        started.append(self)
        original(self)

    threading.Timer.start = start  # type: ignore[method-assign]
    try:
        gate = StartGate(lambda: 900.0, runs=RunTimes(), hand_back=lambda _id: None, message_ids=message_ids)
        with gate:
            for message_id in message_ids:
                gate.admit(message_id)
                gate.run(lambda: None)
    finally:
        threading.Timer.start = original  # type: ignore[method-assign]
    return started


def test_a_batch_of_one_message_starts_no_watchdog_thread() -> None:
    """GIVEN a batch of one message THEN no watchdog timer starts: its only job always starts, so
    there is nothing to hand back (a thread and a context copy spared per such invocation)."""
    assert _timers_started(["m1"]) == []


def test_a_batch_of_two_messages_keeps_its_watchdog_and_cancels_it_on_exit() -> None:
    started = _timers_started(["m1", "m2"])
    assert len(started) == 1
    started[0].join(timeout=5)  # cancelled on exit: it ends without firing
    assert not started[0].is_alive()
    assert started[0].finished.is_set()
