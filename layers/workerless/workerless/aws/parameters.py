"""SSM Parameter Store: the routes, one String parameter per route under the stack's path.

The template gives each route an ``AWS::SSM::Parameter`` named ``<path>/<job type>`` whose value is
the route's JSON (type, queue URL, max in flight, engine queue), and the functions only the path
(WORKERLESS_ROUTES_PATH). The poller reads them with GetParametersByPath once per container, at its
first poll (:class:`workerless._poller.routes.RouteReader`): Parameter Store's standard throughput
(40 transactions a second per account and region) is shared with everything else the account does,
so nothing else calls it.

Errors are translated here, once: a refusal that will not change (access denied, a path that is not
a valid hierarchy) is a :class:`~workerless.errors.ConfigurationError` naming WORKERLESS_ROUTES_PATH;
a throttle, a 5xx or a dropped connection is a retryable :class:`ParameterStoreError` (retried by
:data:`workerless._core.retry.PARAMETERS` within the caller's deadline, then raised).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from workerless.errors import ConfigurationError, ParameterStoreError

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient

#: GetParametersByPath answers at most 10 parameters a page.
PAGE_SIZE = 10
#: Pages read at most: 100 pages are 1,000 routes, twice what CloudFormation's 500 resources a stack
#: could ever declare (a route is several resources). A NextToken past it is a fault, not more routes.
MAX_PAGES = 100
#: Parameter Store's error codes worth another call (throttling, its own failures).
_RETRYABLE_CODES = frozenset(
    {"ThrottlingException", "TooManyUpdates", "InternalServerError", "InternalFailure", "ServiceUnavailable"}
)
KEY = "WORKERLESS_ROUTES_PATH"


def is_retryable(error: Exception) -> bool:
    return isinstance(error, ParameterStoreError) and error.retryable


def read_path(
    path: str,
    *,
    deadline: float,
    client: SSMClient | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, str]:
    """Every String parameter directly under ``path`` (not recursive): {name: value}, in name order.

    Raises ConfigurationError (access denied, an invalid path, more pages than any stack has) or,
    once the retries or the deadline are spent, ParameterStoreError.
    """
    from workerless.aws.clients import call_deadline

    ssm = client
    if ssm is None:
        from workerless.aws.clients import Clients

        ssm = Clients().ssm
    with call_deadline(deadline):  # botocore's own retries stop there too
        return _read_pages(ssm, path, deadline=deadline, sleep=sleep, clock=clock)


def _read_pages(
    ssm: SSMClient, path: str, *, deadline: float, sleep: Callable[[float], None], clock: Callable[[], float]
) -> dict[str, str]:
    from workerless._core.retry import PARAMETERS

    found: dict[str, str] = {}
    token: str | None = None
    for _ in range(MAX_PAGES):
        kwargs: dict[str, object] = {"Path": path, "Recursive": False, "MaxResults": PAGE_SIZE}
        if token:
            kwargs["NextToken"] = token
        answer = PARAMETERS.call(
            functools.partial(_call, ssm, path, kwargs),
            deadline=deadline,
            sleep=sleep,
            clock=clock,
            retryable=is_retryable,
        )
        for parameter in answer.get("Parameters") or []:
            name, value = parameter.get("Name"), parameter.get("Value")
            if isinstance(name, str) and isinstance(value, str):
                found[name] = value
        token = answer.get("NextToken")
        if not token:
            return dict(sorted(found.items()))
    raise ConfigurationError(
        f"{KEY} {path!r}: Parameter Store still had more after {MAX_PAGES} pages of {PAGE_SIZE} parameters; "
        "the path must hold the routes only",
        key=KEY,
    )


def _call(ssm: SSMClient, path: str, kwargs: dict[str, object]) -> dict[str, Any]:
    from workerless.aws.clients import DeadlineReachedError, call_aws, error_code

    def translate(exc: Exception) -> NoReturn:
        if isinstance(exc, DeadlineReachedError):
            raise ParameterStoreError(
                f"SSM GetParametersByPath {path!r} not sent: the invocation's deadline has passed", retryable=False
            ) from None
        code = error_code(exc)
        if not code:
            raise ParameterStoreError(f"SSM GetParametersByPath {path!r} failed: {type(exc).__name__}") from None
        status = int(getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _RETRYABLE_CODES or status >= 500:
            raise ParameterStoreError(f"SSM GetParametersByPath {path!r} failed: {code}", code=code) from None
        # Access denied, a path that is not a valid hierarchy, ...: the same request will not pass.
        raise ConfigurationError(
            f"cannot read the routes under {KEY} {path!r} (SSM GetParametersByPath: {code})", key=KEY
        ) from None

    return call_aws(ssm, "get_parameters_by_path", kwargs, translate)
