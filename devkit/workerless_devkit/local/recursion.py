"""Lambda's recursive loop detection, the topology's side of it.

The botocore hooks of :mod:`workerless_devkit.local.loop` tell it each message an invocation sends
and the depth of the chain it is in; :class:`LoopDetector` keeps that depth per message, and an
event source asks it for the depth of each message it delivers. A delivery at the loop limit is
stopped as Lambda stops it (:meth:`LoopDetector.stop`): moved to the source queue's dead-letter
queue, or dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workerless_devkit.local import loop
from workerless_devkit.local.template import QueueSpec

log = logging.getLogger("workerless_devkit.local")


@dataclass(frozen=True, slots=True)
class StoppedLoop:
    """One delivery the recursive-loop limit stopped."""

    function: str
    queue: str
    message_id: str
    depth: int
    #: The DLQ the message was moved to (the source queue's redrive target), or None: dropped.
    moved_to: str | None


class LoopDetector:
    """Each message's chain depth, and the deliveries stopped at the limit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depths: dict[str, tuple[str, int]] = {}  # message id -> (function, depth in its chain)
        # (queue name, body MD5) -> [(send token, function, depth)] of self-sends not yet returned.
        self._expected: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
        self._stopped: list[StoppedLoop] = []

    @property
    def stopped_loops(self) -> list[StoppedLoop]:
        with self._lock:
            return list(self._stopped)

    def record_depth(self, message_id: str, function_id: str, depth: int) -> None:
        with self._lock:
            self._depths[message_id] = (function_id, depth)

    def expect_send(self, token: int, queue_name: str, body_md5s: list[str], function_id: str, depth: int) -> None:
        with self._lock:
            for md5 in body_md5s:
                self._expected.setdefault((queue_name, md5), []).append((token, function_id, depth))

    def sent(self, token: int) -> None:
        with self._lock:
            for key in [k for k, entries in self._expected.items() if any(e[0] == token for e in entries)]:
                left = [e for e in self._expected[key] if e[0] != token]
                if left:
                    self._expected[key] = left
                else:
                    del self._expected[key]

    def depth_of(self, message: Mapping[str, Any], queue_name: str) -> tuple[str, int]:
        """(function, depth) of a delivered message: by id, else by a self-send still returning."""
        with self._lock:
            known = self._depths.get(message["MessageId"])
            if known is not None:
                return known
            expected = self._expected.get((queue_name, loop.body_md5(message["Body"])))
            if not expected:
                return ("", 0)
            _, function_id, depth = expected[0]
            # Keep it by id too: a redelivery of this message has the same depth.
            self._depths[message["MessageId"]] = (function_id, depth)
            return function_id, depth

    def forget(self, message_ids: Iterable[str]) -> None:
        """These messages are deleted: their depth is no longer needed."""
        with self._lock:
            for message_id in message_ids:
                self._depths.pop(message_id, None)

    def stop(
        self,
        sqs: Any,
        queue_urls: Mapping[str, str],
        function_id: str,
        queue: QueueSpec,
        url: str,
        message: Any,
        depth: int,
    ) -> None:
        """Do what Lambda does when it stops a recursive loop: the message does not reach the
        function; it goes to the source queue's dead-letter queue if it has one, else it is dropped."""
        moved_to: str | None = None
        if queue.dead_letter_queue_id is not None:
            moved_to = queue.dead_letter_queue_id
            kwargs: dict[str, Any] = {"QueueUrl": queue_urls[moved_to], "MessageBody": message["Body"]}
            if message.get("MessageAttributes"):
                kwargs["MessageAttributes"] = message["MessageAttributes"]
            sqs.send_message(**kwargs)
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        with self._lock:
            self._depths.pop(message["MessageId"], None)
            self._stopped.append(
                StoppedLoop(
                    function=function_id,
                    queue=queue.logical_id,
                    message_id=message["MessageId"],
                    depth=depth,
                    moved_to=moved_to,
                )
            )
        log.warning(
            "recursive loop stopped: %s (message %s from %s, chain depth %d; set RecursiveLoop: Allow if intended)%s",
            function_id,
            message["MessageId"],
            queue.logical_id,
            depth,
            f"; moved to {moved_to}" if moved_to else "; dropped",
        )
