"""One error hierarchy for workerless, and the errors a handler raises.

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

Where each part is declared (private modules: import every name from here):

- ``_handler``: what a handler author uses — :class:`JobError`, :class:`TerminalError`,
  :class:`ThrowError` (also importable from :mod:`workerless`). ``JobError`` is the handler's own
  word, not a failure of workerless, so it is not a :class:`WorkerlessError`: no retry policy reads it.
- ``_base``: :class:`WorkerlessError`, the root of workerless's own failures, and
  :class:`ConfigurationError`.
- ``_engine``: what the engine adapters raise (:class:`EngineError` and below).
- ``_pipeline``: what the AWS adapters and the pipeline's own states raise (:class:`PipelineError`
  and below).

Every class says ``workerless.errors`` is its module (its ``__module__``): a traceback names the
path users import, wherever the class is declared.

Retryable or not is said one way: the ``retryable`` flag every :class:`WorkerlessError` carries
(a class attribute where the class decides — RetryableEngineError True, FinalEngineError False —
and an instance attribute where the answer decides: a StoreError's DynamoDB code). The policies in
:mod:`workerless._core.retry` read only that flag.
"""

from __future__ import annotations

from workerless.errors._base import ConfigurationError, WorkerlessError
from workerless.errors._engine import (
    AuthExpiredError,
    EngineError,
    EngineUnavailableError,
    FinalEngineError,
    GarbledResponseError,
    LeaseLostError,
    MisdirectedError,
    PayloadTooLargeError,
    RateLimitedError,
    RejectedError,
    ResponseShapeError,
    RetryableEngineError,
)
from workerless.errors._handler import BusinessError, JobError, TerminalError, ThrowError
from workerless.errors._pipeline import (
    ClaimHeldError,
    ClaimStillLiveError,
    MessageFormatError,
    OutcomeTooLargeError,
    ParameterStoreError,
    PayloadError,
    PayloadGoneError,
    PipelineError,
    QueueError,
    ReportOwedError,
    SecretReadError,
    StoreError,
    TicketNotSentError,
)

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

# The path users import, not the private module that declares the class (tracebacks, reprs, the
# doctests' expected lines).
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
