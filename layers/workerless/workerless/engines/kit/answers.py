"""Reading engine answers: the JSON object a call answered, and sizes measured as the engines
measure them."""

from __future__ import annotations

import json
from typing import Any

import httpx

from workerless.errors import GarbledResponseError, ResponseShapeError

__all__ = ["json_object", "json_size"]


def json_object(
    response: httpx.Response,
    *,
    engine: str,
    what: str,
    field: str = "body",
    job_id: str | None = None,
    garbled_retryable: bool = False,
    content: bytes | None = None,
) -> dict[str, Any]:
    """The answer's JSON object.

    Readable JSON that is not an object is the wrong contract: :class:`ResponseShapeError`, final.
    A body that is not JSON at all is the same final error, unless ``garbled_retryable``: then it is
    a :class:`GarbledResponseError` (retryable: a truncated or empty body says nothing about what the
    engine answered; StageNext, whose every parsed call may be repeated, passes it). ``content``: the
    body to read instead of the response's (a skimmed answer's skeleton, :mod:`.skim`).
    """
    try:
        body = json.loads(content) if content is not None else response.json()
    except (ValueError, UnicodeDecodeError):
        if garbled_retryable:
            raise GarbledResponseError(
                f"{what} answered {response.status_code} with a body that is not readable JSON "
                f"({len(content if content is not None else response.content)} bytes)",
                engine=engine,
                field=field,
                job_id=job_id,
                status=response.status_code,
            ) from None
        raise ResponseShapeError(
            f"{what} answered a body that is not JSON (expected an object with {field!r})",
            engine=engine,
            field=field,
            job_id=job_id,
        ) from None
    if not isinstance(body, dict):
        raise ResponseShapeError(
            f"{what} answered JSON that is not an object (expected an object with {field!r})",
            engine=engine,
            field=field,
            job_id=job_id,
            status=response.status_code if garbled_retryable else None,
        )
    return body


def json_size(value: object) -> int:
    """Size in bytes of ``value`` as compact UTF-8 JSON (what a cap is measured against).

    Example:
        >>> json_size({"é": 1})
        8
    """
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
