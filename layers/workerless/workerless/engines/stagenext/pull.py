"""What one StageNext pull cycle may hold: the poller's memory, not the route's room, bounds it.

A cycle pulls up to ``capacity`` deliveries per queue, one POST /jobs/pull each, and holds every one
until it is dispatched. Decoding each answer whole built its input as Python objects (~8x its size
for small fields): three deliveries at the payload limit passed a 256 MB poller. So each answer is
read as it streams in (:mod:`workerless.engines.kit.skim`, the ``input`` member cut out as JSON
text), and the cycle keeps one budget for every answer it reads: the answer budget the poller's
demands carry (settings.answer_budget_bytes, from the function's memory). The kept inputs are
charged against it, and the cycle stops *before* a pull whose worst case (a delivery at the payload
limit) would not fit, or once the decoded skeletons (each delivery's own fields and small inputs)
reach :data:`~workerless.engines.kit.skim.SKELETON_BYTES`. A delivery over the payload limit is read
only up to the limit and comes out with ``unread_bytes``: the poller fails it at the engine (lease
acquire, a terminal result naming the limit, ack), so it never lapses back again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from workerless._core.claimcheck import DEFAULT_MEMORY_MB, answer_budget, payload_limit
from workerless._core.model import Demand
from workerless.engines.kit.answers import json_object
from workerless.engines.kit.skim import SKELETON_BYTES, Skimmer, post_skimmed
from workerless.engines.stagenext.config import ENGINE
from workerless.errors import GarbledResponseError, ResponseShapeError

__all__ = ["PullCycle"]


class PullCycle:
    """One activate cycle's memory budget (thread-unsafe: one cycle, one thread).

    Example:
        >>> cycle = PullCycle([Demand("t", 5, None, 100, 250)])
        >>> (cycle.limit, cycle.left, cycle.full())
        (100, 250, False)
        >>> cycle.left = 99
        >>> cycle.full()
        True
    """

    def __init__(self, demands: Sequence[Demand]) -> None:
        first = demands[0] if demands else None
        self.limit = (first.payload_limit if first else None) or payload_limit(DEFAULT_MEMORY_MB)
        budget = (first.answer_budget if first else None) or answer_budget(DEFAULT_MEMORY_MB)
        #: Bytes of cut inputs the cycle may still keep; the first pull always has room for one at the limit.
        self.left = max(budget, self.limit)
        #: Bytes of skeleton (decoded into the jobs' fields and small inputs) read so far.
        self.skeletons = 0
        #: The skimmer of the pull being read (:meth:`post` starts one; :meth:`read` resolves with it).
        self.skim: Skimmer | None = None

    def full(self) -> bool:
        """True when the next pull's worst case might not fit: stop the cycle before it."""
        return self.left < self.limit or self.skeletons >= SKELETON_BYTES

    def post(
        self, client: httpx.Client, url: httpx.URL | str, *, json_body: object, headers: Mapping[str, str]
    ) -> httpx.Response:
        """POST a pull and stream a 2xx answer through a new skimmer (:attr:`skim`: ``input``, at
        depth 1, cut out within what the cycle has left). An answer the skimmer cannot follow
        (closing more than it opened) is garbled, retryable like any unreadable StageNext answer; a
        delivery whose own fields pass the skeleton's cap is refused for good."""
        self.skim = skim = Skimmer("input", 1, engine=ENGINE, limit=self.limit, budget=self.left)
        try:
            return post_skimmed(client, url, json_body=json_body, headers=headers, skim=skim)
        except ResponseShapeError as exc:
            if "besides its jobs' variables" in str(exc):
                raise
            raise GarbledResponseError(str(exc), engine=ENGINE, field="body", status=200) from None

    def read(self, response: httpx.Response, *, what: str) -> dict[str, Any]:
        """The answer :meth:`post` read, its skeleton as a JSON object (GarbledResponseError when
        truncated or not JSON), charging what it kept to the cycle."""
        skim = self.skim
        if skim is None:
            raise RuntimeError("PullCycle.read before PullCycle.post")
        try:
            skeleton = skim.skeleton()
        except ResponseShapeError as exc:  # the answer ended inside a value: lost in transit
            raise GarbledResponseError(str(exc), engine=ENGINE, field="body", status=response.status_code) from None
        self.left = skim.left
        self.skeletons += len(skeleton)
        return json_object(response, engine=ENGINE, what=what, garbled_retryable=True, content=skeleton)
