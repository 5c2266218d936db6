"""The handler-testing kit: build a job, run a handler, assert on the outcome.

:func:`run_handler` does not re-implement the wrapper: it calls the same
:func:`workerless._handler.execution.run_job` the Lambda wrapper's delivery calls (which runs the function
inside its span and maps what it returned or raised to an :class:`~workerless._core.model.Outcome`), on a
:class:`~workerless._core.job.Job` whose ``job.lease_lost()`` answers what the test says and whose
``job.log`` lines go to a list. Claiming, storing and reporting are the pipeline's business and are
tested by the pipeline's own tests.

Example:
    >>> from workerless import Job, TerminalError, job_handler
    >>> @job_handler("charge-payment")
    ... def handler(job: Job) -> dict:
    ...     if job.variables["amount"] <= 0:
    ...         raise TerminalError("amount must be positive")
    ...     return {"paymentOk": True}
    >>> assert_completed(run_handler(handler, {"amount": 5}), paymentOk=True)
    {'paymentOk': True}
    >>> _ = assert_failed(run_handler(handler, {"amount": 0}), terminal=True, message="positive")
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workerless._core.job import Job
from workerless._core.model import ActivatedJob, JobRef, Outcome

if TYPE_CHECKING:
    from workerless._core.ports import LambdaContext

LeaseLost = bool | Callable[[], bool]


class StubLambdaContext:
    """Enough of a Lambda context for a handler: names, request id, and a remaining time that
    counts down from ``remaining_seconds``."""

    def __init__(self, *, function_name: str = "test-handler", remaining_seconds: float = 60.0) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 256
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.aws_request_id = uuid.uuid4().hex
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "test"
        self._deadline = time.monotonic() + remaining_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler(path: str | Path, name: str = "handler") -> Callable[..., Any]:
    """Import a function's ``app.py`` by path and return its entry point (``handler``).

    Every function's module is ``app`` (``functions/chargepayment/app.py``, ``functions/poller/app.py``),
    so several cannot be imported by that name in one process; this loads the file as a module of its
    own, as Lambda does.

    A relative ``path`` that is not there from the working directory is looked for from the calling
    file's directory and each one above it: a test in ``tests/unit/`` finds
    ``functions/chargepayment/app.py`` at the project's root whichever directory pytest runs from.

    Example (an illustration: it needs a running engine or AWS, which tests/functional provide)::

        handler = load_handler("functions/chargepayment/app.py")
    """
    import importlib.util
    import sys

    file = _find(Path(path), Path(sys._getframe(1).f_code.co_filename))
    module_name = "workerless_handler_" + re.sub(r"\W", "_", str(file.resolve().with_suffix("")))
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a Python module from {str(file)!r}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: Callable[..., Any] | None = getattr(module, name, None)
    if found is None:
        raise AttributeError(f"{str(file)!r} defines no {name!r}")
    return found


def _find(path: Path, caller: Path) -> Path:
    if path.is_absolute() or path.exists():
        return path
    for base in caller.resolve().parents:
        if (base / path).is_file():
            return base / path
    raise FileNotFoundError(f"{str(path)!r}: not found from {Path.cwd()} nor from {caller.parent} or above")


def make_activated_job(
    job_type: str = "test-job",
    variables: Mapping[str, Any] | None = None,
    *,
    job_id: str | None = None,
    engine: str = "test",
    attempt: str = "",
    retries: int | None = 3,
    instance_id: str | None = "instance-1",
    element_id: str | None = None,
    traceparent: str | None = None,
    custom_headers: Mapping[str, Any] | None = None,
    lease_seconds: float = 60.0,
    activated_at: float | None = None,
) -> ActivatedJob:
    """An :class:`~workerless._core.model.ActivatedJob` as an engine adapter would hand it over."""
    now = time.time() if activated_at is None else activated_at
    return ActivatedJob(
        ref=JobRef(engine, job_id or f"job-{uuid.uuid4().hex[:12]}", job_type, attempt=attempt),
        variables=dict(variables or {}),
        lease_expires_at=now + lease_seconds,
        activated_at=now,
        retries=retries,
        instance_id=instance_id,
        element_id=element_id,
        traceparent=traceparent,
        custom_headers=dict(custom_headers or {}),
    )


def make_job(
    job_type: str = "test-job",
    variables: Mapping[str, Any] | None = None,
    *,
    lease_lost: LeaseLost = False,
    lambda_context: LambdaContext | None = None,
    **fields: Any,
) -> Job:
    """A :class:`~workerless._core.job.Job` as a handler receives it.

    Args:
        job_type: the job type (the route).
        variables: the job's variables.
        lease_lost: what ``job.lease_lost()`` answers: a bool, or a callable asked each time the
            handler checks (e.g. ``lambda: clock() > 5``).
        lambda_context: the Lambda context (default: a :class:`StubLambdaContext`).
        **fields: any of :func:`make_activated_job`'s keywords (``job_id``, ``retries``,
            ``instance_id``, ``element_id``, ``traceparent``, ``custom_headers``, ...).

    Example:
        >>> job = make_job("send-receipt", {"orderId": "7"}, retries=1)
        >>> job.type, job.variables["orderId"], job.retries
        ('send-receipt', '7', 1)
    """
    activated = make_activated_job(job_type, variables, **fields)
    check = lease_lost if callable(lease_lost) else (lambda: bool(lease_lost))
    return Job(
        activated,
        lambda_context=lambda_context if lambda_context is not None else StubLambdaContext(),
        lease_check=check,
        # Every call asks again: a test flips the answer without waiting out the 2 s cache.
        clock=_always_due(),
    )


def _always_due() -> Callable[[], float]:
    ticks = iter(range(0, 10**12, 10))
    return lambda: float(next(ticks))


def run_handler(
    handler: Callable[..., Any],
    job: Job | ActivatedJob | Mapping[str, Any] | None = None,
    *,
    job_type: str | None = None,
    backoff_seconds: int | None = None,
    lease_lost: LeaseLost | None = None,
    context: LambdaContext | None = None,
    logs: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> Outcome:
    """Run a handler on one job and return the :class:`~workerless._core.model.Outcome` the wrapper
    would store and report.

    Args:
        handler: a function decorated with :func:`~workerless.job_handler` (its job type and
            ``backoff_seconds`` are used), or a plain ``fn(job) -> dict`` (then give ``job_type``
            or a job).
        job: the variables (a dict), a job from :func:`make_job`, or an ActivatedJob. None: ``{}``.
        job_type: the job type for a plain function (default: the decorated handler's).
        backoff_seconds: overrides the backoff of a failure (default: the decorator's, else
            WORKERLESS_FAIL_BACKOFF_SECONDS, 30).
        lease_lost: what ``job.lease_lost()`` answers (default: the job's own, else False).
        context: the Lambda context (default: the job's, else a :class:`StubLambdaContext`).
        logs: a list that receives the lines the handler sent with ``job.log`` (``message``,
            ``level``, ``at``), as the engine's task log would.
        **fields: for a dict ``job``: keywords of :func:`make_activated_job` (``retries``,
            ``traceparent``, ...).

    Raises:
        ValueError: the job's type is not the decorated handler's (the wrapper refuses it too).
    """
    from workerless._handler.execution import run_job
    from workerless._handler.handler import JobProcessor
    from workerless.observability import logger

    processor: JobProcessor | None = getattr(handler, "processor", None)
    fn: Callable[[Job], Any] = handler
    spec = None
    if processor is not None:
        spec = processor.spec
        if job_type is not None and job_type != processor.job_type:
            raise ValueError(f"handler is for job type {processor.job_type!r}, not {job_type!r}")
        fn = processor.fn
        if backoff_seconds is None:
            backoff_seconds = processor.backoff_seconds
    wanted_type = processor.job_type if processor is not None else job_type

    lost: Callable[[], bool] = lambda: False  # noqa: E731 - a default answer
    if isinstance(job, Job):
        activated, context = job.activated, context if context is not None else job.lambda_context
        lost = job.lease_lost
    elif isinstance(job, ActivatedJob):
        activated = job
    else:
        if wanted_type is None:
            raise ValueError("give job_type (or a job) to run a plain function")
        activated = make_activated_job(wanted_type, job, **fields)
    if wanted_type is None:
        wanted_type = activated.ref.job_type
    if activated.ref.job_type != wanted_type:
        raise ValueError(f"job of type {activated.ref.job_type!r} given to the {wanted_type!r} handler")
    if lease_lost is not None:
        lost = lease_lost if callable(lease_lost) else (lambda: bool(lease_lost))
    lines = logs if logs is not None else []
    run = Job(
        activated,
        lambda_context=context if context is not None else StubLambdaContext(),
        lease_check=lost,
        log_sink=lambda batch: lines.extend(dict(line) for line in batch),
        logger=logger,
    )
    if backoff_seconds is None:
        from workerless._core.settings import get_settings

        backoff_seconds = get_settings().fail_backoff_seconds
    return run_job(fn, run, backoff_seconds=backoff_seconds, spec=spec)


# ------------------------------------------------------------------------------------------------
# Assertions: each names what the outcome was when it is not what was expected.


def _describe(outcome: Outcome) -> str:
    if outcome.kind == "complete":
        return f"completed with {outcome.variables!r}"
    if outcome.kind == "throw":
        return f"threw {outcome.error_code!r}: {outcome.message!r} with {outcome.variables!r}"
    terminal = ", terminal" if outcome.terminal else ""
    return f"failed ({outcome.message!r}, retries {outcome.retries}{terminal})"


def assert_completed(
    outcome: Outcome, variables: Mapping[str, Any] | None = None, /, **expected: Any
) -> dict[str, Any]:
    """Assert the job completed; with ``variables``, with exactly those; with keywords, with at
    least those values. Returns the variables.

    Example:
        >>> assert_completed(Outcome.complete({"ok": True, "id": 7}), ok=True)
        {'ok': True, 'id': 7}
    """
    if outcome.kind != "complete":
        raise AssertionError(f"expected the job to complete, but it {_describe(outcome)}")
    got = dict(outcome.variables or {})
    if variables is not None and got != dict(variables):
        raise AssertionError(f"expected the job to complete with {dict(variables)!r}, got {got!r}")
    wrong = {k: got.get(k, "<missing>") for k, v in expected.items() if k not in got or got[k] != v}
    if wrong:
        raise AssertionError(f"completed, but {wrong!r} != expected {dict(expected)!r} (all: {got!r})")
    return got


def assert_failed(
    outcome: Outcome,
    *,
    message: str | None = None,
    retries: int | None = None,
    terminal: bool | None = None,
    backoff_seconds: int | None = None,
) -> Outcome:
    """Assert the job failed; ``message`` is a substring of its error message; ``terminal`` says
    whether it was a :class:`~workerless.TerminalError` (no retries left).

    Example:
        >>> _ = assert_failed(Outcome.fail("boom", retries=2), message="boom", retries=2, terminal=False)
    """
    if outcome.kind != "fail":
        raise AssertionError(f"expected the job to fail, but it {_describe(outcome)}")
    if message is not None and message not in (outcome.message or ""):
        raise AssertionError(f"expected a failure mentioning {message!r}, but it {_describe(outcome)}")
    if retries is not None and outcome.retries != retries:
        raise AssertionError(f"expected {retries} retries left, but it {_describe(outcome)}")
    if terminal is not None and outcome.terminal != terminal:
        raise AssertionError(f"expected terminal={terminal}, but it {_describe(outcome)}")
    if backoff_seconds is not None and outcome.backoff_seconds != backoff_seconds:
        raise AssertionError(f"expected a {backoff_seconds} s backoff, got {outcome.backoff_seconds} s")
    return outcome


def assert_thrown(
    outcome: Outcome,
    error_code: str | None = None,
    *,
    message: str | None = None,
    variables: Mapping[str, Any] | None = None,
) -> Outcome:
    """Assert the handler threw a business error (``ThrowError``), with this code / message
    substring / variables.

    Example:
        >>> _ = assert_thrown(Outcome.throw("CARD_DECLINED", "declined"), "CARD_DECLINED")
    """
    if outcome.kind != "throw":
        raise AssertionError(f"expected a thrown business error, but it {_describe(outcome)}")
    if error_code is not None and outcome.error_code != error_code:
        raise AssertionError(f"expected error code {error_code!r}, but it {_describe(outcome)}")
    if message is not None and message not in (outcome.message or ""):
        raise AssertionError(f"expected a message mentioning {message!r}, but it {_describe(outcome)}")
    if variables is not None and dict(outcome.variables or {}) != dict(variables):
        raise AssertionError(f"expected variables {dict(variables)!r}, but it {_describe(outcome)}")
    return outcome
