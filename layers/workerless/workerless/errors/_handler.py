"""What a handler raises to choose how its job is reported (the errors a handler author uses; they
are importable from :mod:`workerless` too). Any other exception a handler raises fails the job with
``retries - 1`` and a backoff."""

from __future__ import annotations

from typing import Any


class JobError(Exception):
    """Raised by handler code to choose how the job is reported. Not a WorkerlessError: it is
    the handler's own word, not a failure of workerless."""


class TerminalError(JobError):
    """Fail the job with no retries left: the same input will never succeed.

    Example:
        >>> from workerless import Job, job_handler
        >>> from workerless.testing import assert_failed, run_handler
        >>> @job_handler("charge-payment")
        ... def handler(job: Job) -> dict:
        ...     if job.variables.get("amount", 0) <= 0:
        ...         raise TerminalError("amount must be a positive number")
        ...     return {"paymentOk": True}
        >>> _ = assert_failed(run_handler(handler, {"amount": 0}), terminal=True)
    """


class ThrowError(JobError):
    """Throw a business (BPMN) error to the process, caught by an error boundary event.

    Example:
        >>> raise ThrowError("CARD_DECLINED", "card declined", variables={"reason": "expired"})
        Traceback (most recent call last):
        workerless.errors.ThrowError: card declined
    """

    def __init__(self, error_code: str, message: str = "", *, variables: dict[str, Any] | None = None) -> None:
        super().__init__(message or error_code)
        self.error_code = error_code
        self.error_message = message or error_code
        self.variables = dict(variables or {})


BusinessError = ThrowError
