"""Work on a thread pool that stays inside the invocation: each call runs in a copy of the caller's
context.

The invocation's metrics buffer (:func:`workerless.observability.invocation_metrics`) and its trace
span live in ``contextvars``, and a pool's thread starts with an empty context: without the copy,
what a thread counts is silently dropped. One copy per call, since a context cannot be entered by
two threads at once; the copies share the buffer itself, which takes a lock.

Example:

    >>> import contextvars
    >>> seen = contextvars.ContextVar("seen", default="none")
    >>> _ = seen.set("the invocation's")
    >>> map_in_threads(lambda n: f"{n}: {seen.get()}", [1, 2], max_workers=2)
    ["1: the invocation's", "2: the invocation's"]
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_in_threads(fn: Callable[[T], R], items: Iterable[T], *, max_workers: int, name: str = "workerless") -> list[R]:
    """``fn`` over ``items`` on up to ``max_workers`` threads, results in ``items``' order; each call in
    a copy of the caller's context. An exception of a call is raised here (after all calls ended)."""
    with ThreadPoolExecutor(max_workers=max(1, max_workers), thread_name_prefix=name) as pool:
        futures = [pool.submit(contextvars.copy_context().run, fn, item) for item in items]
        return [future.result() for future in futures]
