"""The self-rescheduling tick: one delayed ticker message every WORKERLESS_TICK_SECONDS, for
sub-minute pickup without a long poll, and the schedule as its watchdog."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from workerless._poller.shards import MAIN, state_key, tagged
from workerless.observability import logger

if TYPE_CHECKING:
    from workerless._core.ports import Queues, SharedState
    from workerless._core.settings import Settings

#: The shared-state key of the one live chain (its id, last sequence number, last tick time).
TICKER_STATE_KEY = "ticker"


def continue_ticker(
    settings: Settings,
    state: SharedState,
    queues: Queues,
    *,
    tick: dict[str, Any] | None,
    now: float,
    shard: str = MAIN,
) -> bool:
    """Keep the self-rescheduling tick alive: a delayed message to the ticker queue every
    WORKERLESS_TICK_SECONDS, for sub-minute pickup without a long poll.

    ``tick`` is the message that invoked us (``{"chain": id, "seq": n}``), None for the schedule.
    Exactly one chain lives, and each tick is continued once: the state record holds the chain id
    and the last sequence number, written with compare-and-set. A redelivered or forked tick (an
    old ``seq``, another ``chain``) is not continued. The schedule (the watchdog) starts a new
    chain only when the last tick is overdue. Returns whether a tick was sent.

    Each poller shard (:mod:`workerless._poller.shards`) has a chain of its own: its own state record, and
    ticks naming it.
    """
    if not settings.tick_seconds or not settings.ticker_queue_url:
        return False
    key = state_key(TICKER_STATE_KEY, shard)
    current = state.get(key)
    overdue = current is None or now - float(current.get("last_tick", 0)) > 2 * settings.tick_seconds + 10
    if tick is None:
        if not overdue:
            return False
        chain, seq = uuid.uuid4().hex, 0
    else:
        chain, seq = str(tick.get("chain")), int(tick.get("seq", 0))
        in_step = current is not None and current.get("chain") == chain and int(current.get("seq", -1)) == seq
        if not in_step and not (current is None or overdue):
            logger.info("stale or duplicate tick not continued", extra={"chain": chain, "seq": seq, "shard": shard})
            return False
    version = None if current is None else int(current["version"])
    if not state.put(key, {"chain": chain, "seq": seq + 1, "last_tick": now}, expected_version=version):
        return False  # another invocation moved the chain first
    body = tagged({"chain": chain, "seq": seq + 1}, shard)
    queues.send(settings.ticker_queue_url, body, delay_seconds=settings.tick_seconds)
    return True
