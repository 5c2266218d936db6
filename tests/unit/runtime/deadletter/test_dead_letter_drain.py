"""The dead-letter drain's bounds (workerless._deadletter.deadletter.drain): a drain never loops past
MAX_RECEIVES receives or its deadline, and a letter it could not settle is never deleted."""

from __future__ import annotations

import itertools
from typing import Any

from workerless._core.batch import SqsRecord
from workerless._deadletter.deadletter import MAX_RECEIVES, drain


class EndlessQueue:
    """A queue that always has ten more letters; records what is deleted."""

    def __init__(self) -> None:
        self.receives = 0
        self.deleted: list[str] = []
        self._ids = itertools.count()

    def receive(self, queue_url: str, *, max_messages: int = 10) -> list[SqsRecord]:
        self.receives += 1
        return [SqsRecord(f"m{n}", "{}", f"r{n}", 1) for n in itertools.islice(self._ids, max_messages)]

    def delete(self, queue_url: str, receipt_handle: str) -> None:
        self.deleted.append(receipt_handle)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the drain called {name}")


def test_a_backlog_is_drained_at_most_max_receives_at_a_time() -> None:
    """GIVEN a queue that never empties WHEN drained with plenty of time THEN it stops after
    MAX_RECEIVES receives (the rest waits for the next schedule), every settled letter deleted."""
    queue = EndlessQueue()
    report = drain("q", queues=queue, settle=lambda m: None, deadline=100.0, reserve_seconds=1.0, clock=lambda: 0.0)  # type: ignore[arg-type]
    assert queue.receives == report.receives == MAX_RECEIVES
    assert report.settled == report.received == 10 * MAX_RECEIVES
    assert len(queue.deleted) == report.settled and report.left == 0


def test_letters_past_the_deadline_and_failed_ones_are_left_not_deleted() -> None:
    """GIVEN a clock that reaches the reserve before the fourth letter, and the second letter's
    settlement failing WHEN drained THEN only the first and third are deleted; the failed one and the
    seven not reached are left for the queue's visibility timeout, and no second receive is made."""
    queue = EndlessQueue()
    now = iter([0.0, 0.0, 0.0, 0.0, 50.0, *[99.0] * 20])

    def settle(message: SqsRecord) -> None:
        if message.message_id == "m1":
            raise RuntimeError("engine down")

    report = drain("q", queues=queue, settle=settle, deadline=60.0, reserve_seconds=12.0, clock=lambda: next(now))  # type: ignore[arg-type]
    assert queue.deleted == ["r0", "r2"]
    assert (report.receives, report.received, report.settled, report.left) == (1, 10, 2, 8)
