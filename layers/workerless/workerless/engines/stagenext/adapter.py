"""StageNext adapter (seed 001): pull/ack gateway, worker sessions, stage leases and results.

How the pipeline uses it (a begin lease: :data:`workerless._core.lease.BEGIN_LEASE`):

- The poller calls :meth:`StageNextEngine.activate`: one ``POST /jobs/pull`` (waitSeconds 0, API key only) per job,
  per queue. A pulled delivery is *not* leased yet: only the gateway's visibility timeout (60 s) requeues it. Its
  ack token and routing cookies travel in ``JobRef.handle``.
- The handler calls :meth:`~StageNextEngine.begin` (lease acquire) before user code; False means
  "do not execute" and the handler calls :meth:`~StageNextEngine.skip` (ack requeue:false).
- The heartbeat Lambda calls :meth:`~StageNextEngine.extend` (lease renew, 60 s per the seed) for jobs
  whose handler has begun. It runs in a different container from the handler that acquired the lease, so
  both must present the *same* worker record: :mod:`~workerless.engines.stagenext.session`.
- :meth:`~StageNextEngine.report` posts the result (202 = accepted by the broker), then acks the
  delivery. An unknown outcome raises a retryable error and the pipeline reports the same stored
  outcome again: the body carries the same executionId/attempt, so StageNext's fencing applies it once.
Liveness and lifecycle events: :mod:`~workerless.engines.stagenext.telemetry`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import httpx

from workerless._core.lease import BEGIN_LEASE, LeasePolicy
from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
from workerless.engines.base import LeaseAcquire, Liveness, SharedState
from workerless.engines.kit import engine_url, json_object
from workerless.engines.kit.translate import Translator, parse_problem
from workerless.engines.stagenext.config import (
    ENGINE,
    PULL_BUDGET_SECONDS,
    REMEMBERED_DELIVERIES,
    RESULT_BODY_CAP,
    StageNextConfig,
)
from workerless.engines.stagenext.deliveries import (
    Remembered,
    cookie_header,
    delivery,
    encode_result,
    handle_value,
    lease_body,
    result_body,
)
from workerless.engines.stagenext.pull import PullCycle
from workerless.engines.stagenext.session import Sessions, WorkerSession
from workerless.engines.stagenext.telemetry import Telemetry
from workerless.errors import ConfigurationError, EngineUnavailableError, LeaseLostError, RetryableEngineError

__all__ = ["StageNextEngine", "from_values"]

logger = logging.getLogger("workerless.engines.stagenext")


class StageNextEngine:
    """The StageNext adapter. Build it with :func:`from_values`.

    Example (an illustration: it needs a running engine or AWS, which tests/functional provide)::

        engine = from_values({"STAGENEXT_API_KEY": "..."}, httpx.Client(timeout=10))
        jobs = engine.activate([Demand("billing-charge", 5)], lease_seconds=60)
        if engine.begin(jobs[0]):
            engine.report(jobs[0].ref, Outcome.complete({"ok": True}))
        else:
            engine.skip(jobs[0].ref)
    """

    name: ClassVar[str] = ENGINE
    #: StageNext keeps no task logs (an optional capability of workerless.engines.base.Engine).
    task_logs: ClassVar[None] = None

    def __init__(
        self,
        config: StageNextConfig,
        client: httpx.Client,
        *,
        worker_id: str | None = None,
        state: SharedState | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.config = config
        self._client = client
        self._state = state
        self._clock = clock or time.time
        base = config.instance_id or worker_id or "workerless"
        if state is None and config.instance_id is None:
            # Process-local sessions: concurrent processes must use different instance IDs.
            base = f"{base}-{uuid.uuid4().hex[:8]}"
        self.instance_id = base
        self._lock = threading.RLock()
        self._translate = Translator(ENGINE, secrets=self._secrets)
        self._sessions = Sessions(
            config,
            self._post,
            self._translate,
            instance_id=base,
            state=state,
            clock=self._clock,
            sleep=sleep or time.sleep,
            lock=self._lock,
        )
        self.state_key = self._sessions.state_key
        self._telemetry = Telemetry(
            config, self._post, self._sessions, self._translate, clock=self._clock, lock=self._lock
        )
        #: The execution lease length: configured, then what the engine last said (acquire, renew).
        self.lease_seconds = config.lease_seconds
        #: Ack tokens of deliveries whose result StageNext accepted (202) while the ack is still owed:
        #: a retried report in this container acks again without posting the result twice.
        self._accepted = Remembered(REMEMBERED_DELIVERIES)
        #: Ack tokens of deliveries whose lease acquire may have landed unanswered (5xx, a dropped
        #: connection, a garbled 200): their retry's lease_held is checked with a renew.
        self._uncertain = Remembered(REMEMBERED_DELIVERIES)

    @property
    def lease(self) -> LeasePolicy:
        """A begin lease (lease acquire in the handler) of the length StageNext last stated."""
        return BEGIN_LEASE.granting(self.lease_seconds).returning_after(self.config.visibility_seconds)

    @property
    def lease_acquire(self) -> LeaseAcquire:
        return self  # StageNext's lease starts at lease acquire: begin, skip

    @property
    def liveness(self) -> Liveness:
        return self._telemetry  # after_cycle: the worker heartbeat and lifecycle events (Telemetry)

    def _secrets(self) -> tuple[str, ...]:
        # The API key and the session token held: never in an error an engine body fed.
        session = self._sessions.session
        return (self.config.api_key, *((session.token,) if session is not None else ()))

    # ------------------------------------------------------------------------------- HTTP basics

    def _post(
        self,
        path: str,
        *,
        what: str,
        job_id: str | None = None,
        json_body: object = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        cycle: PullCycle | None = None,
    ) -> httpx.Response:
        all_headers = dict(headers or {})
        if content is not None:
            all_headers["Content-Type"] = "application/json"
        url = engine_url(self.config.api_url, path)
        try:
            if cycle is not None:  # a pull: its answer streams through a skimmer (.pull)
                return cycle.post(self._client, url, json_body=json_body, headers=all_headers)
            if content is not None:
                return self._client.post(url, content=content, headers=all_headers)
            return self._client.post(url, json=json_body, headers=all_headers)
        except httpx.HTTPError as exc:
            raise self._translate.transport(exc, job_id=job_id, what=what) from exc

    def _json(self, response: httpx.Response, *, what: str, job_id: str | None = None) -> dict[str, Any]:
        """The answer's JSON object. An unreadable body (truncated, empty, not JSON: what a proxy or a
        dropped connection leaves) is a GarbledResponseError, retryable: it says nothing about what
        StageNext answered, and every call that parses an answer (pull, lease acquire and renew,
        bootstrap) may be repeated under the seed. Readable JSON that is not an object is the wrong
        contract: ResponseShapeError, final."""
        return json_object(response, engine=ENGINE, what=what, job_id=job_id, garbled_retryable=True)

    # --------------------------------------------------------------------------- worker session

    def _current_session(self) -> WorkerSession:
        """The session this container sends with (:class:`~workerless.engines.stagenext.session.Sessions`)."""
        return self._sessions.current()

    def _refresh_session(self, *, failed_token: str | None) -> WorkerSession:
        """A usable session other than ``failed_token`` (the shared record, or a bootstrap)."""
        return self._sessions.refresh(failed_token=failed_token)

    def _session_call(self, send: Callable[[WorkerSession], httpx.Response]) -> tuple[httpx.Response, WorkerSession]:
        return self._sessions.call(send)

    def _record_event(self, kind: str, ref: JobRef, **data: object) -> None:
        self._telemetry.record(kind, ref, **data)

    def _maybe_flush_events(self) -> None:
        self._telemetry.maybe_flush()

    # ------------------------------------------------------------------------------ the protocol

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        """Pull up to ``capacity`` deliveries per queue (one POST /jobs/pull each); stop a queue at its first 204,
        the cycle after :data:`PULL_BUDGET_SECONDS` (a slow gateway must not hold deliveries) or before a pull the
        memory might not hold (:class:`.pull.PullCycle`). A 429 or unavailable gateway ends the cycle, keeping
        what was pulled (raised if nothing was); a 403 (queue off the handler pattern) requeues, then raises."""
        jobs: list[ActivatedJob] = []
        started, cycle = self._clock(), PullCycle(demands)
        for demand in demands:
            for _ in range(max(0, demand.capacity)):
                if jobs and (self._clock() - started >= PULL_BUDGET_SECONDS or cycle.full()):
                    return jobs
                try:
                    job = self._pull_one(demand, cycle)
                except RetryableEngineError:
                    if jobs:
                        logger.warning("stagenext pull stopped early; keeping the deliveries already pulled")
                        return jobs
                    raise
                except Exception:
                    self._hand_back(jobs)
                    raise
                if job is None:
                    break
                jobs.append(job)
        return jobs

    def _hand_back(self, jobs: Sequence[ActivatedJob]) -> None:
        for job in jobs:
            try:
                self._ack(job.ref, requeue=True, what="requeue")
            except Exception:  # noqa: BLE001 - best effort; the visibility sweep requeues it anyway
                logger.warning("stagenext requeue failed", extra={"job_id": job.ref.job_id})

    def _pull_one(self, demand: Demand, cycle: PullCycle) -> ActivatedJob | None:
        queue, pulled_at = demand.engine_queue, self._clock()
        response = self._post(
            "/jobs/pull",
            what=f"pull from queue {queue!r}",
            json_body={"queue": queue, "waitSeconds": 0},
            headers={"X-API-Key": self.config.api_key},
            cycle=cycle,
        )
        cookies = {name: value for name, value in response.cookies.items()}
        # Affinity belongs to the delivery, not to the client: keep it in the handle, and keep the
        # injected client's jar from pinning later pulls (or other deliveries' acks) to one replica.
        for name in cookies:
            self._client.cookies.delete(name)
        status = response.status_code
        if status == 204:
            return None
        if status == 403:
            raise ConfigurationError(
                f"StageNext refused queue {queue!r} (403): it is outside the application's handler pattern; "
                f"check the route for job type {demand.job_type!r} (its EngineQueue in the template's Mappings.Routes)",
                key="route",
            )
        if status == 401:
            raise ConfigurationError(
                f"StageNext refused STAGENEXT_API_KEY on pull from queue {queue!r} (401)", key="STAGENEXT_API_KEY"
            )
        if status != 200:
            raise self._translate.response(response, what=f"pull from queue {queue!r}")
        data = cycle.read(response, what=f"pull from queue {queue!r}")
        # Until lease acquire, the only clock on a delivery is the gateway's visibility timeout; but
        # the heartbeat's first look is timed from this (a third of it), and a lease acquired right
        # after the pull lapses one lease length later: the earlier of the two.
        expires = pulled_at + min(self.config.visibility_seconds, self.lease_seconds)
        return delivery(data, demand, queue, cookies, pulled_at=pulled_at, lease_expires_at=expires, skim=cycle.skim)

    def begin(self, job: ActivatedJob) -> bool:
        """Lease acquire. True: this delivery runs. False (acquired=false: lease_held, stale or
        finished execution; or the stage is gone): do not execute, :meth:`skip` it."""
        ref = job.ref
        token = str(handle_value(ref, "ackToken"))
        try:
            response = self._lease_call(ref, "acquire")
            if response.status_code == 404:
                self._uncertain.forget(token)
                logger.info("stagenext lease acquire: stage not found; not executing", extra={"job_id": ref.job_id})
                return False
            if response.status_code != 200:
                raise self._translate.response(response, job_id=ref.job_id, what="lease acquire")
            data = self._json(response, what="lease acquire", job_id=ref.job_id)
        except EngineUnavailableError:
            # A 5xx, a dropped connection or a garbled answer: the acquire may have landed. Acquire is
            # not reentrant, so the retry of one that did would be refused (lease_held) and the
            # execution left to lapse: remember to ask the retry's lease_held whose lease it is.
            self._uncertain.remember(token)
            raise
        if data.get("acquired") is True:
            self._uncertain.forget(token)
            return self._started(ref, data)
        reason = str(data.get("reason"))
        if reason == "lease_held" and token in self._uncertain:
            # Renewal succeeds only for the lease owner: our worker record, so the earlier acquire
            # landed (or another delivery of ours holds it, which stands down: it has no claim).
            owned = self._owns_lease(ref)
            self._uncertain.forget(token)
            if owned is not None:
                logger.info("stagenext lease acquire answered lease_held after a lost answer: the lease is ours")
                return self._started(ref, owned)
        self._uncertain.forget(token)
        logger.info("stagenext lease not acquired; not executing", extra={"job_id": ref.job_id, "reason": reason})
        return False

    def _started(self, ref: JobRef, data: Mapping[str, Any]) -> bool:
        self._learn_lease(data)
        self._record_event("job.started", ref)
        self._maybe_flush_events()
        return True

    def _owns_lease(self, ref: JobRef) -> dict[str, Any] | None:
        """Renew the execution's lease: its answer when our worker record owns it, None when renewal
        is refused. Other failures raise (the caller's retry asks again)."""
        try:
            self.extend(ref, int(self.lease_seconds))
        except LeaseLostError:
            return None
        return {"leaseSeconds": self.lease_seconds}

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        """Lease renew (StageNext sets the lease length, 60 s per the seed; ``lease_seconds`` cannot
        change it). Returns our clock at the request plus the answer's ``leaseSeconds`` (else the
        known length); a definitive refusal raises LeaseLostError."""
        asked_at = self._clock()
        response = self._lease_call(ref, "renew")
        status = response.status_code
        if status in (404, 409, 410):
            reason = parse_problem(response).get("reason") or f"HTTP {status}"
            raise LeaseLostError(
                f"lease renew refused: {reason}",
                engine=ENGINE,
                job_id=ref.job_id,
                status=status,
                problem=parse_problem(response),
            )
        if status != 200:
            raise self._translate.response(response, job_id=ref.job_id, what="lease renew")
        data = self._json(response, what="lease renew", job_id=ref.job_id)
        if data.get("renewed") is False:
            raise LeaseLostError(
                f"lease renew refused: {data.get('reason') or 'renewed=false'}",
                engine=ENGINE,
                job_id=ref.job_id,
                status=status,
            )
        return asked_at + self._learn_lease(data)

    def _lease_call(self, ref: JobRef, action: Literal["acquire", "renew"]) -> httpx.Response:
        """POST /stages/{id}/lease/{action} for the execution, under our worker session."""

        def send(session: WorkerSession) -> httpx.Response:
            return self._post(
                f"/stages/{ref.job_id}/lease/{action}",
                what=f"lease {action}",
                job_id=ref.job_id,
                json_body=lease_body(ref, session.worker_id),
                headers={"X-Worker-Session": session.token},
            )

        response, _ = self._session_call(send)
        return response

    def _learn_lease(self, data: Mapping[str, Any]) -> float:
        """The lease length an acquire or renew answer states (``leaseSeconds``), remembered for the
        next pulls' first heartbeat; the known length when the answer has none."""
        seconds = data.get("leaseSeconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
            self.lease_seconds = float(seconds)
        return self.lease_seconds

    def result_body(self, ref: JobRef, outcome: Outcome, worker_id: str) -> tuple[dict[str, Any], str]:
        """The StageResultSubmit body for ``outcome`` and its result string
        (:func:`~workerless.engines.stagenext.deliveries.result_body`)."""
        return result_body(ref, outcome, worker_id)

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        """POST /stages/{id}/result, then ack the delivery (requeue:false) once it answered 202.

        Call it only under the execution's lease (acquired by :meth:`begin`, by any container of the
        deployment: the lease belongs to the shared worker record); StageNext's consumer discards a
        result for an execution that is not Running.

        The caps are checked before sending (PayloadTooLargeError naming the cap). A timeout or 5xx
        raises a retryable error: call again with the same stored outcome; the same executionId and
        attempt let StageNext's fencing discard a duplicate. An ack that fails retryably (a 429, a
        502, a dropped connection) raises too, after the result was accepted, for as long as the
        gateway holds the delivery (its visibility timeout from the pull): the call again only acks
        (this container remembers the accepted result; another container posts it again, which the
        fencing discards), and a caller whose retries run out leaves the report owed for the
        heartbeat, so an accepted result is acknowledged through an outage. Once the gateway has
        requeued the delivery the report ends: its redelivery is refused at acquire and
        acknowledged. A 404 on the ack (token expired, already acknowledged — a repeated ack whose
        first try landed unanswered — or another replica) is logged, not raised; so is a final
        refusal of the ack.
        """
        token = str(handle_value(ref, "ackToken"))
        if token not in self._accepted:
            self._post_result(ref, outcome)
            self._accepted.remember(token)
            self._record_event("job.finished", ref, outcome=outcome.kind)
        try:
            self._ack(ref, requeue=False, what="ack")
        except RetryableEngineError as exc:
            requeued = self._clock() >= float(ref.handle.get("pulledAt") or 0) + self.config.visibility_seconds
            fields = {"job_id": ref.job_id, "error": type(exc).__name__, "status": exc.status}
            if not requeued:
                logger.warning("stagenext ack after an accepted result failed; acknowledging again", extra=fields)
                raise
            logger.warning(
                "stagenext ack after an accepted result failed past the gateway's visibility timeout: the gateway "
                "has requeued the delivery, and its next delivery is refused at acquire and acknowledged",
                extra=fields,
            )
        except Exception as exc:  # noqa: BLE001 - the result is accepted; the sweep requeues the delivery
            logger.warning(
                "stagenext ack after result refused; the delivery will be requeued and refused at acquire",
                extra={"job_id": ref.job_id, "error": type(exc).__name__},
            )
        self._accepted.forget(token)
        self._maybe_flush_events()

    def _post_result(self, ref: JobRef, outcome: Outcome) -> None:
        path = f"/stages/{ref.job_id}/result"

        def send(session: WorkerSession) -> httpx.Response:
            content = encode_result(ref, outcome, session.worker_id)
            return self._post(
                path,
                what="result",
                job_id=ref.job_id,
                content=content,
                headers={"X-API-Key": self.config.api_key, "X-Worker-Session": session.token},
            )

        response, _ = self._session_call(send)
        if response.status_code == 413:
            raise self._translate.response(response, job_id=ref.job_id, what="result", cap=RESULT_BODY_CAP)
        if response.status_code not in (200, 202):
            raise self._translate.response(response, job_id=ref.job_id, what="result")

    def _ack(self, ref: JobRef, *, requeue: bool, what: str) -> bool:
        """POST /jobs/ack with the pull's affinity cookies. False on 404 (this replica does not hold
        the token; it proves nothing about the delivery), True on success; other errors raise."""
        response = self._post(
            "/jobs/ack",
            what=what,
            job_id=ref.job_id,
            json_body={"token": handle_value(ref, "ackToken"), "requeue": requeue},
            headers=cookie_header(ref),
        )
        if response.status_code == 404:
            logger.info("stagenext %s: token not held by the gateway replica (404)", what, extra={"job_id": ref.job_id})
            return False
        if response.status_code not in (200, 202, 204):
            raise self._translate.response(response, job_id=ref.job_id, what=what)
        return True

    def skip(self, ref: JobRef) -> None:
        """Acknowledge (requeue:false) a delivery refused at lease acquire, without executing it —
        the only delivery the seed lets a worker acknowledge without a result. A 404 (not held: an
        earlier try landed, or the token expired) is not an error; a failed ack raises (retryable:
        a 429, 5xx or dropped connection), and a repeated ack is safe for that 404."""
        self._ack(ref, requeue=False, what="ack (skip)")

    def release(self, job: ActivatedJob, reason: str) -> None:
        """Hand a pulled delivery straight back to the broker (ack requeue:true): for a delivery
        workerless cannot handle now. It does not reset a lease this worker may hold: such a lease
        lapses unrenewed and StageNext's recovery dispatches the stage again."""
        logger.info("stagenext releasing delivery", extra={"job_id": job.ref.job_id, "reason": reason})
        self._ack(job.ref, requeue=True, what="requeue")

    def close(self) -> None:
        """Flush events; with a process-local session, announce shutdown. A shared session is the
        whole deployment's worker record and stays up. Never raises."""
        try:
            self._telemetry.flush()
            session = self._sessions.session
            if self._state is not None or session is None:
                return
            response = self._post(
                "/workers/shutdown",
                what="worker shutdown",
                json_body={"workerId": session.worker_id, "reason": "close"},
                headers={"X-Worker-Session": session.token},
            )
            if response.status_code not in (200, 202, 204):
                raise self._translate.response(response, what="worker shutdown")
        except Exception as exc:  # noqa: BLE001 - closing must not mask the caller's own outcome
            logger.warning("stagenext worker shutdown failed", extra={"error": str(exc)})


def from_values(
    values: Mapping[str, str],
    client: httpx.Client,
    *,
    worker_id: str | None = None,
    state: SharedState | None = None,
    clock: Callable[[], float] | None = None,
) -> StageNextEngine:
    """Validate StageNext's connection values and build the adapter.

    ``state``: where the deployment-wide worker session lives (the jobs table in AWS); None keeps a
    process-local session. ``clock``: epoch-seconds clock (tests pass the emulator's).
    """
    return StageNextEngine(StageNextConfig.from_values(values), client, worker_id=worker_id, state=state, clock=clock)
