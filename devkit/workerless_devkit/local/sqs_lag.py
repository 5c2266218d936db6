"""SQS's approximate counts as AWS documents them, not moto's exact values.

AWS (Amazon SQS API Reference, GetQueueAttributes): "The ApproximateNumberOfMessagesDelayed,
ApproximateNumberOfMessagesNotVisible, and ApproximateNumberOfMessages metrics may not achieve
consistency until at least 1 minute after the producers stop sending messages. This period is
required for the queue metadata to reach eventual consistency." moto answers each with the exact
count of the moment.

While a :class:`CountLag` is activated, every GetQueueAttributes answer's three approximate counts
are replaced by what they were up to ``seconds`` ago: for each answer a lag ``d`` is drawn from
[0, ``seconds``] (seeded), and the counts returned are the oldest the queue was read at within the
last ``d`` seconds (every answer is recorded as it was before the change: those are the exact
counts at that moment). So an answer is never older than ``seconds``, may miss every send and
delete of the last ``d`` seconds, and two answers in a row can go back in time (another replica):
what a poller has to survive in AWS. Each lagged answer is counted (:attr:`CountLag.lagged`) for
the chaos suite's figures.

A botocore ``after-call.sqs.GetQueueAttributes`` hook, registered on every session like
:mod:`workerless_devkit.local.limits`'s; it does nothing while no :class:`CountLag` is active.

Example:
    >>> lag = CountLag(seconds=60.0, seed=1, clock=lambda: 100.0)
    >>> lag.answer("q", {"ApproximateNumberOfMessages": "3"})
    {'ApproximateNumberOfMessages': '3'}
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from workerless_devkit import sdk_hooks

COUNTS = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed")

_lock = threading.Lock()
_active: CountLag | None = None


class CountLag:
    """The lag applied to every queue's approximate counts (``seconds``: AWS's "at least 1 minute")."""

    def __init__(self, seconds: float = 60.0, *, seed: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        if seconds < 0:
            raise ValueError(f"SQS count lag must be 0 or more seconds, not {seconds!r}")
        self.seconds = float(seconds)
        self.clock = clock
        self._random = random.Random(seed)
        self._history: dict[str, list[tuple[float, dict[str, str]]]] = {}
        self._lock = threading.Lock()
        #: Answers whose counts differed from the exact ones (the fault hit).
        self.lagged = 0
        #: Answers changed (every GetQueueAttributes asking for a count).
        self.answers = 0

    def answer(self, queue: str, attributes: Mapping[str, str]) -> dict[str, str]:
        """``attributes`` (the exact answer) with its counts as they were up to ``seconds`` ago."""
        exact = {name: str(attributes[name]) for name in COUNTS if name in attributes}
        out = dict(attributes)
        if not exact:
            return out
        with self._lock:
            now = self.clock()
            history = self._history.setdefault(queue, [])
            history.append((now, exact))
            # Anything older than the lag can never be answered again.
            while len(history) > 1 and history[0][0] < now - self.seconds:
                history.pop(0)
            lag = self._random.uniform(0.0, self.seconds)
            then = next(counts for at, counts in history if at >= now - lag)
            self.answers += 1
            if then != exact:
                self.lagged += 1
        for name in exact:
            out[name] = then.get(name, exact[name])
        return out


def activate(lag: CountLag) -> None:
    """Apply ``lag`` to every GetQueueAttributes answer from now on (installs the hook)."""
    global _active
    install_hooks()
    with _lock:
        _active = lag


def deactivate(lag: CountLag) -> None:
    global _active
    with _lock:
        if _active is lag:
            _active = None


def _after_call(parsed: Any, model: Any, context: dict[str, Any], **_: Any) -> None:
    lag = _active
    if lag is None or not isinstance(parsed, dict) or not isinstance(parsed.get("Attributes"), dict):
        return
    queue = str(context.get("workerless_queue_url") or "")
    parsed["Attributes"] = lag.answer(queue.rsplit("/", 1)[-1], parsed["Attributes"])


def _remember_queue(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    # after-call does not see the request's parameters: keep the queue on the call's context.
    if _active is not None:
        context["workerless_queue_url"] = params.get("QueueUrl")


def install_hooks() -> None:
    """Register the hooks for every botocore session created from now on (idempotent)."""
    sdk_hooks.install(
        "local.sqs_lag",
        (
            ("before-parameter-build.sqs.GetQueueAttributes", _remember_queue),
            ("after-call.sqs.GetQueueAttributes", _after_call),
        ),
    )
