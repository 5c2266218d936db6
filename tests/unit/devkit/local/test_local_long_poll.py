"""Local mode's SQS long poll answers when a delayed message becomes visible, as SQS does."""

from __future__ import annotations

import threading
from typing import Any

from workerless_devkit.local import limits


def test_a_held_long_poll_looks_again_for_a_message_whose_delay_ran_out() -> None:
    """GIVEN a long poll held on a queue with nothing visible, and no new message ever added (no
    notify: a delayed message only becomes visible with time) WHEN the message becomes visible THEN
    the poll sees it at its next look, not at the end of moto's one-second wait."""
    limits.precise_long_polls()
    from moto.sqs.models import Queue

    class Delayed:
        _messages_lock = threading.Condition()
        looks = 0

        @property
        def messages(self) -> list[Any]:
            self.looks += 1
            return ["visible"] if self.looks >= 3 else []

    queue = Delayed()
    Queue.wait_for_messages(queue, 60)  # type: ignore[arg-type]
    assert queue.looks == 3
    limits.precise_long_polls()  # idempotent
    assert Queue._workerless_precise_long_polls is True  # type: ignore[attr-defined]
