"""A faithful emulator of the StageNext Worker API (seed 001), served on loopback.

What it reproduces, rule by rule (schemas the seed does not give are recorded under "## StageNext"
in docs/assumptions.md, prefixed "Emulator:"):

- Applications own an API key and handler-queue patterns; pulling a queue outside the patterns is 403.
- ``POST /workers/bootstrap`` registers a worker per application/instanceId and returns a session
  token valid for ``session_ttl`` (WORKER_SESSION_TTL, 24 h). Heartbeats do not extend it. A
  rebootstrap of the same application/instanceId reuses the worker record (same workerId) and
  replaces its token: the old token answers 401 from then on.
- ``POST /jobs/pull`` (API key only) delivers one message of a handler queue with a process-local
  ack token. The gateway runs as ``replicas`` API processes behind a cookie-affinity balancer
  (``gw_replica``): a token is held only by the replica that pulled it, each replica has its own
  GATEWAY_MAX_INFLIGHT (429 when full), and a sweep requeues deliveries older than
  GATEWAY_VISIBILITY_TIMEOUT. Lease renewal does not extend that timeout.
- ``POST /jobs/ack`` (no auth header): 404 when the replica does not hold the token; a second ack
  of the same token is 404 (not idempotent).
- A requeued delivery (ack with ``requeue: true``, or the visibility sweep) goes back to its
  original place in its queue (publish order), as RabbitMQ requeues; ``requeue_position="back"``
  puts it at the tail instead.
- Every dispatch of a stage creates an *execution* (executionId, attempt). Lease acquire turns the
  dispatched execution Running (a ``lease_seconds`` lease, the seed's 60 s by default; tests shorten
  it), owned by the worker record; it is not reentrant. A Running execution whose lease lapses is
  recovered: it expires and, while retries remain, a new execution is dispatched. Renewal succeeds
  only for the current Running execution's owner.
- ``POST /stages/{id}/result`` answers 202 on acceptance; a consumer then applies it with
  execution-ID/attempt fencing, discarding stale and duplicate results (recorded in ``results``).

``job_state``: ``leased`` while the current execution is Running or has a pulled, unacknowledged
delivery; ``attempts`` counts executions handed to a worker (redeliveries of one execution are one
attempt; ``deliveries`` counts every pull).

The model and the stage state machine: :mod:`~workerless_devkit.emulators.stagenext_state` (the base).

Time is the emulator's own clock: :meth:`StageNextEmulator.advance` moves it forward so tests can
lapse leases, sessions and visibility timeouts without sleeping.
"""

from __future__ import annotations

import secrets
import time
import uuid
from typing import Any

from workerless_devkit.emulators.core import JobRegistry, JobSpec, pick
from workerless_devkit.emulators.http import HTTPProblem, Request, Response, json_response
from workerless_devkit.emulators.stagenext_state import (
    AFFINITY_COOKIE,
    DEFAULT_API_KEY,
    DEFAULT_APPLICATION,
    DEFAULT_VISIBILITY_SECONDS,
    LEASE_SECONDS,
    MAX_WAIT_SECONDS,
    PULL_POLL_INTERVAL,
    REQUEUE_POSITIONS,
    RESULT_BODY_CAP,
    RESULT_STRING_CAP,
    Application,
    Delivery,
    Execution,
    Message,
    Stage,
    StageNextState,
    Worker,
    _iso,
)

__all__ = ["RESULT_BODY_CAP", "RESULT_STRING_CAP", "StageNextEmulator", "create"]


class StageNextEmulator(StageNextState):
    """The emulator's state and its HTTP surface (``router``). Thread-safe.

    Example:
        >>> emu = create(handler_patterns=("billing-*",))
        >>> server = emu.serve()                                   # doctest: +SKIP
        >>> stage_id = emu.create_job("billing-charge", {"amount": 3})
        >>> emu.job_state(stage_id)["state"]
        'ready'
    """

    name = "stagenext"

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self._stages: JobRegistry[Stage] = self.registry
        self.clock.on_advance(self._tick)
        self._register_routes()
        self.reset(**options)

    def reset(
        self,
        *,
        api_key: str = DEFAULT_API_KEY,
        application: str = DEFAULT_APPLICATION,
        handler_patterns: tuple[str, ...] | list[str] = ("*",),
        instance_id: str | None = None,
        session_ttl: float = 24 * 3600,
        visibility_timeout: float = DEFAULT_VISIBILITY_SECONDS,
        max_inflight: int = 128,
        replicas: int = 2,
        events_max_batch: int = 100,
        lease_seconds: int = LEASE_SECONDS,
        requeue_position: str = "original",
    ) -> None:
        """Forget every stage, worker and delivery and apply ``options`` (one server can serve many
        tests). Faults and request stats live in the router: clear them over the admin API."""
        if replicas < 1:
            raise ValueError("replicas must be at least 1")
        if requeue_position not in REQUEUE_POSITIONS:
            raise ValueError(f"requeue_position must be one of {REQUEUE_POSITIONS}, not {requeue_position!r}")
        with self._lock:
            self.api_key = api_key
            self.application = application
            self.instance_id = instance_id
            self.session_ttl = float(session_ttl)
            self.visibility_timeout = float(visibility_timeout)
            self.max_inflight = int(max_inflight)
            self.replicas = int(replicas)
            self.events_max_batch = int(events_max_batch)
            self.lease_seconds = int(lease_seconds)
            self.requeue_position = requeue_position
            self._published = 0
            self.clock.reset()
            self._apps: dict[str, Application] = {}
            self._workers: dict[str, Worker] = {}
            self._stages.clear()
            self._queues: dict[str, list[Message]] = {}
            self._held: list[dict[str, Delivery]] = [{} for _ in range(self.replicas)]
            #: every ack token ever issued → stage id, so an ack that answers 404 is still recorded.
            self._issued: dict[str, str] = {}
            self._round_robin = 0
            self.add_application(application, api_key, tuple(handler_patterns))

    # ----------------------------------------------------------------- clock and admin helpers

    def engine_values(self, base_url: str) -> dict[str, str]:
        """The connection values a worker needs to reach this emulator (with its lease length and
        visibility timeout when they are not the seed's 60 s, so the adapter's timings match)."""
        values = {"STAGENEXT_API_URL": base_url, "STAGENEXT_API_KEY": self.api_key}
        if self.instance_id:
            values["STAGENEXT_INSTANCE_ID"] = self.instance_id
        if self.lease_seconds != LEASE_SECONDS:
            values["STAGENEXT_LEASE_SECONDS"] = str(self.lease_seconds)
        if self.visibility_timeout != DEFAULT_VISIBILITY_SECONDS:
            values["STAGENEXT_VISIBILITY_SECONDS"] = f"{self.visibility_timeout:g}"
        return values

    def create_job(
        self,
        job_type: str,
        variables: dict[str, Any] | None = None,
        *,
        retries: int = 3,
        application: str | None = None,
        **extra: Any,
    ) -> str:
        """Create a stage on handler queue ``job_type`` and dispatch its first execution."""
        with self._lock:
            app = application or self.application
            if app not in self._apps:
                raise KeyError(f"unknown application {app!r}")
            stage = Stage(
                id=f"stg_{uuid.uuid4().hex[:16]}",
                application=app,
                queue=job_type,
                input=dict(variables or {}),
                retries=int(retries),
                extra=dict(extra),
            )
            self._stages.add(stage.id, stage)
            self._event(stage, "created", queue=job_type)
            self._dispatch(stage, delay=0.0)
            return stage.id

    def create_from_spec(self, spec: JobSpec) -> str:
        """A job of a jobs file or ``POST /_admin/jobs``: ``application`` is StageNext's own key
        (the application whose handler queue ``type`` is; default the emulator's)."""
        return self.create_job(
            spec.type, spec.variables, retries=spec.retries, application=pick(spec.extra, "application")
        )

    # ---------------------------------------------------------------------------- HTTP surface

    def _register_routes(self) -> None:
        r = self.router
        r.route("POST", "/workers/bootstrap")(self._bootstrap)
        r.route("POST", "/workers/heartbeat")(self._heartbeat)
        r.route("POST", "/workers/events")(self._events)
        r.route("POST", "/workers/shutdown")(self._shutdown)
        r.route("POST", "/jobs/pull")(self._pull)
        r.route("POST", "/jobs/ack")(self._ack)
        r.route("POST", "/stages/{stageId}/lease/acquire")(self._acquire)
        r.route("POST", "/stages/{stageId}/lease/renew")(self._renew)
        r.route("POST", "/stages/{stageId}/result")(self._result)
        r.route("GET", "/_admin/workers")(self._admin_workers)
        r.route("POST", "/_admin/applications")(self._admin_application)

    # -- auth

    # -- workers

    def _bootstrap(self, req: Request) -> Response:
        body = req.json_object()
        with self._lock:
            app = self._app_for_key(req)
            instance_id = body.get("instanceId")
            if instance_id is not None and (not isinstance(instance_id, str) or not instance_id):
                raise HTTPProblem(400, "Bad Request", "instanceId must be a non-empty string")
            now = self.now()
            token = "wss_" + secrets.token_urlsafe(24)
            worker = next(
                (w for w in self._workers.values() if w.application == app.id and w.instance_id == instance_id),
                None,
            )
            if worker is not None:
                # Rebootstrap: same worker record (leases it owns stay its own), new token.
                worker.token = token
                worker.issued_at = now
                worker.expires_at = now + self.session_ttl
                worker.bootstraps += 1
                worker.stopped = False
            else:
                worker = Worker(
                    worker_id=f"wrk_{uuid.uuid4().hex[:16]}",
                    application=app.id,
                    instance_id=instance_id or f"inst_{uuid.uuid4().hex[:8]}",
                    token=token,
                    issued_at=now,
                    expires_at=now + self.session_ttl,
                )
                self._workers[worker.worker_id] = worker
            return json_response(
                {
                    "workerId": worker.worker_id,
                    "instanceId": worker.instance_id,
                    "applicationId": app.id,
                    "sessionToken": token,
                    "expiresAt": _iso(worker.expires_at),
                    "expiresInSeconds": int(self.session_ttl),
                    "leaseSeconds": self.lease_seconds,
                    "eventsMaxBatch": self.events_max_batch,
                    "messageBroker": {"connectionString": "amqp://emulator.invalid:5672/"},
                },
                201,
            )

    def _heartbeat(self, req: Request) -> Response:
        body = req.json_object()
        with self._lock:
            worker = self._worker_for_session(req)
            self._check_worker_id(body, worker)
            counters = body.get("counters") or {}
            if not isinstance(counters, dict):
                raise HTTPProblem(400, "Bad Request", "counters must be an object")
            worker.heartbeats += 1
            worker.last_heartbeat = self.now()
            worker.counters = dict(counters)
            return json_response({"workerId": worker.worker_id, "sessionExpiresAt": _iso(worker.expires_at)})

    def _events(self, req: Request) -> Response:
        body = req.json_object()
        with self._lock:
            worker = self._worker_for_session(req)
            self._check_worker_id(body, worker)
            events = body.get("events")
            if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
                raise HTTPProblem(400, "Bad Request", "events must be a list of objects")
            if len(events) > self.events_max_batch:
                raise HTTPProblem(
                    400, "Bad Request", f"at most {self.events_max_batch} events per call (WORKER_EVENTS_MAX_BATCH)"
                )
            worker.events.extend(events)
            return json_response({"accepted": len(events)}, 202)

    def _shutdown(self, req: Request) -> Response:
        body = req.json_object()
        with self._lock:
            # Matches workerId and the stored token; does not check expiry, does not revoke.
            worker = self._worker_for_session(req, check_expiry=False)
            self._check_worker_id(body, worker)
            worker.stopped = True
            worker.events.append({"type": "worker.shutdown", "reason": body.get("reason"), "at": _iso(self.now())})
            return json_response({"workerId": worker.worker_id, "status": "stopped"})

    # -- gateway

    def _replica_for(self, req: Request) -> tuple[int, bool]:
        """The replica a request lands on: the affinity cookie's, else round-robin. Returns
        (replica, whether the cookie pinned it)."""
        cookie = req.header("Cookie") or ""
        for part in cookie.split(";"):
            name, _, value = part.strip().partition("=")
            if name == AFFINITY_COOKIE and value.startswith("r") and value[1:].isdigit():
                index = int(value[1:])
                if 0 <= index < self.replicas:
                    return index, True
        index = self._round_robin % self.replicas
        self._round_robin += 1
        return index, False

    def _pull(self, req: Request) -> Response:
        body = req.json_object()
        queue = body.get("queue")
        if not isinstance(queue, str) or not queue:
            raise HTTPProblem(400, "Bad Request", "queue is required")
        wait = body.get("waitSeconds", 0)
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_WAIT_SECONDS:
            raise HTTPProblem(400, "Bad Request", f"waitSeconds must be a number 0..{MAX_WAIT_SECONDS}")
        with self._lock:
            app = self._app_for_key(req)
            if not app.allows(queue):
                raise HTTPProblem(403, "Forbidden", f"queue {queue!r} is outside this application's handler pattern")
            replica, _ = self._replica_for(req)
        cookie = {"Set-Cookie": f"{AFFINITY_COOKIE}=r{replica}; Path=/; HttpOnly"}
        deadline = time.monotonic() + float(wait)
        with self._changed:
            while True:
                self._tick()
                if len(self._held[replica]) >= self.max_inflight:
                    return HTTPProblem(
                        429,
                        "Too Many Requests",
                        f"GATEWAY_MAX_INFLIGHT ({self.max_inflight}) pending deliveries on this API process",
                        headers={"Retry-After": "1", **cookie},
                    ).response
                delivered = self._deliver(app, queue, replica)
                if delivered is not None:
                    return json_response(delivered, 200, cookie)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    break
                # Woken by a dispatch or a clock advance; the short cap also catches visibility
                # timeouts and leases that lapse in real time while parked.
                self._changed.wait(min(PULL_POLL_INTERVAL, remaining))
        return Response(204, b"", dict(cookie))

    def _deliver(self, app: Application, queue: str, replica: int) -> dict[str, Any] | None:
        now = self.now()
        messages = self._queues.get(queue, [])
        for message in messages:
            stage = self._stages[message.stage_id]
            if message.visible_at > now or stage.application != app.id:
                continue
            messages.remove(message)
            message.delivery_count += 1
            stage.deliveries += 1
            execution = stage.execution(message.execution_id)
            if execution is not None:
                execution.delivered = True
            token = "ack_" + secrets.token_urlsafe(24)
            self._held[replica][token] = Delivery(token, replica, message, now)
            self._issued[token] = stage.id
            self._event(
                stage, "delivered", executionId=message.execution_id, replica=replica, delivery=message.delivery_count
            )
            return {
                "ackToken": token,
                "stageId": stage.id,
                "executionId": message.execution_id,
                "attempt": message.attempt,
                "queue": stage.queue,
                "applicationId": app.id,
                "input": dict(stage.input),
                "retries": stage.retries,
                "deliveryCount": message.delivery_count,
                "deliveredAt": _iso(now),
                **stage.extra,
            }
        return None

    def _ack(self, req: Request) -> Response:
        body = req.json_object()
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise HTTPProblem(400, "Bad Request", "token is required")
        requeue = body.get("requeue", False)
        if not isinstance(requeue, bool):
            raise HTTPProblem(400, "Bad Request", "requeue must be a boolean")
        with self._lock:
            self._tick()
            replica, pinned = self._replica_for(req)
            delivery = self._held[replica].pop(token, None)
            stage_id = self._issued.get(token)
            stage = self._stages.get(stage_id) if stage_id else None
            if delivery is None:
                if stage is not None:
                    stage.acks.append(
                        {"requeue": requeue, "status": 404, "replica": replica, "pinned": pinned, "at": self.now()}
                    )
                raise HTTPProblem(404, "Not Found", "this API process does not hold the acknowledgement token")
            assert stage is not None
            stage.acks.append(
                {
                    "requeue": requeue,
                    "status": 200,
                    "replica": replica,
                    "pinned": pinned,
                    "executionId": delivery.message.execution_id,
                    "at": self.now(),
                }
            )
            if requeue:
                # Back to the broker as it was (at its original place by default): no new
                # execution, the lease (if any) untouched.
                self._requeue(delivery.message, stage.queue)
                self._event(stage, "requeued", executionId=delivery.message.execution_id)
                self._changed.notify_all()  # a parked pull takes it now
            else:
                self._event(stage, "acked", executionId=delivery.message.execution_id)
            return json_response({"acknowledged": True, "requeued": requeue})

    # -- stages

    @staticmethod
    def _execution_id(body: dict[str, Any]) -> str:
        execution_id = body.get("executionId")
        if not isinstance(execution_id, str) or not execution_id:
            raise HTTPProblem(400, "Bad Request", "executionId is required")
        return execution_id

    def _lease_target(self, req: Request, execution_id: str) -> tuple[Worker, Stage, Execution | None]:
        """Under the lock, for a lease call: run the clock's sweeps, then the session's worker, the
        stage the request names (in the worker's application) and its execution, if it has one."""
        self._tick()
        worker = self._worker_for_session(req)
        stage = self._stage_for(req, worker.application)
        return worker, stage, stage.execution(execution_id)

    def _acquire(self, req: Request) -> Response:
        body = req.json_object()
        execution_id = self._execution_id(body)
        with self._lock:
            worker, stage, execution = self._lease_target(req, execution_id)
            reason: str | None = None
            if execution is None:
                reason = "unknown_execution"
            elif stage.state != "pending" or execution.state in ("succeeded", "failed"):
                reason = "execution_finished"
            elif execution is not stage.current or execution.state == "expired":
                reason = "stale_execution"
            elif execution.state == "running":
                # Not reentrant: lease_held even for the worker that acquired it.
                reason = "lease_held"
            if reason is not None or execution is None:
                self._event(stage, "acquire_refused", executionId=execution_id, reason=reason)
                return json_response({"acquired": False, "reason": reason, "stageId": stage.id})
            now = self.now()
            execution.state = "running"
            execution.owner = worker.worker_id
            execution.acquired_at = now
            execution.lease_expires_at = now + self.lease_seconds
            self._event(stage, "lease_acquired", executionId=execution_id, workerId=worker.worker_id)
            return json_response(
                {
                    "acquired": True,
                    "stageId": stage.id,
                    "executionId": execution.execution_id,
                    "attempt": execution.attempt,
                    "leaseSeconds": self.lease_seconds,
                    "leaseExpiresAt": _iso(execution.lease_expires_at),
                }
            )

    def _renew(self, req: Request) -> Response:
        body = req.json_object()
        execution_id = self._execution_id(body)
        with self._lock:
            worker, stage, execution = self._lease_target(req, execution_id)
            reason: str | None = None
            if execution is None:
                reason = "unknown_execution"
            elif execution.state == "expired":
                reason = "lease_expired"
            elif execution is not stage.current or stage.state != "pending":
                reason = "not_current_execution"
            elif execution.state != "running":
                reason = "not_running"
            elif execution.owner != worker.worker_id:
                reason = "not_lease_owner"
            if reason is not None or execution is None:
                self._event(stage, "renew_refused", executionId=execution_id, reason=reason)
                raise HTTPProblem(
                    409,
                    "Lease renewal refused",
                    f"execution {execution_id}: {reason}",
                    extra={"reason": reason, "stageId": stage.id},
                    problem_type="https://stagenext.dev/problems/lease-refused",
                )
            execution.lease_expires_at = self.now() + self.lease_seconds
            execution.renewals += 1
            self._event(stage, "lease_renewed", executionId=execution_id)
            return json_response(
                {
                    "renewed": True,
                    "stageId": stage.id,
                    "executionId": execution_id,
                    "leaseSeconds": self.lease_seconds,
                    "leaseExpiresAt": _iso(execution.lease_expires_at),
                }
            )

    def _result(self, req: Request) -> Response:
        if len(req.body) > RESULT_BODY_CAP:
            raise HTTPProblem(413, "Content Too Large", f"request body over {RESULT_BODY_CAP} bytes")
        body = req.json_object()
        with self._lock:
            self._tick()
            app = self._app_for_key(req)
            worker = self._worker_for_session(req)
            if worker.application != app.id:
                raise HTTPProblem(403, "Forbidden", "worker session belongs to another application")
            execution_id = self._execution_id(body)
            status = body.get("status")
            if status not in ("succeeded", "failed"):
                raise HTTPProblem(400, "Bad Request", "status must be 'succeeded' or 'failed'")
            result = body.get("result", "")
            if not isinstance(result, str):
                raise HTTPProblem(400, "Bad Request", "result must be a string")
            if len(result.encode()) > RESULT_STRING_CAP:
                raise HTTPProblem(413, "Content Too Large", f"result string over {RESULT_STRING_CAP} bytes")
            attempt = body.get("attempt")
            if attempt is not None and (isinstance(attempt, bool) or not isinstance(attempt, int)):
                raise HTTPProblem(400, "Bad Request", "attempt must be an integer")
            stage = self._stage_for(req, app.id)
            entry: dict[str, Any] = {
                "executionId": execution_id,
                "attempt": attempt,
                "status": status,
                "result": result,
                "errorMessage": body.get("errorMessage"),
                "errorCode": body.get("errorCode"),
                "retryable": bool(body.get("retryable", True)),
                "backoffSeconds": body.get("backoffSeconds") or 0,
                "workerId": worker.worker_id,
                "at": self.now(),
                "accepted": True,
                "applied": False,
                "discarded": False,
                "reason": None,
            }
            stage.results.append(entry)
            self._event(stage, "result_accepted", executionId=execution_id)
            self._apply_result(stage, entry)
            return json_response({"accepted": True, "stageId": stage.id, "executionId": execution_id}, 202)

    # -- admin

    def _admin_workers(self, req: Request) -> Response:
        return json_response({"workers": self.workers()})

    def _admin_application(self, req: Request) -> Response:
        body = req.json_object()
        app_id, key, patterns = body.get("id"), body.get("apiKey"), body.get("handlerPatterns", ["*"])
        if not isinstance(app_id, str) or not isinstance(key, str) or not isinstance(patterns, list):
            raise HTTPProblem(400, "Bad Request", "id, apiKey (strings) and handlerPatterns (list) are required")
        self.add_application(app_id, key, tuple(str(p) for p in patterns))
        return json_response({"id": app_id}, 201)


def create(**options: Any) -> StageNextEmulator:
    """Build a StageNext emulator (options: api_key, application, handler_patterns, instance_id,
    session_ttl, visibility_timeout (GATEWAY_VISIBILITY_TIMEOUT, 60 s), max_inflight, replicas,
    events_max_batch, lease_seconds (the execution lease, 60 s), requeue_position ("original", the
    default: a requeued delivery, by ack or by the visibility sweep, goes back to its place in its
    queue, as RabbitMQ requeues; "back": at the tail, behind the backlog, to test against a broker
    that requeues so))."""
    return StageNextEmulator(**options)
