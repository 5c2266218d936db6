"""Fakes shared by the unit and functional tests."""

from __future__ import annotations

from collections.abc import Callable


class Clock:
    """A virtual clock, for code that takes its clock (and its sleep) as arguments: the code reads it
    (``clock()``) and sleeps on it (``clock.sleep``); the test moves :attr:`now` instead of waiting.

    :attr:`slept` keeps every sleep asked for; :attr:`on_sleep` runs after each (a test acting while
    the code waits). The default start is far from 0, as ``time.time()`` is: a time minus a lease
    stays positive.
    """

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.slept: list[float] = []
        self.on_sleep: list[Callable[[], object]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        for hook in self.on_sleep:
            hook()
