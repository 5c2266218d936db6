"""Error translation at the adapter boundary: one :class:`Translator` per engine turns a non-2xx
answer or a transport failure into the error hierarchy, once (RFC 9457 problem+json parsed here).

Each engine passes one refinement hook for the answers it reads its own way (node-flow's 403 scope
and 409 ``LEASE_EXPIRED``, Sheptra's lease-lost wording); everything else gets the shared mapping:
429 (or 503 with Retry-After) → RateLimitedError, 401 → AuthExpiredError, 421 → MisdirectedError,
409 → LeaseLostError, 413 → PayloadTooLargeError, 5xx → EngineUnavailableError, other 4xx →
RejectedError. An engine that holds secrets passes ``secrets`` and every error is redacted.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from workerless.engines.kit.redact import redact
from workerless.errors import (
    AuthExpiredError,
    ConfigurationError,
    EngineError,
    EngineUnavailableError,
    LeaseLostError,
    MisdirectedError,
    PayloadTooLargeError,
    RateLimitedError,
    RejectedError,
)

__all__ = [
    "Refine",
    "Translator",
    "describe",
    "error_for_response",
    "error_for_transport",
    "parse_problem",
    "parse_retry_after",
]

#: An engine's refinement: (response, problem, what, job_id) → its own error, or None for the
#: shared mapping.
Refine = Callable[[httpx.Response, dict[str, Any], str, str | None], EngineError | ConfigurationError | None]


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date. None when absent or unparseable.

    Example:
        >>> parse_retry_after("7"), parse_retry_after("soon")
        (7.0, None)
    """
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def parse_problem(response: httpx.Response) -> dict[str, Any]:
    """The RFC 9457 problem body as a dict ({} when the body is not a JSON object)."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return {}
    return body if isinstance(body, dict) else {}


def describe(problem: Mapping[str, Any], response: httpx.Response) -> str:
    """A one-line description from a problem body: title, then detail, then the status line."""
    title = problem.get("title")
    detail = problem.get("detail")
    text = " — ".join(str(part) for part in (title, detail) if isinstance(part, str) and part)
    return text or f"HTTP {response.status_code}"


def error_for_response(
    engine: str,
    response: httpx.Response,
    *,
    job_id: str | None = None,
    what: str = "request",
    cap: int = 0,
) -> EngineError:
    """The shared mapping of a non-2xx answer onto the error hierarchy (no refinement)."""
    status = response.status_code
    problem = parse_problem(response)
    message = f"{what} answered {status}: {describe(problem, response)}"
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    kwargs: dict[str, Any] = {"engine": engine, "job_id": job_id, "status": status, "problem": problem}
    if status == 429 or (status == 503 and retry_after is not None):
        return RateLimitedError(message, retry_after=retry_after, **kwargs)
    if status == 401:
        return AuthExpiredError(message, **kwargs)
    if status == 421:
        return MisdirectedError(message, **kwargs)
    if status == 409:
        return LeaseLostError(message, **kwargs)
    if status == 413:
        return PayloadTooLargeError(message, cap=cap, **kwargs)
    if status >= 500:
        return EngineUnavailableError(message, retry_after=retry_after, **kwargs)
    return RejectedError(message, **kwargs)


def error_for_transport(
    engine: str, exc: httpx.HTTPError, *, job_id: str | None = None, what: str = "request"
) -> EngineError:
    """A timeout, refused or dropped connection: retryable, the engine may be back shortly. The
    message names the URL tried (without its query), so a wrong host or port shows where it points.

    Example:
        >>> request = httpx.Request("POST", "http://127.0.0.1:9/oauth2/token?x=1")
        >>> str(error_for_transport("sheptra", httpx.ConnectError("refused", request=request), what="token mint"))
        'token mint failed: ConnectError (POST http://127.0.0.1:9/oauth2/token) engine=sheptra'
    """
    return EngineUnavailableError(f"{what} failed: {type(exc).__name__}{_tried(exc)}", engine=engine, job_id=job_id)


def _tried(exc: httpx.HTTPError) -> str:
    try:
        request = exc.request
    except RuntimeError:  # an error raised without its request
        return ""
    # Without its query and user info: either may carry a credential.
    return f" ({request.method} {request.url.copy_with(query=None, fragment=None, userinfo=b'')})"


@dataclass(frozen=True, slots=True)
class Translator:
    """One engine's translation: the shared mapping, its one refinement hook, its redaction.

    Example:
        >>> translate = Translator("nodeflow")
        >>> translate.response(httpx.Response(503, headers={"Retry-After": "2"}), what="lease").retry_after
        2.0
    """

    engine: str
    refine: Refine | None = None
    #: The secrets currently held (client secret, tokens): stripped from every error's text.
    secrets: Callable[[], Sequence[str]] | None = None

    def response(
        self, response: httpx.Response, *, what: str, job_id: str | None = None, cap: int = 0
    ) -> EngineError | ConfigurationError:
        """The error for a non-2xx ``response`` (the refinement first, then the shared mapping)."""
        if self.refine is not None:
            refined = self.refine(response, parse_problem(response), what, job_id)
            if refined is not None:
                return self._redacted(refined)
        return self._redacted(error_for_response(self.engine, response, job_id=job_id, what=what, cap=cap))

    def transport(self, exc: httpx.HTTPError, *, what: str, job_id: str | None = None) -> EngineError:
        """The error for a request that got no answer (timeout, refused or dropped connection)."""
        error = self._redacted(error_for_transport(self.engine, exc, job_id=job_id, what=what))
        assert isinstance(error, EngineError)
        return error

    def _redacted(self, error: EngineError | ConfigurationError) -> EngineError | ConfigurationError:
        if self.secrets is None or not isinstance(error, EngineError):
            return error
        return redact(error, self.secrets())
