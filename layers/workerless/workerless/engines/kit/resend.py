"""The re-authenticate-once loop every adapter's request path shares.

A call refused for a recoverable reason — a 401 (the token expired early, the signing key rotated,
the shared session was rotated by another container), a 421 (Sheptra's environment moved cells) —
is recovered and sent again, each recovery at most once per call, so a refusal that recovery does
not cure ends the call instead of looping. This is not a retry policy: nothing waits here, and a
429/5xx is returned for the caller to translate (:mod:`workerless._core.retry` decides whether and when
the whole call is made again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["Recovery", "send_recovering"]

A = TypeVar("A")

#: A recovery: its name (one use per call) and the action that makes the next send worth it.
Recovery = tuple[str, Callable[[], None]]


def send_recovering(send: Callable[[], A], recover: Callable[[A], Recovery | None]) -> A:
    """``send()``; while ``recover(answer)`` names a recovery not yet used for this call, run it
    and send again. Returns the last answer (the caller translates a non-2xx one); ``recover`` may
    raise instead (a refusal that is a configuration error).

    Example:
        >>> answers = iter([401, 200])
        >>> send_recovering(lambda: next(answers), lambda a: ("reauth", lambda: None) if a == 401 else None)
        200
    """
    used: set[str] = set()
    while True:
        answer = send()
        step = recover(answer)
        if step is None or step[0] in used:
            return answer
        used.add(step[0])
        step[1]()
