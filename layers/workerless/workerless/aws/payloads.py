"""S3: the claim check's objects (see :mod:`workerless._core.claimcheck`): job variables and stored
outcomes too large for their queue or table.

Two calls, PutObject and GetObject, on keys under the prefix a function is granted
(``arn:aws:s3:::<bucket>/<prefix>/*``). The bucket encrypts every object (SSE-S3) and its
lifecycle rule expires them: nothing here deletes.

A missing object and a refused read are told apart: each function that reads objects may also list
the prefixes it reads (``s3:ListBucket`` held by ``s3:prefix``), so S3 answers a missing key 404
NoSuchKey (:class:`PayloadGoneError`, final: the object expired or was deleted) and keeps 403
AccessDenied for a real permission fault (a :class:`PayloadError` naming it as configuration). Without
that grant S3 answers a missing key 403 too ("If you don't have the s3:ListBucket permission, Amazon
S3 returns an HTTP status code 403 Access Denied error", the GetObject API reference).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from workerless._core.claimcheck import PayloadRef, digest

# Declared in the one error tree (workerless.errors); re-exported where callers have always found it.
from workerless.errors import PayloadError as PayloadError
from workerless.errors import PayloadGoneError as PayloadGoneError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from workerless.aws.clients import Clients

#: S3 error codes that the same call meets again however often it is retried.
FINAL_ERROR_CODES = frozenset(
    {"AccessDenied", "NoSuchBucket", "NoSuchKey", "InvalidBucketName", "InvalidRequest", "AllAccessDisabled"}
)


class Payloads:
    """The claim-check bucket. ``bucket`` None: no bucket configured (nothing is offloaded).

    Example:
        An illustration (it needs the bucket; tests/functional run it on moto)::

            payloads = Payloads("workerless-payloads")
            ref = payloads.put("jobs/charge-payment/4f1c...", b'{"orderId": "o1"}')
            assert payloads.get(ref) == b'{"orderId": "o1"}'
    """

    def __init__(self, bucket: str | None, *, client: S3Client | None = None, clients: Clients | None = None) -> None:
        self.bucket = bucket or None
        self._client, self._clients = client, clients  # the client, else whose to build on first use

    @property
    def enabled(self) -> bool:
        return self.bucket is not None

    @property
    def client(self) -> S3Client:
        if self._client is None:
            from workerless.aws.clients import Clients

            # Not given one (a test's store on moto): a client of its own, on the default endpoint.
            self._client = (self._clients or Clients()).s3
        return self._client

    def _call(self, operation: str, **kwargs: object) -> dict[str, Any]:
        from workerless.aws.clients import DeadlineReachedError, call_aws, error_code

        def translate(exc: Exception) -> NoReturn:
            code, what = error_code(exc), f"S3 {operation} of {kwargs.get('Key')}"
            if isinstance(exc, DeadlineReachedError):
                raise PayloadError(
                    f"S3 {operation} not sent: the invocation's deadline has passed", retryable=False
                ) from exc
            key, bucket = kwargs.get("Key"), kwargs.get("Bucket")
            if code == "NoSuchKey":
                raise PayloadGoneError(
                    f"S3 object {key} is gone from bucket {bucket} ({code}): it expired with the bucket's "
                    "lifecycle or was deleted, and no read will return it",
                    code="NoSuchKey",
                ) from exc
            if code == "AccessDenied":
                raise PayloadError(
                    f"S3 {operation} of {key} in bucket {bucket} was refused (AccessDenied): a configuration fault "
                    "(the function's role, the bucket's policy or an organisation policy does not allow it; "
                    "a missing object answers NoSuchKey to these roles, so this is not one)",
                    code="AccessDenied",
                    retryable=False,
                ) from exc
            if code:
                raise PayloadError(
                    f"{what} failed: {code}", code=code, retryable=code not in FINAL_ERROR_CODES
                ) from exc
            raise PayloadError(f"{what} failed: {type(exc).__name__}") from exc

        return call_aws(self.client, operation, kwargs, translate)

    def put(self, key: str, data: bytes) -> PayloadRef:
        """Write ``data`` at ``key``; the pointer to it."""
        if self.bucket is None:
            raise PayloadError("no payload bucket is configured (WORKERLESS_PAYLOAD_BUCKET)", retryable=False)
        self._call("put_object", Bucket=self.bucket, Key=key, Body=data)
        return PayloadRef(bucket=self.bucket, key=key, size=len(data), sha256=digest(data))

    def get(self, ref: PayloadRef) -> bytes:
        """The object ``ref`` points at, checked against its size and SHA-256."""
        answer = self._call("get_object", Bucket=ref.bucket, Key=ref.key)
        try:
            data: bytes = answer["Body"].read()
        except Exception as exc:  # a broken stream is a failed read, tried again
            raise PayloadError(f"S3 get_object of {ref.key}: reading the body failed: {type(exc).__name__}") from exc
        if len(data) != ref.size or digest(data) != ref.sha256:
            raise PayloadGoneError(
                f"S3 object {ref.key} is {len(data)} bytes and does not match its pointer ({ref.size} bytes, "
                "SHA-256 checked)"
            )
        return data
