"""A LocalTopology whose functions are wrapped for chaos: process death, Lambda timeout, a slow or
dead heartbeat, SQS redelivery after the visibility timeout, and the side-effect ledger.

The wrapping happens in-process, around what local mode loaded from template.yaml, so the run is the
real template's topology and the real example handlers:

- every function: a :class:`SimulatedCrash` leaving it becomes an invocation failure at the Lambda
  boundary (the whole batch returns to its queue after the visibility timeout, as when a Lambda
  runtime dies); the functions' wiring wraps the engine adapter it builds in :class:`ChaosEngine`;
- job handlers: the user function is wrapped (crash before / after its side effect, a run past the
  Lambda timeout), and writes the ledger; the Lambda context counts down from ``handler_timeout``,
  which a chaos run also sets as the template's handler Timeouts (``run.chaos_timings``, and
  ``run.chaos_route_settings`` for a route's own), so local
  mode abandons a run there as Lambda would;
- heartbeat: dies, or runs late by more than a lease (its extensions then meet a lapsed lease);
- SQS event source: a message is made visible again while its first delivery is still running;
- Lambda: a handler invocation killed past its MemorySize as a job starts (the runtime's kill:
  the whole batch fails, every later call of its code is refused); an invocation of a function
  without reserved concurrency throttled (local mode's concurrency: a batch stays in flight until
  its visibility timeout, a scheduled event is retried with Lambda's backoff); a scheduled firing
  late within its interval (EventBridge fires within its minute).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workerless._handler.execution import as_variables

from workerless_devkit.chaos.inject import ChaosEngine, ChaosState
from workerless_devkit.chaos.plan import Fault, SimulatedCrash
from workerless_devkit.local import loop
from workerless_devkit.local.memory import OutOfMemory
from workerless_devkit.local.runtime import LocalTopology
from workerless_devkit.local.template import FunctionSpec, ScheduleEventSpec

if TYPE_CHECKING:
    from workerless.wiring import Wiring

log = logging.getLogger("workerless_devkit.chaos")

#: Polled while a timed-out handler waits for its Lambda to be killed (bounded by the timeout).
_TIMEOUT_STEP = 0.05


class InvocationCrashed(RuntimeError):
    """What local mode sees when a chaos-wrapped function's process died (an invocation error)."""


class ScaledContext:
    """A Lambda context whose remaining time counts down from ``timeout`` seconds (or less)."""

    def __init__(self, inner: Any, timeout: float) -> None:
        self._inner = inner
        self._deadline = time.monotonic() + timeout

    def get_remaining_time_in_millis(self) -> int:
        own = max(0, int((self._deadline - time.monotonic()) * 1000))
        return min(own, int(self._inner.get_remaining_time_in_millis()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ChaosTopology(LocalTopology):
    """:class:`LocalTopology` with chaos wrappers (see the module docstring)."""

    def __init__(self, *args: Any, state: ChaosState, handler_timeout: float = 4.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chaos = state
        self.handler_timeout = handler_timeout

    # -- loading --------------------------------------------------------------------------------
    def _load_functions(self) -> None:
        super()._load_functions()
        state = self.chaos
        pollers, heartbeats, handlers = set(), set(), set()
        for spec in self.template.functions:
            original = self._handlers[spec.logical_id]
            kind = spec.code_dir.name
            processor = getattr(original, "processor", None)
            if processor is not None:
                handlers.add(spec.logical_id)
                processor.fn = self._wrap_user_function(processor.fn)
            elif kind == "poller":
                pollers.add(spec.logical_id)
            elif kind == "heartbeat":
                heartbeats.add(spec.logical_id)
            wrapped = self._wrap_function(spec.logical_id, original, kind, processor is not None)
            self._handlers[spec.logical_id] = wrapped
        state.poller_ids = frozenset(pollers)
        state.heartbeat_ids = frozenset(heartbeats)
        state.handler_ids = frozenset(handlers)
        state.job_queues = frozenset(
            self.template.queue(event.queue_id).name
            for spec in self.template.functions
            if spec.logical_id in handlers
            for event in spec.sqs_events
        )
        for spec in self.template.functions:
            if spec.logical_id in heartbeats:
                for event in spec.sqs_events:
                    state.heartbeat_queue = self.template.queue(event.queue_id).name

    def new_wiring(self) -> Wiring:
        """The functions' wiring: the runtime's own, with the engine adapter it builds wrapped in
        :class:`ChaosEngine` (under the observer, so injected faults are counted as real ones), and
        that in the topology's poll watch (:attr:`polls`, as :meth:`LocalTopology.new_wiring`
        does): a chaos run is never called idle with a poll in progress either. The watch is
        outermost, so it sees a poll as the poller does, an injected fault included."""
        from workerless.wiring import Wiring

        state, polls = self.chaos, self.polls
        return Wiring(engine_decorator=lambda engine: polls.decorate(ChaosEngine(engine, state)), hooks=self.hooks())

    def _wrap_function(self, function_id: str, original: Callable[..., Any], kind: str, is_handler: bool) -> Any:
        @functools.wraps(original)
        def invoke(event: Any, context: Any) -> Any:
            if is_handler:
                context = ScaledContext(context, self.handler_timeout)
            try:
                if kind == "heartbeat":
                    self._heartbeat_faults(event)
                result = original(event, context)
            except SimulatedCrash as crash:
                raise InvocationCrashed(f"{function_id}: process died (simulated): {crash}") from None
            if is_handler and context.get_remaining_time_in_millis() <= 0:
                # Lambda would have stopped it at its timeout: the response never reaches the event
                # source, so the whole batch comes back after the visibility timeout.
                raise InvocationCrashed(f"{function_id}: Task timed out after {self.handler_timeout:g} seconds")
            return result

        return invoke

    def _heartbeat_faults(self, event: Any) -> None:
        state = self.chaos
        job_ids = _ticket_job_ids(event)
        if state.roll(Fault.HEARTBEAT_CRASH, job_ids):
            state.recorder.note(Fault.HEARTBEAT_CRASH, job_ids=job_ids, where="heartbeat")
            raise SimulatedCrash("heartbeat Lambda died before extending the leases")
        if state.roll(Fault.ENGINE_409_SLOW_HEARTBEAT, job_ids):
            # A slow heartbeat: by the time it extends, the leases of its ticket have lapsed, and
            # another activation may hold the job (the extension is then refused: 409).
            state.recorder.note(Fault.ENGINE_409_SLOW_HEARTBEAT, job_ids=job_ids, where="heartbeat")
            self._stopping.wait(state.lease_seconds + 1.0)

    def _wrap_user_function(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        state = self.chaos

        @functools.wraps(fn)
        def run(job: Any) -> Any:
            if state.roll(Fault.LAMBDA_TIMEOUT, [job.id]):
                state.recorder.note(Fault.LAMBDA_TIMEOUT, job_ids=[job.id], where=job.type)
                # Run on until the Lambda's time is up, then the runtime kills the process.
                context = job.lambda_context
                for _ in range(int(self.handler_timeout / _TIMEOUT_STEP) + 1):
                    if context.get_remaining_time_in_millis() <= 0:
                        break
                    time.sleep(_TIMEOUT_STEP)
                raise SimulatedCrash(f"Task timed out after {self.handler_timeout} seconds")
            self._out_of_memory(job)
            if state.roll(Fault.CRASH_BEFORE_EFFECT, [job.id]):
                state.recorder.note(Fault.CRASH_BEFORE_EFFECT, job_ids=[job.id], where=job.type)
                raise SimulatedCrash("handler process died before its side effect")
            _killed_at_timeout(job, state)
            result = fn(job)
            # Lambda kills the process at its timeout (a thread cannot be killed: it is stopped
            # here instead). Without this a scaled-down run could outlive its claim, which no
            # run in Lambda can: the claim is the invocation's remaining time plus a margin.
            _killed_at_timeout(job, state)
            state.ledger.effect(job.key, job.id)
            if state.roll(Fault.CRASH_AFTER_EFFECT, [job.id]):
                state.recorder.note(Fault.CRASH_AFTER_EFFECT, job_ids=[job.id], where=job.type)
                raise SimulatedCrash("handler process died after its side effect, before its result was stored")
            handle = json.dumps(dict(job.activated.ref.handle), sort_keys=True, default=str)
            left = job.lambda_context.get_remaining_time_in_millis() if job.lambda_context else -1
            run_info = f"lease={hashlib.sha256(handle.encode()).hexdigest()[:8]} left_ms={left} at={time.time():.2f}"
            from workerless import runtime

            lease = runtime.get_engine().lease.fingerprint(job.activated.ref)
            state.ledger.completed(job.key, job.id, run_info, lease=lease)
            variables = as_variables(result)  # a typed handler returns a model
            if isinstance(variables, dict):
                # Which attempt produced the result the engine keeps: the stale-write check.
                return {**variables, "_chaos_key": job.key}
            return result

        return run

    # -- Lambda ---------------------------------------------------------------------------------
    def _inject_throttle(self, spec: FunctionSpec, event: Any) -> bool:
        """A burst of other functions holds the account's unreserved concurrency: a function with
        a reservation (the poller, the heartbeat) is out of its reach; the others are throttled."""
        if spec.reserved_concurrency is not None:
            return False
        state = self.chaos
        job_ids = _record_job_ids(event)
        if not state.roll(Fault.LAMBDA_THROTTLE, job_ids):
            return False
        state.recorder.note(Fault.LAMBDA_THROTTLE, job_ids=job_ids, where=spec.logical_id)
        return True

    def _schedule_delay(
        self, spec: FunctionSpec, schedule: ScheduleEventSpec, interval: float, rng: random.Random
    ) -> float:
        delay = super()._schedule_delay(spec, schedule, interval, rng)
        if self.chaos.roll(Fault.SCHEDULE_DRIFT):
            drift = rng.uniform(0.0, min(60.0, interval))
            self.chaos.recorder.note(Fault.SCHEDULE_DRIFT, where=f"{spec.logical_id}:{schedule.name} +{drift:.2f} s")
            delay = max(delay, drift)
        return delay

    def _out_of_memory(self, job: Any) -> None:
        """The invocation running ``job`` passed its MemorySize: the runtime kills it (as local
        mode's memory meter does), and this thread, whose process Lambda killed, unwinds."""
        state = self.chaos
        scope = loop.current_scope()
        if scope is None or scope.control.kill is None or not state.roll(Fault.LAMBDA_OUT_OF_MEMORY, [job.id]):
            return
        spec = self.template.function(scope.function_id)
        killed = OutOfMemory(spec.logical_id, spec.memory_size + 1.0, spec.memory_size)
        if scope.control.kill(killed):
            state.recorder.note(Fault.LAMBDA_OUT_OF_MEMORY, job_ids=[job.id], where=job.type)
            raise SimulatedCrash(str(killed))

    # -- SQS event source -----------------------------------------------------------------------
    def _run_batch(self, source: Any, url: str, messages: list[dict[str, Any]], slots: Any) -> None:
        state = self.chaos
        if source.queue.name in state.job_queues:
            for message in messages:
                if state.roll(Fault.SQS_REDELIVERY, _message_job_ids([message])):
                    # Visible again while this delivery still runs: another invocation receives it.
                    try:
                        self._sqs.change_message_visibility(
                            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                        )
                    except Exception:  # the batch must still run (and free its slot)
                        log.warning("could not make a message visible again; fault not injected", exc_info=True)
                        continue
                    job_ids = _message_job_ids([message])
                    state.recorder.note(Fault.SQS_REDELIVERY, job_ids=job_ids, where=source.queue.name)
        super()._run_batch(source, url, messages, slots)

    def send_duplicate(self, queue_url: str, body: str) -> None:
        """SQS's at-least-once delivery: the same job message, a second time."""
        self._sqs.send_message(QueueUrl=queue_url, MessageBody=body)


def _killed_at_timeout(job: Any, state: ChaosState) -> None:
    context = job.lambda_context
    if context is not None and context.get_remaining_time_in_millis() <= 0:
        with state.lock:
            state.timed_out += 1
        raise SimulatedCrash("Task timed out: the Lambda's time is up")


def _message_job_ids(messages: list[dict[str, Any]]) -> list[str]:

    found = []
    for message in messages:
        try:
            found.append(str(json.loads(message["Body"])["ref"]["job_id"]))
        except (KeyError, TypeError, ValueError):
            continue
    return found


def _record_job_ids(event: Any) -> list[str]:
    """The job ids of an SQS event's job messages (none for a ticket, a tick or a scheduled event)."""
    records = (event or {}).get("Records") if isinstance(event, dict) else None
    return _message_job_ids([{"Body": r.get("body", "")} for r in records or [] if isinstance(r, dict)])


def _ticket_job_ids(event: Any) -> list[str]:
    found: list[str] = []
    for record in (event or {}).get("Records") or []:
        try:
            ticket = json.loads(record["body"])
            found.extend(str(j["ref"]["job_id"]) for j in ticket["jobs"])
        except (KeyError, TypeError, ValueError):
            continue
    return found
