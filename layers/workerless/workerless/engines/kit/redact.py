"""Redaction: no secret an adapter holds (client secret, access token, lease token) ever reaches a
log line or an exception message, even when an engine echoes it back in an error body."""

from __future__ import annotations

from collections.abc import Sequence

from workerless.errors import EngineError

__all__ = ["redact", "scrub"]


def scrub(value: object, secrets: Sequence[str]) -> object:
    """``value`` (a parsed JSON value) with every occurrence of each secret replaced by ``***``.

    Example:
        >>> scrub({"detail": "bad token abc123"}, ["abc123"])
        {'detail': 'bad token ***'}
    """
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "***")
        return value
    if isinstance(value, dict):
        return {scrub(str(k), secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    return value


def redact(error: EngineError, secrets: Sequence[str]) -> EngineError:
    """``error`` with every non-empty secret stripped from its message and problem body (in place)."""
    present = [s for s in secrets if s]
    if not present:
        return error
    error.args = (scrub(str(error.args[0]) if error.args else "", present), *error.args[1:])
    error.problem = {str(k): scrub(v, present) for k, v in error.problem.items()}
    return error
