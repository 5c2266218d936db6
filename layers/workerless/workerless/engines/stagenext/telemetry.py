"""StageNext's worker telemetry: liveness (POST /workers/heartbeat) with the poller's counters, and
lifecycle events (POST /workers/events) in batches. Telemetry never fails a job or a poller cycle:
a failed send is logged and dropped (events) or tried again next cycle (counters)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from workerless._core.model import JobRef
from workerless.engines.kit.translate import Translator
from workerless.engines.stagenext.config import LIVENESS_INTERVAL_SECONDS, StageNextConfig
from workerless.engines.stagenext.session import Post, Sessions, WorkerSession

__all__ = ["Telemetry"]

logger = logging.getLogger("workerless.engines.stagenext")


class Telemetry:
    """Lifecycle events and liveness of one container's worker session."""

    def __init__(
        self,
        config: StageNextConfig,
        post: Post,
        sessions: Sessions,
        translate: Translator,
        *,
        clock: Callable[[], float],
        lock: threading.RLock,
    ) -> None:
        self._config = config
        self._post = post
        self._sessions = sessions
        self._translate = translate
        self._clock = clock
        self._lock = lock
        self._events: list[dict[str, Any]] = []
        self._events_since: float | None = None
        self._counters: dict[str, int] = {}
        self._liveness_at: float | None = None

    def record(self, kind: str, ref: JobRef, **data: object) -> None:
        """Queue a lifecycle event (``job.started``, ``job.finished``) for the next flush."""
        event = {
            "type": kind,
            "stageId": ref.job_id,
            "executionId": ref.handle.get("executionId"),
            "queue": ref.job_type,
            "at": dt.datetime.fromtimestamp(self._clock(), tz=dt.UTC).isoformat(),
            **data,
        }
        with self._lock:
            if not self._events:
                self._events_since = self._clock()
            # Bounded: lifecycle events are telemetry; a long outage drops the oldest, not memory.
            self._events.append(event)
            del self._events[: max(0, len(self._events) - 10 * self._config.events_max_batch)]

    def maybe_flush(self) -> None:
        """Flush when a full batch waits or the oldest event is STAGENEXT_EVENTS_FLUSH_SECONDS old."""
        with self._lock:
            due = len(self._events) >= self._config.events_max_batch or (
                self._events_since is not None
                and self._clock() - self._events_since >= self._config.events_flush_seconds
            )
        if due:
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - telemetry must not fail a job
                logger.warning("stagenext events flush failed", extra={"error": str(exc)})

    def flush(self) -> None:
        """POST /workers/events in batches of at most STAGENEXT_EVENTS_MAX_BATCH. A failed batch is
        dropped (logged): lifecycle events feed a dashboard, they are not worth a job's retry."""
        with self._lock:
            pending, self._events, self._events_since = self._events, [], None
        size = self._config.events_max_batch
        for start in range(0, len(pending), size):
            batch = pending[start : start + size]

            def send(session: WorkerSession, batch: list[dict[str, Any]] = batch) -> httpx.Response:
                return self._post(
                    "/workers/events",
                    what="worker events",
                    json_body={"workerId": session.worker_id, "events": batch},
                    headers={"X-Worker-Session": session.token},
                )

            response, _ = self._sessions.call(send)
            if response.status_code not in (200, 202, 204):
                logger.warning("stagenext dropped %d lifecycle events (%d)", len(batch), response.status_code)

    def after_cycle(self, counters: Mapping[str, int]) -> None:
        """Report liveness (POST /workers/heartbeat) with the counters summed since the last report,
        and flush lifecycle events: at most every LIVENESS_INTERVAL_SECONDS (events sooner when a
        full batch is waiting).

        Why not every cycle: a busy poller runs a cycle per batch, and one liveness call per batch
        would add a request to every batch on top of the protocol's four per job. Never raises."""
        with self._lock:
            for key, value in counters.items():
                self._counters[key] = self._counters.get(key, 0) + int(value)
            now = self._clock()
            due = self._liveness_at is None or now - self._liveness_at >= LIVENESS_INTERVAL_SECONDS
            totals = dict(self._counters)
        if not due:
            self.maybe_flush()
            return
        try:
            self.flush()

            def send(session: WorkerSession) -> httpx.Response:
                return self._post(
                    "/workers/heartbeat",
                    what="worker heartbeat",
                    json_body={"workerId": session.worker_id, "status": "running", "counters": totals},
                    headers={"X-Worker-Session": session.token},
                )

            response, _ = self._sessions.call(send)
            if response.status_code not in (200, 202, 204):
                raise self._translate.response(response, what="worker heartbeat")
        except Exception as exc:  # noqa: BLE001 - liveness reporting must never fail a poller cycle
            logger.warning("stagenext worker heartbeat failed", extra={"error": str(exc)})
            return  # the counters stay summed for the next cycle's try
        with self._lock:
            self._liveness_at = now
            for key, value in totals.items():
                left = self._counters.get(key, 0) - value
                if left:
                    self._counters[key] = left
                else:
                    self._counters.pop(key, None)
