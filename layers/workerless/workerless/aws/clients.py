"""The boto3 clients a wiring owns (:class:`Clients`: one per service), and the deadline that bounds
their calls."""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import boto3.session
    from botocore.client import BaseClient
    from botocore.config import Config
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_ssm import SSMClient


class DeadlineReachedError(Exception):
    """An AWS request was not sent: the :func:`call_deadline` of the code making it has passed.
    (Not a botocore error, so botocore's retry handler does not retry it; the store and queue
    wrappers translate it.)"""

    def __init__(self) -> None:
        super().__init__("the invocation's deadline for AWS calls has passed; the request was not sent")


#: Every runtime client's timeouts (seconds): how long an HTTP attempt may take to connect, then
#: how long it may wait for each read of the answer. One attempt of a call (a small request and
#: answer, as every call of the pipeline's but a claim-check upload is) takes at most their sum.
CONNECT_TIMEOUT_SECONDS = 3
READ_TIMEOUT_SECONDS = 10
ATTEMPT_SECONDS = CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS

#: The time.monotonic() after which no AWS call (and no botocore retry of one) may start, for the
#: code running in this context; None: no deadline.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("workerless_aws_deadline", default=None)


@contextlib.contextmanager
def call_deadline(deadline: float | None, *, attempt_seconds: float = 0.0) -> Iterator[None]:
    """Within the block, refuse to start any AWS request (first attempt or botocore retry) once
    ``time.monotonic()`` has reached ``deadline - attempt_seconds``: the call fails with
    :class:`DeadlineReachedError`.

    botocore's own retries (standard mode, 4 attempts, up to 20 s backoff) and a caller's retry loop
    would otherwise carry on past the Lambda's timeout, where Lambda kills the process mid-call. An
    attempt already started is bounded only by the client's connect and read timeouts: with
    ``attempt_seconds`` :data:`ATTEMPT_SECONDS` none still runs at ``deadline`` (the poller's calls);
    with 0 one may run up to that long past it.
    """
    token = _deadline.set(None if deadline is None else deadline - attempt_seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def current_deadline() -> float | None:
    """The ``time.monotonic()`` deadline of the :func:`call_deadline` block running (None: none),
    for the retry policies that loop over AWS calls (:mod:`workerless._core.retry`)."""
    return _deadline.get()


def call_aws(
    client: BaseClient | object,
    operation: str,
    kwargs: Mapping[str, object],
    translate: Callable[[Exception], NoReturn],
) -> dict[str, Any]:
    """``client.<operation>(**kwargs)``'s answer. botocore's errors (a refusal, a transport failure)
    and a request refused past its :func:`call_deadline` go to ``translate``, which raises the
    caller's error from :mod:`workerless.errors` (errors are translated once, here at the adapter
    boundary, by each adapter's own rule)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        answer: dict[str, Any] = getattr(client, operation)(**kwargs)
    except (ClientError, BotoCoreError, DeadlineReachedError) as exc:
        translate(exc)
    return answer


def error_code(exc: Exception) -> str:
    """A botocore ClientError's error code ("error" when it has none; "" for any other error)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", "error"))


def _refuse_past_deadline(**_: object) -> None:
    # "before-send" runs before every HTTP attempt of every call, botocore's retries included.
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlineReachedError()


#: SDK loggers whose DEBUG records print every request's parameters and body. Ours carry credentials:
#: SQS job messages and heartbeat tickets hold node-flow lease tokens and StageNext ack tokens, and
#: the job table holds the engines' shared state (tokens, worker sessions).
_SDK_LOGGERS = ("botocore", "boto3", "s3transfer")


def quiet_sdk_debug_logs() -> None:
    """Keep the AWS SDK's loggers at INFO or above, whatever the root logger's level.

    Lambda's ApplicationLogLevel DEBUG (or a root logger set to DEBUG) would otherwise let botocore
    log each SendMessage / PutItem body, tokens included. Powertools' own DEBUG is unaffected.
    """
    import logging

    for name in _SDK_LOGGERS:
        sdk_logger = logging.getLogger(name)
        if sdk_logger.level < logging.INFO:  # NOTSET (inherits the root's level) or DEBUG
            sdk_logger.setLevel(logging.INFO)


def default_config() -> Config:
    """What every runtime client gets unless its owner passes another: short connect and read
    timeouts (a Lambda's minutes are the budget) and botocore's standard retries."""
    from botocore.config import Config

    return Config(
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        retries={"mode": "standard", "max_attempts": 4},
        tcp_keepalive=True,
    )


class Clients:
    """The boto3 clients of one wiring: one per service, built on first use from the ``session``,
    ``endpoint_url`` and ``config`` given (a default session, none and :func:`default_config`), each
    with the deadline handler registered on it (not on botocore's process-wide handlers).

    ``on_client`` runs on each client as it is built (local mode and chaos register their own
    per-client handlers there).
    """

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        config: Config | None = None,
        session: boto3.session.Session | None = None,
        on_client: Callable[[BaseClient], None] | None = None,
    ) -> None:
        self.endpoint_url = endpoint_url
        self._config = config
        self._session = session
        self._on_client = on_client
        self._built: dict[str, BaseClient] = {}
        self._lock = threading.Lock()

    def get(self, service: str) -> BaseClient:
        """The client for ``service`` (built once)."""
        built = self._built.get(service)
        if built is not None:
            return built
        with self._lock:  # sessions are not thread-safe; clients are
            built = self._built.get(service)
            if built is None:
                built = self._build(service)
                self._built[service] = built
        return built

    def _build(self, service: str) -> BaseClient:
        import boto3

        quiet_sdk_debug_logs()
        if self._session is None:
            self._session = boto3.session.Session()
        config = self._config if self._config is not None else default_config()
        built: BaseClient = self._session.client(service, endpoint_url=self.endpoint_url, config=config)  # type: ignore[call-overload]
        # First among the "before-send" handlers: ahead of any that answers in place of sending (moto's
        # in-process AWS, botocore's Stubber), so a refused request is not carried out by them either.
        built.meta.events.register_first("before-send", _refuse_past_deadline, unique_id="workerless-deadline")
        if self._on_client is not None:
            self._on_client(built)
        return built

    @property
    def dynamodb(self) -> DynamoDBClient:
        return self.get("dynamodb")  # type: ignore[return-value]

    @property
    def sqs(self) -> SQSClient:
        return self.get("sqs")  # type: ignore[return-value]

    @property
    def s3(self) -> S3Client:
        return self.get("s3")  # type: ignore[return-value]

    @property
    def ssm(self) -> SSMClient:
        return self.get("ssm")  # type: ignore[return-value]

    @property
    def secretsmanager(self) -> SecretsManagerClient:
        return self.get("secretsmanager")  # type: ignore[return-value]
