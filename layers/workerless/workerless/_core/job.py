"""The :class:`Job` a handler function receives."""

from __future__ import annotations

import threading
import time
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic

from typing_extensions import TypeVar

from workerless._core.model import ActivatedJob

if TYPE_CHECKING:
    from workerless._core.ports import LambdaContext

#: How long a lease-lost answer is reused before asking the job table again: cheap enough to call
#: in a tight loop, fresh enough that a handler stops within seconds of the heartbeat's verdict.
LEASE_CHECK_INTERVAL = 2.0
#: node-flow's batching: flush logs every 2 s or 50 lines, and always before the report.
LOG_FLUSH_LINES = 50
LOG_FLUSH_SECONDS = 2.0


#: The type of a typed handler's validated input (``Job[ChargeInput]``).
InputT = TypeVar("InputT", default=Any)


class Job(Generic[InputT]):
    """One job, as a handler sees it.

    ``Job[Model]`` (``Model`` a pydantic model) makes :attr:`input` the variables validated against
    ``Model`` before the handler runs; plain ``Job`` leaves :attr:`input` None.

    Attributes:
        id: the engine's job / task / stage id.
        type: the job type (the route).
        variables: the variables / input the engine handed over (plain JSON values).
        retries: retries left (Sheptra), or None where the engine does not say.
        instance_id: the process instance / workflow id. element_id: the task's element / ref name.
        traceparent: the W3C traceparent of the engine span that queued the job (or None).
        key: an idempotency key for side effects, unique per engine attempt of this job.
        lambda_context: the Lambda context of the invocation running the handler.

    Example:
        >>> import time
        >>> from workerless import job_handler
        >>> @job_handler("generate-report")
        ... def handler(job: Job) -> dict:
        ...     for _ in range(60):
        ...         if job.lease_lost():
        ...             raise RuntimeError("lease lost; stopping")
        ...         job.log("still working")
        ...         time.sleep(1)
        ...     return {"reportReady": True}
    """

    def __init__(
        self,
        activated: ActivatedJob,
        *,
        lambda_context: LambdaContext | None = None,
        lease_check: Callable[[], bool] | None = None,
        log_sink: Callable[[list[dict[str, Any]]], None] | None = None,
        logger: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._activated = activated
        self.lambda_context = lambda_context
        self._lease_check = lease_check
        self._log_sink = log_sink
        self._logger = logger
        self._clock = clock
        self._lost = False
        self._checked_at: float | None = None
        self._lines: list[dict[str, Any]] = []
        self._last_flush = clock()
        self._lock = threading.Lock()
        self._input: Any = None

    # -- what the engine said -------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self._activated.ref.job_id

    @property
    def type(self) -> str:
        return self._activated.ref.job_type

    @property
    def engine(self) -> str:
        return self._activated.ref.engine

    @property
    def variables(self) -> dict[str, Any]:
        return self._activated.variables

    @property
    def input(self) -> InputT:
        """The variables validated against the handler's input model (``Job[Model]`` or the
        decorator's ``input=``); None for an untyped handler. :attr:`variables` stays the raw dict."""
        return typing.cast(InputT, self._input)

    def _set_input(self, value: Any) -> None:
        self._input = value

    @property
    def retries(self) -> int | None:
        return self._activated.retries

    @property
    def instance_id(self) -> str | None:
        return self._activated.instance_id

    @property
    def element_id(self) -> str | None:
        return self._activated.element_id

    @property
    def traceparent(self) -> str | None:
        return self._activated.traceparent

    @property
    def custom_headers(self) -> Mapping[str, Any]:
        return self._activated.custom_headers

    @property
    def key(self) -> str:
        """Idempotency key for side effects: stable across redeliveries of this engine attempt,
        distinct per retry (``{engine}#{job id}[#{attempt}]``)."""
        return self._activated.key

    @property
    def workflow_key(self) -> str:
        """A key stable across retries, for "charge once however many attempts":
        ``{instance id}:{element id or type}`` (falls back to the job id without an instance):
        :attr:`workerless._core.model.ActivatedJob.workflow_key`, the one rule for every engine."""
        return self._activated.workflow_key

    @property
    def lease_expires_at(self) -> float:
        """The lease expiry the engine granted at activation (epoch seconds)."""
        return self._activated.lease_expires_at

    @property
    def activated(self) -> ActivatedJob:
        return self._activated

    # -- cooperation with the heartbeat -----------------------------------------------------------
    def lease_lost(self) -> bool:
        """Whether the heartbeat has seen the engine take the job back. Cheap: asks the job table
        at most every 2 s. A handler that sees True should stop side effects and raise; its result
        would be refused anyway."""
        if self._lost or self._lease_check is None:
            return self._lost
        now = self._clock()
        if self._checked_at is None or now - self._checked_at >= LEASE_CHECK_INTERVAL:
            self._checked_at = now
            self._lost = self._lease_check()
        return self._lost

    # -- logging ------------------------------------------------------------------------------------
    def log(self, message: str, level: str = "info") -> None:
        """Log a line against this job: to the function's log (with the job's correlation keys)
        and, where the engine keeps task logs (node-flow), to the engine in batches. Never raises."""
        if self._logger is not None:
            method = getattr(self._logger, level.lower(), None) or self._logger.info
            method(message)
        if self._log_sink is None:
            return
        with self._lock:
            self._lines.append({"message": str(message), "level": level.upper(), "at": time.time()})
            due = len(self._lines) >= LOG_FLUSH_LINES or self._clock() - self._last_flush >= LOG_FLUSH_SECONDS
        if due:
            self.flush_logs()

    def flush_logs(self) -> None:
        """Send buffered lines to the engine now (called before every report)."""
        with self._lock:
            lines, self._lines = self._lines, []
            self._last_flush = self._clock()
        if lines and self._log_sink is not None:
            self._log_sink(lines)
