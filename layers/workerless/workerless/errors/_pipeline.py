"""What workerless's own plumbing raises — SQS, DynamoDB, S3, SSM and Secrets Manager after botocore's
retries, and the pipeline's own states (a report owed, a claim held) — as the AWS adapters translate
it (see :mod:`workerless.errors` for the tree)."""

from __future__ import annotations

from workerless.errors._base import WorkerlessError


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
