"""Running a handler function on a job and mapping what it returned or raised to an
:class:`~workerless._core.model.Outcome`: one function, used by the Lambda wrapper (through
:class:`~workerless._handler.delivery.Delivery`) and by :func:`workerless.testing.run_handler`, so a handler's
tests see the outcomes its deployment reports.

- a dict completes the job with those variables; None completes it with none; a pydantic model
  completes it with ``model_dump(by_alias=True, mode="json")``;
- variables that do not fit a typed handler's input model (``Job[Model]``) fail it terminally,
  before the handler runs, the message naming each bad field;
- an ``async def`` handler is run to completion on its own event loop;
- anything else returned (or variables that are not JSON) fails it, with ``retries - 1``;
- :class:`~workerless.errors.TerminalError` fails it with no retries left;
- :class:`~workerless.errors.ThrowError` throws the business error;
- any other exception fails it with ``retries - 1`` and the backoff.

Example:
    >>> from workerless.testing import make_activated_job
    >>> job = Job(make_activated_job("charge", {"amount": 5}))
    >>> run_job(lambda job: {"paid": job.variables["amount"]}, job, backoff_seconds=30).variables
    {'paid': 5}
    >>> run_job(lambda job: 1 / 0, job, backoff_seconds=3).message
    'ZeroDivisionError: division by zero'
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from collections.abc import Callable
from typing import Any

from workerless import observability
from workerless._core.job import Job
from workerless._core.model import Outcome
from workerless._handler.typed import HandlerSpec, InputValidationError, spec_of
from workerless.errors import TerminalError, ThrowError
from workerless.observability import logger

#: What a handler module defines: ``fn(job) -> dict`` (or None, or a pydantic model), or ``async def``.
HandlerFunction = Callable[[Job], Any]


def run_job(
    fn: HandlerFunction, job: Job[Any], *, backoff_seconds: int, spec: HandlerSpec | None = None, xray: bool = False
) -> Outcome:
    """Run ``fn`` once on ``job`` inside the job's span and return its :class:`Outcome`; the job's
    log lines are flushed to its sink before this returns, raised or not.

    ``backoff_seconds``: the backoff of a failure (the handler's, else its wiring's
    WORKERLESS_FAIL_BACKOFF_SECONDS). ``spec``: the function's input model and kind (default: read from its
    annotations, cached). ``xray``: an X-Ray subsegment around it (its wiring's ``xray_tracing``).
    Exceptions are the function's business: every ``Exception`` becomes an
    outcome (a ``BaseException`` propagates: the process is going down).
    """
    activated = job.activated
    spec = spec if spec is not None else spec_of(fn)
    retries_after_failure = None if activated.retries is None else max(0, activated.retries - 1)
    try:
        # A span whose parent is the engine's traceparent; pickup latency and run time metrics.
        with observability.job_span(activated, xray=xray):
            job._set_input(spec.parse(activated.variables))
            result = asyncio.run(fn(job)) if spec.is_async else fn(job)
    except InputValidationError as exc:
        # The same variables always fail the same way: no retry could help.
        logger.error("job input is invalid", extra={"error": str(exc)})
        outcome = Outcome.fail(str(exc), retries=0, terminal=True)
    except TerminalError as exc:
        # As for any other exception: the stack goes to the function's log here and, where the
        # engine keeps task logs (node-flow), to the task's log before the failure is reported,
        # so the lines explaining the failure are there when someone opens the failed task.
        stack = traceback.format_exc()
        logger.exception("handler raised TerminalError", extra={"error": f"{type(exc).__name__}: {exc}"})
        outcome = Outcome.fail(str(exc) or "terminal error", retries=0, terminal=True, stack=stack)
    except ThrowError as exc:
        outcome = Outcome.throw(exc.error_code, exc.error_message, exc.variables)
    except Exception as exc:
        stack = traceback.format_exc()
        # The function's log gets it here; engines that keep task logs get it with the report
        # (the adapter writes outcome.stack before reporting, re-reports included).
        logger.exception("handler raised", extra={"error": f"{type(exc).__name__}: {exc}"})
        outcome = Outcome.fail(
            f"{type(exc).__name__}: {exc}",
            retries=retries_after_failure,
            backoff_seconds=backoff_seconds,
            stack=stack,
        )
    else:
        outcome = _completion(result, retries_after_failure, backoff_seconds)
    finally:
        job.flush_logs()
    return outcome


def as_variables(result: object) -> object:
    """What a handler returned, as the variables to report: a pydantic model dumped as JSON with its
    aliases, anything else as it is (the caller checks it is a JSON object).

    Example:
        >>> as_variables({"paymentOk": True})
        {'paymentOk': True}
    """
    # A model can only exist once pydantic is imported: a plain handler never pays for the import.
    if "pydantic" in sys.modules:
        from pydantic import BaseModel

        if isinstance(result, BaseModel):
            return result.model_dump(by_alias=True, mode="json")
    return result


def _completion(result: object, retries_after_failure: int | None, backoff_seconds: int) -> Outcome:
    if result is None:
        return Outcome.complete({})
    result = as_variables(result)
    if not isinstance(result, dict):
        return Outcome.fail(
            f"handler returned {type(result).__name__}, not a JSON object (dict) of variables",
            retries=retries_after_failure,
            backoff_seconds=backoff_seconds,
        )
    outcome = Outcome.complete(result)
    try:
        # Encoded once here; the job store and the engine's report reuse these bytes (issue 29).
        outcome.encode_variables()
    except (TypeError, ValueError) as exc:
        return Outcome.fail(
            f"handler returned variables that are not JSON-serialisable: {exc}",
            retries=retries_after_failure,
            backoff_seconds=backoff_seconds,
        )
    return outcome
