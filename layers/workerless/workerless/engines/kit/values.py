"""Reading an engine's connection values (a mapping of environment-style keys to strings): every
malformed or missing value raises :class:`ConfigurationError` naming its key, and a value that is a
credential is never echoed."""

from __future__ import annotations

import re
from collections.abc import Mapping

from workerless.errors import ConfigurationError

__all__ = ["optional", "positive", "required", "text", "visible_ascii"]

_VISIBLE_ASCII = re.compile(r"^[\x21-\x7e]+$")  # no spaces or control characters: safe in a header


def text(values: Mapping[str, str], key: str) -> str:
    """The value, stripped; "" when missing or not a string."""
    raw = values.get(key)
    return raw.strip() if isinstance(raw, str) else ""


def optional(values: Mapping[str, str], key: str) -> str | None:
    """The value, stripped; None when missing or blank."""
    return text(values, key) or None


def required(values: Mapping[str, str], key: str, what: str) -> str:
    """The value, stripped; ConfigurationError saying whether it is missing or empty and what it
    must hold."""
    value = text(values, key)
    if not value:
        state = "empty" if key in values else "missing"
        raise ConfigurationError(f"{key} is {state}: it must hold {what}", key=key)
    return value


def visible_ascii(values: Mapping[str, str], key: str) -> str | None:
    """A credential sent in a header: visible ASCII with no spaces (None when unset)."""
    value = optional(values, key)
    if value is not None and not _VISIBLE_ASCII.match(value):
        # Never echo the value: it is a credential.
        raise ConfigurationError(f"{key} is malformed: it must be visible ASCII with no spaces", key=key)
    return value


def positive(values: Mapping[str, str], key: str, default: float, *, integer: bool = False) -> float:
    """A number greater than 0 (``integer``: a whole one); ``default`` when unset.

    Example:
        >>> positive({"X": "2.5"}, "X", 1.0), positive({}, "X", 1.0)
        (2.5, 1.0)
    """
    raw = values.get(key)
    if raw is None or not raw.strip():
        return default
    try:
        number = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigurationError(f"{key} must be {kind}, got {raw!r}", key=key) from None
    if number <= 0:
        raise ConfigurationError(f"{key} must be greater than 0, got {raw!r}", key=key)
    return number
