"""A poller invocation: the tick chains kept alive, each poller shard polled under its lock, and the
flow relayed to a fresh invocation (or the lock released) after.

:func:`workerless.entrypoints.poller` is Lambda's entry point; this is what it runs, given the
container's wiring. The poll itself is :class:`~workerless._poller.poller.Poller`'s.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from workerless._core.deadline import invocation_deadline as _deadline
from workerless.observability import logger

if TYPE_CHECKING:
    from workerless._core.ports import LambdaContext
    from workerless._core.settings import Settings
    from workerless.wiring import Wiring


def poll(event: dict[str, Any], context: LambdaContext, wiring: Wiring) -> dict[str, Any]:
    """One poller invocation (the entry point's body): keep each tick chain alive, then poll every
    shard the ticks and relays name, each under its own lock, and relay or release after."""
    from workerless._poller.shards import MAIN, for_shard, shard_of, shards_of
    from workerless._poller.ticker import continue_ticker
    from workerless.errors import WorkerlessError

    settings = wiring.settings
    records = event.get("Records") or []
    # Per poller shard (workerless._poller.shards): the ticks to continue, and the last relay (the lock and
    # queue counts handed on; any one relay will do) with the latest dispatch time relays carry.
    ticks: dict[str, list[dict[str, Any] | None]] = {}
    relays: dict[str, tuple[float, dict[str, Any]]] = {}
    for record in records:
        try:
            body = json.loads(record.get("body") or "{}")
        except ValueError:
            body = {}
        if isinstance(body, dict) and "chain" in body:
            ticks.setdefault(shard_of(body), []).append(body)
        elif isinstance(body, dict) and isinstance(body.get("relay"), int | float):
            shard = shard_of(body)
            relays[shard] = (max(relays.get(shard, (0.0, {}))[0], float(body["relay"])), body)
        else:
            logger.warning("ticker message is not a tick; ignored", extra={"message_id": record.get("messageId")})
    # The routes say which shards exist: read from Parameter Store at the container's first poll,
    # again every few minutes (WORKERLESS_ROUTES, when set, instead). A failed first read still keeps
    # the tick chains alive (below), then fails this invocation.
    failure: WorkerlessError | None = None
    try:
        routed: Settings | None = wiring.routed_settings(deadline=_deadline(context))
    except WorkerlessError as exc:  # ConfigurationError, or the read's once its retries are spent
        routed, failure = None, exc
    known = shards_of(routed) if routed is not None else None
    if not records:
        # The schedule: the watchdog that restarts a broken tick chain, every shard's, and polls them.
        ticks = {shard: [None] for shard in known or [MAIN]}
    # Keep the tick chains alive before polling, so a failing poll does not break them.
    for shard, shard_ticks in ticks.items():
        if known is not None and shard not in known:
            logger.info("no route is in this poller shard any more; its tick chain ends", extra={"shard": shard})
            continue
        for tick in shard_ticks:
            try:
                continue_ticker(settings, wiring.state, wiring.queues, tick=tick, now=time.time(), shard=shard)
            except Exception:
                logger.exception("could not continue the poller tick; the schedule will restart it")
    if routed is None:
        assert failure is not None
        raise failure
    polled = [s for s in known or [] if s in ticks or s in relays]
    for shard in set(relays) - set(polled):
        logger.info("relay for a poller shard with no route; its lock lapses", extra={"shard": shard})

    def one(shard: str) -> dict[str, Any]:
        relayed, relay = relays.get(shard, (None, {}))
        return _poll_shard(shard, for_shard(routed, shard), relay, relayed, context, wiring)

    if len(polled) == 1:
        return one(polled[0])
    # Several shards in one batch of ticks: each polls under its own lock, side by side (the engine,
    # SQS and DynamoDB clients are thread-safe), so no shard waits for another's poll budget.
    from workerless._core.threads import map_in_threads

    reports = map_in_threads(one, polled, max_workers=len(polled), name="poller-shard")
    totals: dict[str, Any] = {}
    for counters in reports:
        for key, value in counters.items():
            totals[key] = totals.get(key, 0) + value
    return totals


def _poll_shard(
    shard: str, settings: Settings, relay: dict[str, Any], relayed: float | None, context: LambdaContext, wiring: Wiring
) -> dict[str, Any]:
    """Poll one shard's routes under its own poller lock, and relay or release the lock after."""
    from workerless._poller.intent import IntentLog
    from workerless._poller.poller import DEPTH_REFRESH_SECONDS, Poller
    from workerless._poller.poller_lock import LOCK_KEY, PollerLock
    from workerless._poller.shards import state_key, tagged
    from workerless.aws.clients import ATTEMPT_SECONDS, call_deadline

    queues, state = wiring.queues, wiring.state
    # One poller at a time per shard: two would each read the same room and MaxInFlight would not be
    # a bound. Taken after the tick chain moved on, so an invocation that finds it held ends here (the
    # next tick tries again).
    lock = PollerLock(
        state,
        seconds=settings.poller_lock_seconds,
        window=settings.sqs_lag_seconds,
        keep_seconds=DEPTH_REFRESH_SECONDS,
        key=state_key(LOCK_KEY, shard),
    )
    # A poller that dies mid-cycle must not cost its jobs a lease: its batches are written in the
    # lock's item, and the next invocation finishes what it left.
    intents = IntentLog(lock, lease_seconds=settings.lease_seconds)
    # A relay hands its lock on (one conditional write); anything else takes it (a read, a write).
    token = relay.get("lock")
    where = {"shard": shard} if shard else {}

    def new_poller(holding: PollerLock | None) -> Poller:
        return Poller(
            settings,
            wiring.observed_engine,
            queues,
            clock=wiring.clock,
            sleep=wiring.sleep,
            intents=intents,
            lock=holding,
            payloads=wiring.payloads,
            store=wiring.store,
        )

    if not (lock.inherit(token) if isinstance(token, dict) else lock.acquire()):
        holder, until = lock.held_by or ("?", 0.0)
        logger.debug(
            "another poller invocation holds the poller lock; not polling",
            extra={"holder": holder, "held_for_seconds": round(max(0.0, until - time.time()), 1), **where},
        )
        # A dead holder's lock blocks polling until it expires, but its unfinished batch need not
        # wait for that: handing jobs back and sending tickets never takes room.
        recovered = new_poller(None)  # not the lock's holder
        with call_deadline(_deadline(context), attempt_seconds=ATTEMPT_SECONDS):
            recovering = recovered.recover(deadline=_deadline(context))
        counters = {k: v for k, v in vars(recovering).items() if isinstance(v, int)}
        return {**counters, "lock_held": 1}
    try:
        # Built under the lock's release: an engine that cannot be built (its secret unreadable
        # now) must not hold the lock, and with it every poll, until the lock expires.
        poller = new_poller(lock)
        poller.last_dispatch = relayed  # a relay carries on lingering from the last dispatch
        poller.inherit_depths(relay.get("depths"))
        # On the wiring's clock: the poll budget and its pauses are measured on it. No AWS call of
        # the poll (botocore's retries included) starts past the invocation's deadline: the jobs
        # of a batch not queued by then are handed back, or left to the next one's recovery. Nor
        # within one attempt's length of it (connect + read timeout, 13 s: the poller's 60 s leave
        # its 20 s budget room), so no call is still running when the invocation must be done.
        with call_deadline(_deadline(context), attempt_seconds=ATTEMPT_SECONDS):
            report = poller.run(deadline=_deadline(context, wiring.clock))
    except Exception:
        lock.release()
        raise
    # Work still flowing: hand over to a fresh invocation (at once when the budget ran out busy, a
    # second later after an empty poll) instead of sleeping here or leaving the flow to the next
    # tick. The lock goes with the relay. An intended self-send (RecursiveLoop: Allow). Not on a
    # BaseException: a process that dies releases nothing, and the lock's expiry frees it.
    handed = False
    relaying = poller.relay_delay is not None and settings.ticker_queue_url is not None
    token = lock.handover() if relaying else None
    if relaying and token is None and lock.held:
        # The item could not be brought up to date (a batch the relayed invocation would misread):
        # release instead (which writes it again) and leave the flow to the next tick.
        relaying = False
    if relaying and settings.ticker_queue_url and poller.relay_delay is not None:
        body = {
            "relay": poller.last_dispatch or time.time(),
            "lock": token,
            "depths": poller.depths_for_relay(),
        }
        try:
            queues.send(settings.ticker_queue_url, tagged(body, shard), delay_seconds=poller.relay_delay)
            handed = True
        except Exception:
            logger.exception("could not relay to a fresh poller invocation", extra=where)
    if handed:
        lock.handed_over()
    else:
        lock.release()
    wiring.observer.poll_report(report)
    # An idle tick (nothing taken, nothing failed) logs at DEBUG: at INFO it would be one line every
    # TickSeconds, billed by CloudWatch Logs, that says nothing happened.
    busy = report.activated or report.errors or report.released or report.lock_lost
    (logger.info if busy else logger.debug)("poll finished", extra={"report": vars(report), **where})
    return {k: v for k, v in vars(report).items() if isinstance(v, int)}
