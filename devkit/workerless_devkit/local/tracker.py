"""What the botocore hooks of :mod:`workerless_devkit.local.loop` tell a running topology.

Every AWS call an invocation makes goes through those hooks, which report to the invocation's
tracker (:class:`~workerless_devkit.local.loop.LoopTracker`): the messages it sends (their chain
depth, for :mod:`~workerless_devkit.local.recursion`; whether they are work or a timer, for
:mod:`~workerless_devkit.local.idle`), the queues it drains itself, and whether the topology still
takes calls at all (not after its stop).
"""

from __future__ import annotations

from collections.abc import Mapping

from workerless_devkit.local.idle import IdleTracker
from workerless_devkit.local.recursion import LoopDetector
from workerless_devkit.local.template import QueueSpec


class TopologyTracker:
    """One topology's :class:`~workerless_devkit.local.loop.LoopTracker`."""

    def __init__(self, loops: LoopDetector, idle: IdleTracker) -> None:
        self._loops = loops
        self._idle = idle
        #: queue name -> the functions it triggers (an event source's), set as the functions load.
        self.consumers: dict[str, set[str]] = {}
        #: The template's queues by name (set at start).
        self.queue_by_name: Mapping[str, QueueSpec] = {}
        self.accepting = True

    def triggers(self, queue_name: str, function_id: str) -> bool:
        return function_id in self.consumers.get(queue_name, ())

    def record_depth(self, message_id: str, function_id: str, depth: int) -> None:
        self._loops.record_depth(message_id, function_id, depth)

    def expect_send(self, token: int, queue_name: str, body_md5s: list[str], function_id: str, depth: int) -> None:
        self._loops.expect_send(token, queue_name, body_md5s, function_id, depth)

    def sent(self, token: int) -> None:
        self._loops.sent(token)

    def accepts_calls(self) -> bool:
        return self.accepting

    def note_receive(self, queue_name: str, function_id: str) -> None:
        self._idle.note_receive(queue_name)

    def note_send(self, queue_name: str, function_id: str, self_send: bool, delay_seconds: int | None) -> None:
        if delay_seconds is None:
            queue = self.queue_by_name.get(queue_name)
            delay_seconds = queue.delay_seconds if queue is not None else 0
        self._idle.note_send(queue_name, self_send, delay_seconds)
