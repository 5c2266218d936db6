"""One error hierarchy for workerless.

Errors are translated once, at the adapter boundary (``raise ... from exc``). Everything above the
adapters (poller, handler wrapper, heartbeat) only ever sees these classes, and decides what to do
from the class alone: retry the call, re-authenticate, re-resolve the engine, stop working on the
job, or give up.

::

    WorkerlessError
    ├── ConfigurationError              final: a setting or secret is missing/malformed, an engine
    │                                   says the worker is pointed at the wrong place (404 on
    │                                   discovery, 403 scope). Carries ``key``.
    ├── EngineError                     an engine call failed. Carries engine, job_id, status,
    │   │                               problem (the parsed RFC 9457 body, if any).
    │   ├── RetryableEngineError        the same call may succeed later. Carries retry_after.
    │   │   ├── RateLimitedError        429, or 503 with Retry-After: wait that long.
    │   │   ├── EngineUnavailableError  5xx, timeout, connection refused/dropped.
    │   │   │   └── GarbledResponseError  an answer that cannot be read at all (truncated or empty
    │   │   │                           JSON where JSON was due): lost in transit. Carries ``field``.
    │   │   ├── AuthExpiredError        401: drop the cached credential, mint again, retry.
    │   │   └── MisdirectedError        421: re-resolve the engine's address, retry.
    │   └── FinalEngineError            the same call will never succeed.
    │       ├── LeaseLostError          409 / LEASE_EXPIRED / refused renewal: someone else has the
    │       │                           job (or it is done). Stop; on report it means "finished".
    │       ├── PayloadTooLargeError    413 or over the engine's documented cap. Carries ``cap``.
    │       ├── RejectedError           any other 4xx: the request itself is wrong.
    │       └── ResponseShapeError      the engine answered something that is not the documented
    │                                   shape. Carries ``field``.
    ├── PipelineError                   workerless's own plumbing (SQS, DynamoDB, S3, SSM) failed.
    │   ├── MessageFormatError          an SQS message body is not a workerless message.
    │   ├── QueueError                  an SQS call failed after botocore's retries.
    │   ├── ParameterStoreError         a Parameter Store call failed. Carries code.
    │   ├── SecretReadError             Secrets Manager could not answer the engine secret's read
    │   │                               (throttled, 5xx, timeout): retryable. Carries code.
    │   ├── StoreError                  a DynamoDB call failed after retries. Carries code.
    │   │   ├── OutcomeTooLargeError    the outcome fits neither the record nor the claim check.
    │   │   └── PayloadError            an S3 call of the claim check failed (AccessDenied: a
    │   │       │                           configuration fault, never read as "missing").
    │   │       └── PayloadGoneError    the object a pointer names is gone (NoSuchKey) or is
    │   │                               not what the pointer says: final.
    │   ├── ReportOwedError             the result is stored, the engine has not accepted it yet:
    │   │                               the message stays in flight while the heartbeat re-reports.
    │   ├── ClaimHeldError              another delivery of the same job holds a live claim.
    │   └── ClaimStillLiveError         a dead-lettered job's handler still holds a live claim.
    └── JobError                        raised by handler code to choose the outcome.
        ├── TerminalError               fail the job with no retries left.
        └── ThrowError                  throw a business error (BPMN error) with a code to the
                                        process (Sheptra's "throw error"). Alias: BusinessError.

Any other exception raised by a handler fails the job with ``retries - 1`` and a backoff.

Retryable or not is said one way: the ``retryable`` flag every :class:`WorkerlessError` carries
(a class attribute where the class decides — RetryableEngineError True, FinalEngineError False —
and an instance attribute where the answer decides: a StoreError's DynamoDB code). The policies in
:mod:`workerless._core.retry` read only that flag.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthExpiredError",
    "BusinessError",
    "ClaimHeldError",
    "ClaimStillLiveError",
    "ConfigurationError",
    "EngineError",
    "EngineUnavailableError",
    "FinalEngineError",
    "GarbledResponseError",
    "JobError",
    "LeaseLostError",
    "MessageFormatError",
    "MisdirectedError",
    "OutcomeTooLargeError",
    "ParameterStoreError",
    "PayloadError",
    "PayloadGoneError",
    "PayloadTooLargeError",
    "PipelineError",
    "QueueError",
    "RateLimitedError",
    "RejectedError",
    "ReportOwedError",
    "ResponseShapeError",
    "RetryableEngineError",
    "SecretReadError",
    "StoreError",
    "TerminalError",
    "ThrowError",
    "TicketNotSentError",
    "WorkerlessError",
]


class WorkerlessError(Exception):
    """Base of every error workerless raises on purpose. ``retryable``: whether the same call may
    succeed later (the one flag :mod:`workerless._core.retry` reads)."""

    retryable: bool = False


class ConfigurationError(WorkerlessError):
    """A setting, secret or engine address is missing or malformed. Never retried.

    Example:
        >>> raise ConfigurationError("SHEPTRA_API_URL is required in config mode", key="SHEPTRA_API_URL")
        Traceback (most recent call last):
        workerless.errors.ConfigurationError: SHEPTRA_API_URL is required in config mode
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class EngineError(WorkerlessError):
    """An engine call failed. ``problem`` is the parsed RFC 9457 body when the engine sent one."""

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        job_id: str | None = None,
        status: int | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.engine = engine
        self.job_id = job_id
        self.status = status
        self.problem = problem or {}

    def __str__(self) -> str:
        parts = [super().__str__(), f"engine={self.engine}"]
        if self.job_id is not None:
            parts.append(f"job_id={self.job_id}")
        if self.status is not None:
            parts.append(f"status={self.status}")
        return " ".join(parts)


class RetryableEngineError(EngineError):
    """The same call may succeed later; wait ``retry_after`` seconds (None: use the policy's backoff)."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        job_id: str | None = None,
        status: int | None = None,
        problem: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, engine=engine, job_id=job_id, status=status, problem=problem)
        self.retry_after = retry_after


class RateLimitedError(RetryableEngineError):
    """429, or 503 with Retry-After: the engine asked us to slow down."""


class EngineUnavailableError(RetryableEngineError):
    """5xx, a timeout, or a refused/dropped connection."""


class GarbledResponseError(EngineUnavailableError):
    """The answer could not be read at all: a truncated or empty body where JSON was due, as a proxy
    or a dropped connection leaves it. Unlike :class:`ResponseShapeError` (a readable answer of the
    wrong shape: the engine speaks another contract, final), this says nothing about the engine, so
    the same call may be made again where the engine's contract allows it. ``field`` names what was
    unreadable (``"body"``). The request may have taken effect: the caller treats the outcome as
    unknown."""

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        field: str = "body",
        job_id: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, engine=engine, job_id=job_id, status=status)
        self.field = field


class AuthExpiredError(RetryableEngineError):
    """401: the credential was refused. Drop it, mint a new one, retry once."""


class MisdirectedError(RetryableEngineError):
    """421 Misdirected Request: the environment moved. Re-resolve the engine address, retry."""


class FinalEngineError(EngineError):
    """The same call will never succeed; do not retry it."""


class LeaseLostError(FinalEngineError):
    """The lease is gone: another worker holds the job, or it is already finished.

    On extend: stop working on the job. On report: treat as "someone else finished this".
    """


class PayloadTooLargeError(FinalEngineError):
    """The request was over the engine's cap (413, or checked before sending)."""

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        cap: int,
        job_id: str | None = None,
        status: int | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, engine=engine, job_id=job_id, status=status, problem=problem)
        self.cap = cap


class RejectedError(FinalEngineError):
    """Any other 4xx: the request is wrong and resending it will not help."""


class ResponseShapeError(FinalEngineError):
    """The engine answered something that is not the documented shape; ``field`` names what."""

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        field: str,
        job_id: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, engine=engine, job_id=job_id, status=status)
        self.field = field


class PipelineError(WorkerlessError):
    """workerless's own AWS plumbing failed."""


class MessageFormatError(PipelineError):
    """An SQS message body is not a workerless message; ``field`` names what was wrong."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class StoreError(PipelineError):
    """A DynamoDB call on the job table failed after retries.

    ``code`` is DynamoDB's error code (None for a transport error or a refused deadline);
    ``retryable`` says whether the same call may succeed later (a throttle, a 5xx, a dropped
    connection), as opposed to a refusal that will not change (access denied, a malformed request)
    or a call refused because its deadline has passed.
    """

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class OutcomeTooLargeError(StoreError):
    """The outcome can be neither kept in the record nor carried by the claim check."""

    def __init__(self, size: int, cap: int, where: str) -> None:
        super().__init__(f"result is {size} bytes; {where} at most {cap} bytes", retryable=False)
        self.size = size
        self.cap = cap


class PayloadError(StoreError):
    """An S3 call of the claim check failed (after botocore's retries), or an object is not what its
    pointer says."""


class PayloadGoneError(PayloadError):
    """The claim-check object a pointer names is gone (S3 NoSuchKey: expired with the bucket's
    lifecycle, or deleted) or is not what its pointer says (size, SHA-256): no read will ever return
    it. Never retryable. An S3 refusal (AccessDenied) is a plain :class:`PayloadError` instead: with
    the template's s3:ListBucket grants S3 answers a missing object NoSuchKey, so a 403 means a
    permission is missing, not the object."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code, retryable=False)


class QueueError(PipelineError):
    """An SQS call failed after botocore's retries."""


class ParameterStoreError(PipelineError):
    """A Parameter Store call failed. ``retryable``: the same call may succeed later (a throttle, a
    5xx, a dropped connection). ``code`` is SSM's error code (None for a transport error)."""

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class SecretReadError(PipelineError):
    """Secrets Manager did not answer the engine secret's read (throttled, its own 5xx, a timeout or
    a dropped connection): the same read may succeed later, so the invocation fails or is retried,
    but nothing is reported final. A read Secrets Manager refuses for good (access denied, no such
    secret, a secret it cannot decrypt) or a malformed secret is a ConfigurationError instead.
    ``code`` is Secrets Manager's error code (None for a transport error)."""

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class ReportOwedError(PipelineError):
    """The result is stored but the engine has not accepted it yet: the message stays in flight (a
    batch item failure) while the heartbeat re-reports it; SQS's redelivery is the fallback."""


class ClaimHeldError(PipelineError):
    """Another delivery of the same job holds a live claim: leave this one for redelivery."""


class ClaimStillLiveError(PipelineError):
    """The dead-lettered job's handler still holds a live claim: try again later."""


class TicketNotSentError(PipelineError):
    """A heartbeat ticket's successors could not be sent (SQS refused), or the ticket failed too
    many rounds in a row: the message it came from must come back in ``retry_in`` seconds."""

    def __init__(self, message: str, *, retry_in: int) -> None:
        super().__init__(message)
        self.retry_in = retry_in


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
