"""Fault injectors: botocore event hooks for DynamoDB and SQS, and a proxy around the engine adapter.

botocore hooks (registered on every session, like local mode's loop hooks and moto's stubber) act
only while a chaos run is active and only on calls made inside a local-mode invocation, so the
runtime's own event-source plumbing is never hit:

- ``before-call.dynamodb.*`` / ``before-call.sqs.*``: raise a throttle or a server error, as the
  call would after botocore's own retries gave up (the harshest case: a throttle storm).
- ``before-call.sqs.SendMessage`` to the heartbeat queue from the poller: the poller dies after
  dispatching its jobs and before sending their ticket.
- ``before-parameter-build.sqs.SendMessage`` to the heartbeat queue: the ticket is late (its delay
  grows past the lease).
- ``after-call.sqs.SendMessageBatch`` to a job queue: SQS delivers a message twice.

The engine proxy wraps whatever adapter the runtime built; emulator faults go through the
emulator's admin API (``POST /_admin/faults``, one fault, next matching request) so the adapter
meets them over real HTTP and parses them as it would in production — mangled answers included
(``raw`` bodies, and ``after``: the request took effect and only its answer was lost).
"""

from __future__ import annotations

import contextvars
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from workerless.engines.decorator import EngineDecorator

from workerless_devkit import sdk_hooks
from workerless_devkit.chaos.ledger import Ledger
from workerless_devkit.chaos.plan import Fault, FaultPlan, Recorder, SimulatedCrash

if TYPE_CHECKING:
    from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
    from workerless.engines.base import Engine

T = TypeVar("T")

_suppress: contextvars.ContextVar[bool] = contextvars.ContextVar("workerless_chaos_suppress", default=False)


@dataclass
class ChaosState:
    """What the hooks and the proxy share for one run."""

    plan: FaultPlan
    recorder: Recorder
    ledger: Ledger
    lease_seconds: int
    heartbeat_queue: str = ""  # queue name
    job_queues: frozenset[str] = frozenset()
    poller_ids: frozenset[str] = frozenset()
    heartbeat_ids: frozenset[str] = frozenset()
    handler_ids: frozenset[str] = frozenset()
    admin_url: str | None = None
    http_timeout: float = 1.0
    #: Engine-specific real faults: "421" (move the environment's cell), "401" (revoke tokens).
    engine_hooks: Mapping[str, Callable[[], bool]] = field(default_factory=dict)
    #: When a hook's fault can hurt (a token exists to revoke); absent: always.
    engine_ready: Mapping[str, Callable[[], bool]] = field(default_factory=dict)
    #: job id (as the engine adapter sees it) → keys of every activation of it, oldest first.
    activations: dict[str, list[str]] = field(default_factory=dict)
    #: (key, outcome kind, time) of every report the engine accepted.
    accepted: list[tuple[str, str, float]] = field(default_factory=list)
    refused_stale: int = 0
    #: Runs stopped because their (scaled) Lambda time ran out — not injected: the timeouts the
    #: faults' delays caused.
    timed_out: int = 0
    duplicate_sender: Callable[[str, str], None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def roll(self, kind: Fault, job_ids: Sequence[str] = ()) -> bool:
        """Whether ``kind`` fires here, on these jobs (an exclusive plan spares jobs already hit)."""
        if self.plan.exclusive and job_ids and self.recorder.was_hit(job_ids):
            return False
        return self.plan.roll(kind)


_ACTIVE: ChaosState | None = None


def activate(state: ChaosState | None) -> None:
    """Make ``state`` the run the hooks serve (None: hooks do nothing)."""
    global _ACTIVE
    _ACTIVE = state


def _scope_function() -> str | None:
    from workerless_devkit.local import loop

    scope = loop.current_scope()
    return None if scope is None else scope.function_id


def _job_id_of_key(key: str) -> str | None:
    """The job id in a job record's key (``job#{type}#{engine}#{job id}[#{attempt}]``); None for the
    table's other items (``state#...``)."""
    parts = key.split("#")
    return parts[3] if len(parts) >= 4 and parts[0] == "job" else None


def _keys_in(params: Any) -> list[str]:
    if not isinstance(params, dict):
        return []
    keys = []
    for holder in (params.get("Key"), params.get("Item")):
        if isinstance(holder, dict):
            pk = holder.get("pk")
            if isinstance(pk, dict) and isinstance(pk.get("S"), str):
                keys.append(pk["S"])
    return keys


def _client_error(code: str, status: int, operation: str) -> Exception:
    from botocore.exceptions import ClientError

    response: Any = {
        "Error": {"Code": code, "Message": "injected by workerless_devkit.chaos"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)


def _queue_name(params: Any) -> str:
    url = str(params.get("QueueUrl", "")) if isinstance(params, dict) else ""
    return url.rstrip("/").rsplit("/", 1)[-1]


_PARAMS_KEY = "workerless_chaos_params"


def _stash_params(params: Any, context: Any = None, **_: Any) -> None:
    # The API parameters as the caller passed them (before-call only sees the serialised body).
    if isinstance(context, dict) and isinstance(params, dict):
        context[_PARAMS_KEY] = params


def _before_call(model: Any, context: Any = None, **_: Any) -> None:
    state = _ACTIVE
    if state is None or _suppress.get():
        return
    function = _scope_function()
    if function is None:
        return
    service = model.service_model.service_name
    operation = model.name
    body = context.get(_PARAMS_KEY) if isinstance(context, dict) else None
    from workerless_devkit.chaos.services import job_ids_of_call

    if service == "dynamodb":
        job_ids = job_ids_of_call(service, body)
        if state.plan.roll(Fault.DYNAMODB_THROTTLE):
            state.recorder.note(Fault.DYNAMODB_THROTTLE, job_ids=job_ids, where=f"{function}:{operation}")
            raise _client_error("ProvisionedThroughputExceededException", 400, operation)
        if state.plan.roll(Fault.DYNAMODB_ERROR):
            state.recorder.note(Fault.DYNAMODB_ERROR, job_ids=job_ids, where=f"{function}:{operation}")
            raise _client_error("InternalServerError", 500, operation)
    elif service == "sqs":
        queue = _queue_name(body)
        if (
            operation == "SendMessage"
            and queue == state.heartbeat_queue
            and function in state.poller_ids
            and state.roll(Fault.POLLER_CRASH_BEFORE_TICKET, _ticket_jobs(body))
        ):
            state.recorder.note(Fault.POLLER_CRASH_BEFORE_TICKET, job_ids=_ticket_jobs(body), where=function)
            raise SimulatedCrash("poller died after dispatching its jobs, before sending their ticket")
        if operation == "SendMessageBatch" and queue in state.job_queues and function in state.poller_ids:
            # The last point before the jobs reach SQS: the widest part of the activation → dispatch
            # gap (the engine answered, the intent record is written, nothing is queued yet).
            job_ids = _batch_jobs(body)
            if state.roll(Fault.POLLER_CRASH_AFTER_ACTIVATE, job_ids):
                state.recorder.note(Fault.POLLER_CRASH_AFTER_ACTIVATE, job_ids=job_ids, where=function)
                raise SimulatedCrash("poller died after activating jobs, before dispatching them")
        # The jobs a batch or a ticket names: a lost ticket is then traced to the leases it left.
        job_ids = job_ids_of_call(service, body)
        if state.plan.roll(Fault.SQS_THROTTLE):
            state.recorder.note(Fault.SQS_THROTTLE, job_ids=job_ids, where=f"{function}:{operation}")
            raise _client_error("RequestThrottled", 403, operation)
        if state.plan.roll(Fault.SQS_ERROR):
            state.recorder.note(Fault.SQS_ERROR, job_ids=job_ids, where=f"{function}:{operation}")
            raise _client_error("InternalError", 500, operation)


def _ticket_jobs(body: Any) -> list[str]:
    try:
        ticket = json.loads(body.get("MessageBody", "{}"))
        return [str(j["ref"]["job_id"]) for j in ticket.get("jobs", [])]
    except (AttributeError, KeyError, TypeError, ValueError):
        return []


def _batch_jobs(body: Any) -> list[str]:
    found = []
    for entry in (body or {}).get("Entries") or []:
        try:
            found.append(str(json.loads(entry["MessageBody"])["ref"]["job_id"]))
        except (KeyError, TypeError, ValueError):
            continue
    return found


def _before_build(params: Any, **_: Any) -> None:
    state = _ACTIVE
    if state is None or _suppress.get() or not isinstance(params, dict):
        return
    function = _scope_function()
    if function is None or _queue_name(params) != state.heartbeat_queue:
        return
    if state.roll(Fault.HEARTBEAT_LATE, _ticket_jobs(params)):
        # Late by more than a lease: the leases in this ticket lapse before it arrives.
        late = int(params.get("DelaySeconds", 0)) + state.lease_seconds + 1
        params["DelaySeconds"] = min(900, late)
        state.recorder.note(Fault.HEARTBEAT_LATE, job_ids=_ticket_jobs(params), where=function)


def _after_batch(parsed: Any, context: Any = None, **_: Any) -> None:
    state = _ACTIVE
    params = context.get(_PARAMS_KEY) if isinstance(context, dict) else None
    if state is None or _suppress.get() or not isinstance(params, dict) or not isinstance(parsed, dict):
        return
    if _scope_function() is None or state.duplicate_sender is None:
        return
    queue_url = str(params.get("QueueUrl", ""))
    if _queue_name(params) not in state.job_queues:
        return
    sent = {str(s.get("Id")) for s in parsed.get("Successful") or [] if isinstance(s, dict)}
    for entry in params.get("Entries") or []:
        if str(entry.get("Id")) not in sent:
            continue
        try:
            job_id = str(json.loads(entry["MessageBody"])["ref"]["job_id"])
        except (KeyError, TypeError, ValueError):
            job_id = ""
        if state.roll(Fault.SQS_DUPLICATE, [job_id] if job_id else []):
            state.recorder.note(Fault.SQS_DUPLICATE, job_ids=[job_id] if job_id else [], where="SendMessageBatch")
            token = _suppress.set(True)
            try:
                state.duplicate_sender(queue_url, entry["MessageBody"])
            finally:
                _suppress.reset(token)


HOOKS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("before-parameter-build.dynamodb", _stash_params),
    ("before-parameter-build.sqs", _stash_params),
    ("before-call.dynamodb", _before_call),
    ("before-call.sqs", _before_call),
    ("before-parameter-build.sqs.SendMessage", _before_build),
    ("after-call.sqs.SendMessageBatch", _after_batch),
)


def install_hooks() -> None:
    """Register the hooks for every botocore session created from now on (idempotent). They do
    nothing unless a chaos run is :func:`activate`-d."""
    from workerless_devkit.chaos import services

    sdk_hooks.install("chaos", (*HOOKS, *services.HOOKS))


# ------------------------------------------------------------------------------------------------
# The engine proxy

_HTTP_FAULTS: tuple[tuple[Fault, dict[str, Any]], ...] = (
    (Fault.ENGINE_429, {"status": 429, "headers": {"Retry-After": "1"}}),
    (Fault.ENGINE_503, {"status": 503}),
    (Fault.ENGINE_500, {"status": 500}),
    (Fault.ENGINE_DROP, {"drop": True}),
    (Fault.ENGINE_401, {"status": 401}),
    # The request takes effect; its answer is mangled or lost on the way back ("after").
    (Fault.ENGINE_GARBLED_200, {"status": 200, "raw": '{"acquired": tr', "after": True}),
    (Fault.ENGINE_EMPTY_200, {"status": 200, "raw": "", "after": True}),
    (Fault.ENGINE_DROP_AFTER, {"drop": True, "after": True}),
    # A proxy in front of the engine answers instead of it.
    (
        Fault.ENGINE_502_HTML,
        {"status": 502, "raw": "<html><body><h1>502 Bad Gateway</h1></body></html>", "content_type": "text/html"},
    ),
)


class ChaosEngine(EngineDecorator):
    """An engine decorator (the chaos wiring's ``engine_decorator``) around the adapter the runtime
    built: injects engine faults before its calls, kills a handler after its store, and records
    activations and accepted reports (the stale-write check)."""

    #: The calls that are an opportunity for an engine fault (send_logs, after_cycle and close never
    #: were; begin and skip exist only on an engine with lease acquire).
    FAULTED = frozenset({"activate", "begin", "extend", "report", "release", "skip"})

    def __init__(self, inner: Engine, state: ChaosState) -> None:
        super().__init__(inner)
        self._state = state

    @property
    def state(self) -> ChaosState:
        return self._state

    # -- engine faults --------------------------------------------------------------------------
    def _queue_fault(self, fault: dict[str, Any]) -> None:
        admin = self.state.admin_url
        if admin is None:
            return
        body = json.dumps({"method": "*", "path": "*", "times": 1, **fault}).encode()
        if not admin.startswith(("http://127.0.0.1:", "http://localhost:")):
            raise ValueError("fault injection talks to a loopback emulator only")
        request = urllib.request.Request(  # noqa: S310 - checked above: loopback http only
            f"{admin}/_admin/faults", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - loopback emulator only
            answer.read()

    def _maybe_fault(self, operation: str, job_ids: Sequence[str] = ()) -> None:
        state = self.state
        where = f"{_scope_function() or '-'}:{operation}"
        for kind, fault in _HTTP_FAULTS:
            hook = state.engine_hooks.get("401") if kind is Fault.ENGINE_401 else None
            ready = state.engine_ready.get("401") if kind is Fault.ENGINE_401 else None
            if ready is not None and not ready():
                continue  # nothing to revoke yet: wait for an opportunity where it can hurt
            if state.roll(kind, job_ids):
                # A real revocation where the emulator can do one, else the answer itself.
                if hook is None or not hook():
                    self._queue_fault(fault)
                state.recorder.note(kind, job_ids=job_ids, where=where)
        if state.roll(Fault.ENGINE_TIMEOUT, job_ids):
            # Answer later than the adapter's HTTP timeout: the client gives up (a timeout).
            self._queue_fault({"delay": state.http_timeout + 0.5, "status": 503})
            state.recorder.note(Fault.ENGINE_TIMEOUT, job_ids=job_ids, where=where)
        hook_421 = state.engine_hooks.get("421")
        if hook_421 is not None and state.roll(Fault.ENGINE_421, job_ids):
            # The environment moves cell: the next call answers 421 and discovery re-resolves.
            hook_421()
            state.recorder.note(Fault.ENGINE_421, job_ids=job_ids, where=where)

    # -- the Engine protocol --------------------------------------------------------------------
    def around(self, operation: str, job_ids: Sequence[str], call: Callable[[], T]) -> T:
        # skip is a call of the engine's lease acquire (StageNext), which only an engine whose
        # deliveries acquire their lease has: always a request, so an opportunity for a fault.
        faulted = operation in self.FAULTED
        if faulted:
            self._maybe_fault(operation, job_ids)
        return call()

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        jobs = super().activate(demands, lease_seconds)
        state = self.state
        with state.lock:
            for job in jobs:
                seen = state.activations.setdefault(job.ref.job_id, [])
                # In order of first appearance: a stale delivery pulled again later (StageNext's
                # gateway requeues an unacknowledged delivery of an expired execution) is not the
                # current attempt, however late it arrives.
                if job.ref.key not in seen:
                    seen.append(job.ref.key)
        return jobs

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        from workerless.errors import LeaseLostError

        state = self.state
        if _scope_function() in state.handler_ids and state.roll(Fault.CRASH_AFTER_STORE, [ref.job_id]):
            state.recorder.note(Fault.CRASH_AFTER_STORE, job_ids=[ref.job_id], where="report")
            raise SimulatedCrash("handler process died after storing its result, before reporting it")
        try:
            super().report(ref, outcome)
        except LeaseLostError:
            with state.lock:
                state.refused_stale += 1
            raise
        with state.lock:
            state.accepted.append((ref.key, outcome.kind, time.time()))
