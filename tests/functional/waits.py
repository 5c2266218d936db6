"""Evidence that does not depend on how fast a busy machine is: what an emulator's long poll waited
for, recorded instead of timed, and a bounded wait on an event."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

#: The longest a test waits for an event that should come: ends as soon as it comes, so only a
#: broken run waits it out (then the test fails, naming the event).
EVENT_SECONDS = 60.0


class RecordingCondition(threading.Condition):
    """A Condition that records the timeout of every wait() on it (None: an unbounded wait)."""

    def __init__(self, lock: Any = None) -> None:
        super().__init__(lock)
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return super().wait(timeout)


def record_waits(emulator: Any, attribute: str) -> RecordingCondition:
    """Replace the emulator's long-poll Condition (same lock) with a recording one."""
    original: threading.Condition = getattr(emulator, attribute)
    recorder = RecordingCondition(original._lock)  # type: ignore[attr-defined]
    setattr(emulator, attribute, recorder)
    return recorder


def eventually(what: str, done: Callable[[], bool], seconds: float = EVENT_SECONDS) -> None:
    """Poll until ``done()``; fail naming ``what`` if it never holds."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)
