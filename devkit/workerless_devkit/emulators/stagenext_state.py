"""StageNext's state, the base of :class:`~workerless_devkit.emulators.stagenext.StageNextEmulator`: the model
(applications, workers, stages with their executions, queued messages, deliveries), the stage state
machine (dispatch, lease and visibility expiry on the clock's tick, results applied) and the lookups
every worker call makes (application by API key, worker by session, stage by id). The emulator's
reset() sets the attributes; its routes and Python API are there."""

from __future__ import annotations

import bisect
import datetime as dt
import fnmatch
import json
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from workerless_devkit.emulators.core import EngineEmulator, JobRegistry
from workerless_devkit.emulators.http import HTTPProblem, Request

DEFAULT_API_KEY = "sn-local-api-key"
DEFAULT_APPLICATION = "local-app"
LEASE_SECONDS = 60
DEFAULT_VISIBILITY_SECONDS = 60
RESULT_STRING_CAP = 262_144
RESULT_BODY_CAP = 327_680
AFFINITY_COOKIE = "gw_replica"
PULL_POLL_INTERVAL = 0.25
MAX_WAIT_SECONDS = 20
#: Where a requeued delivery goes back in its queue: "original" (its place by publish order, as
#: RabbitMQ requeues; the default) or "back" (the tail, as a broker that re-publishes would).
REQUEUE_POSITIONS = ("original", "back")


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Application:
    id: str
    api_key: str
    handler_patterns: tuple[str, ...]

    def allows(self, queue: str) -> bool:
        return any(fnmatch.fnmatchcase(queue, pattern) for pattern in self.handler_patterns)


@dataclass
class Worker:
    worker_id: str
    application: str
    instance_id: str
    token: str
    issued_at: float
    expires_at: float
    bootstraps: int = 1
    stopped: bool = False
    heartbeats: int = 0
    last_heartbeat: float | None = None
    counters: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        """The worker without its token (admin API, tests)."""
        return {
            "workerId": self.worker_id,
            "application": self.application,
            "instanceId": self.instance_id,
            "issuedAt": self.issued_at,
            "expiresAt": self.expires_at,
            "bootstraps": self.bootstraps,
            "stopped": self.stopped,
            "heartbeats": self.heartbeats,
            "lastHeartbeat": self.last_heartbeat,
            "counters": dict(self.counters),
            "events": list(self.events),
        }


@dataclass
class Execution:
    execution_id: str
    attempt: int
    #: dispatched → running → succeeded | failed; running → expired (lease lapsed, recovered).
    state: str = "dispatched"
    owner: str | None = None
    lease_expires_at: float | None = None
    acquired_at: float | None = None
    renewals: int = 0
    #: handed to a worker at least once (pulled); what ``attempts`` counts.
    delivered: bool = False

    def public(self) -> dict[str, Any]:
        return {
            "executionId": self.execution_id,
            "attempt": self.attempt,
            "state": self.state,
            "owner": self.owner,
            "leaseExpiresAt": self.lease_expires_at,
            "acquiredAt": self.acquired_at,
            "renewals": self.renewals,
            "delivered": self.delivered,
        }


@dataclass
class Message:
    stage_id: str
    execution_id: str
    attempt: int
    visible_at: float
    #: publish order in its queue: a requeue at the "original" position puts it back by this.
    seq: int = 0
    delivery_count: int = 0


@dataclass
class Delivery:
    token: str
    replica: int
    message: Message
    pulled_at: float


@dataclass
class Stage:
    id: str
    application: str
    queue: str
    input: dict[str, Any]
    retries: int
    extra: dict[str, Any]
    #: pending (has a live execution) | completed | failed
    state: str = "pending"
    executions: list[Execution] = field(default_factory=list)
    output: Any = None
    error_message: str | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    acks: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    deliveries: int = 0

    @property
    def current(self) -> Execution | None:
        return self.executions[-1] if self.executions else None

    def execution(self, execution_id: str) -> Execution | None:
        return next((e for e in self.executions if e.execution_id == execution_id), None)


class StageNextState(EngineEmulator):
    """Applications, workers, stages and deliveries; the emulator's reset() sets these attributes."""

    api_key: str
    application: str
    instance_id: str | None
    session_ttl: float
    visibility_timeout: float
    max_inflight: int
    replicas: int
    events_max_batch: int
    lease_seconds: int
    requeue_position: str
    _published: int
    _apps: dict[str, Application]
    _workers: dict[str, Worker]
    _stages: JobRegistry[Stage]
    _queues: dict[str, list[Message]]
    _held: list[dict[str, Delivery]]
    _issued: dict[str, str]
    _round_robin: int

    def add_application(self, app_id: str, api_key: str, handler_patterns: tuple[str, ...] = ("*",)) -> None:
        with self._lock:
            self._apps[app_id] = Application(app_id, api_key, tuple(handler_patterns))

    # ------------------------------------------------------------------------ what tests read

    def job_state(self, job_id: str) -> dict[str, Any]:
        """One stage as tests see it. ``state``: ready | leased (a Running execution) | completed | failed."""
        with self._lock:
            self._tick()
            stage = self._stages.get(job_id)
            if stage is None:
                raise KeyError(job_id)
            return self._state_of(stage)

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            self._tick()
            return [self._state_of(stage) for stage in self._stages.values()]

    def workers(self) -> list[dict[str, Any]]:
        with self._lock:
            return [w.public() for w in self._workers.values()]

    def inflight(self) -> list[int]:
        """Pending (unacknowledged) deliveries per replica."""
        with self._lock:
            self._tick()
            return [len(held) for held in self._held]

    def held_by_queue(self) -> dict[str, int]:
        """Pending (unacknowledged) deliveries per handler queue, every replica's together: what
        a route's MaxInFlight bounds at the gateway."""
        with self._lock:
            self._tick()
            counts: dict[str, int] = {}
            for held in self._held:
                for delivery in held.values():
                    queue = self._stages[delivery.message.stage_id].queue
                    counts[queue] = counts.get(queue, 0) + 1
            return counts

    # ------------------------------------------------------------------------ state machinery

    def _public_state(self, stage: Stage) -> str:
        current = stage.current
        if stage.state in ("completed", "failed"):
            return stage.state
        if current is not None and (current.state == "running" or self._outstanding(current)):
            # Handed to a worker: a Running execution, or a pulled, unacknowledged delivery of it.
            return "leased"
        return "ready"

    def _state_of(self, stage: Stage) -> dict[str, Any]:
        return {
            "id": stage.id,
            "type": stage.queue,
            "application": stage.application,
            "state": self._public_state(stage),
            "retries": stage.retries,
            "input": dict(stage.input),
            "output": stage.output,
            "error_message": stage.error_message,
            "attempts": sum(1 for e in stage.executions if e.delivered),
            "deliveries": stage.deliveries,
            "executions": [e.public() for e in stage.executions],
            "results": [dict(r) for r in stage.results],
            "acks": [dict(a) for a in stage.acks],
            "history": [dict(h) for h in stage.history],
        }

    def _outstanding(self, execution: Execution) -> bool:
        return any(d.message.execution_id == execution.execution_id for held in self._held for d in held.values())

    def _event(self, stage: Stage, kind: str, **data: Any) -> None:
        self._stages.record(stage.history, kind, **data)
        # Every change of a stage (deliveries held included) is followed by its event: the watch
        # hears of it here.
        self.watch.note(stage.queue, stage.id, self._public_state(stage))

    def _dispatch(self, stage: Stage, *, delay: float) -> None:
        """Create a new execution of ``stage`` and publish its message (after ``delay``)."""
        execution = Execution(execution_id=f"exe_{uuid.uuid4().hex[:16]}", attempt=len(stage.executions) + 1)
        stage.executions.append(execution)
        self._published += 1
        message = Message(
            stage.id, execution.execution_id, execution.attempt, visible_at=self.now() + delay, seq=self._published
        )
        # The newest publish: the tail, so every queue stays in publish (seq) order.
        self._queues.setdefault(stage.queue, []).append(message)
        self._event(stage, "dispatched", executionId=execution.execution_id, attempt=execution.attempt)
        self._changed.notify_all()  # a parked pull takes it now

    def _requeue(self, message: Message, queue_name: str) -> None:
        """Return a delivered message to the broker, visible now (an ack with requeue, or the
        gateway's visibility sweep). The seed says only that it "returns a delivery to the broker";
        StageNext's broker is AMQP, and RabbitMQ places a requeued message "to its original position
        in its queue, if possible" (docs/assumptions.md, "Emulator: a requeued delivery keeps its
        place"): by default it goes back among the messages by its publish order, ahead of
        everything published after it. ``requeue_position="back"`` models a broker that requeues at
        the tail instead (behind the whole backlog)."""
        message.visible_at = self.now()
        queue = self._queues.setdefault(queue_name, [])
        if self.requeue_position == "back":
            queue.append(message)
        else:
            bisect.insort(queue, message, key=lambda m: m.seq)

    def _tick(self) -> None:
        """Run the sweeps due at the current clock. Called under the lock."""
        now = self.now()
        # Gateway visibility sweep: an unacknowledged delivery goes back to the broker. The token is
        # forgotten, so a late ack of it answers 404. Lease renewals never extend this.
        for held in self._held:
            for token, delivery in list(held.items()):
                if delivery.pulled_at + self.visibility_timeout <= now:
                    del held[token]
                    self._requeue(delivery.message, self._stages[delivery.message.stage_id].queue)
                    self._event(
                        self._stages[delivery.message.stage_id],
                        "visibility_requeue",
                        executionId=delivery.message.execution_id,
                        replica=delivery.replica,
                    )
        # Server-side recovery: a Running execution whose lease lapsed is expired; a new execution
        # is dispatched while retries remain (a lapse counts as a failed attempt).
        for stage in self._stages.values():
            current = stage.current
            if (
                stage.state == "pending"
                and current is not None
                and current.state == "running"
                and current.lease_expires_at is not None
                and current.lease_expires_at <= now
            ):
                current.state = "expired"
                self._event(stage, "lease_expired", executionId=current.execution_id, attempt=current.attempt)
                if stage.retries > 0:
                    stage.retries -= 1
                    self._dispatch(stage, delay=0.0)
                else:
                    stage.state = "failed"
                    stage.error_message = "execution lease expired with no retries left"
                    self._event(stage, "failed", reason="lease_expired")

    def _apply_result(self, stage: Stage, entry: dict[str, Any]) -> None:
        """The asynchronous result consumer (run right after acceptance): execution-ID/attempt fencing."""
        execution = stage.execution(str(entry["executionId"]))
        reason: str | None = None
        if execution is None:
            reason = "unknown_execution"
        elif entry.get("attempt") is not None and entry["attempt"] != execution.attempt:
            reason = "attempt_mismatch"
        elif execution.state in ("succeeded", "failed"):
            reason = "duplicate"
        elif execution is not stage.current or execution.state == "expired" or stage.state != "pending":
            reason = "stale_execution"
        elif execution.state != "running":
            reason = "not_running"
        if reason is not None or execution is None:
            entry.update(applied=False, discarded=True, reason=reason)
            self._event(stage, "result_discarded", executionId=entry["executionId"], reason=reason)
            return
        entry.update(applied=True, discarded=False, reason=None)
        if entry["status"] == "succeeded":
            execution.state = "succeeded"
            stage.state = "completed"
            text = entry.get("result") or ""
            try:
                stage.output = json.loads(text) if text else None
            except ValueError:
                stage.output = text
            self._event(stage, "completed", executionId=execution.execution_id)
            return
        execution.state = "failed"
        stage.error_message = entry.get("errorMessage") or "failed"
        if entry.get("retryable", True) and stage.retries > 0:
            stage.retries -= 1
            self._event(stage, "execution_failed", executionId=execution.execution_id, retries=stage.retries)
            self._dispatch(stage, delay=float(entry.get("backoffSeconds") or 0))
        else:
            stage.state = "failed"
            self._event(stage, "failed", executionId=execution.execution_id)

    def _app_for_key(self, req: Request) -> Application:
        key = req.header("X-API-Key")
        if not key:
            raise HTTPProblem(401, "Unauthorized", "X-API-Key header is required")
        app = next((a for a in self._apps.values() if secrets.compare_digest(a.api_key, key)), None)
        if app is None:
            raise HTTPProblem(401, "Unauthorized", "API key is not valid")
        return app

    def _worker_for_session(self, req: Request, *, check_expiry: bool = True) -> Worker:
        token = req.header("X-Worker-Session")
        if not token:
            raise HTTPProblem(401, "Unauthorized", "X-Worker-Session header is required")
        worker = next((w for w in self._workers.values() if secrets.compare_digest(w.token, token)), None)
        if worker is None:
            raise HTTPProblem(401, "Unauthorized", "worker session is not valid (unknown or replaced)")
        if check_expiry and worker.expires_at <= self.now():
            raise HTTPProblem(401, "Unauthorized", "worker session expired")
        return worker

    def _check_worker_id(self, body: dict[str, Any], worker: Worker) -> None:
        worker_id = body.get("workerId")
        if worker_id is None:
            raise HTTPProblem(400, "Bad Request", "workerId is required")
        if worker_id != worker.worker_id:
            raise HTTPProblem(403, "Forbidden", "workerId does not match the worker session")

    def _stage_for(self, req: Request, application: str) -> Stage:
        stage = self._stages.get(req.params["stageId"])
        if stage is None or stage.application != application:
            raise HTTPProblem(404, "Not Found", f"stage {req.params['stageId']} not found")
        return stage
