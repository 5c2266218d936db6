"""The one timestamp rule for engine answers (Sheptra ``lockExpiresAt``, node-flow
``leaseExpiresAt``, StageNext's session ``expiresAt``).

Accepted: an RFC 3339 / ISO 8601 date-time *with* a zone (``Z`` or an offset), or a JSON number of
epoch seconds (epoch milliseconds when over 1e11, as node-flow's SDKs send them). Refused: a
zone-less date-time (RFC 3339 requires the offset, every seed example carries one, and a guess of
UTC or local time would shift a lease by hours), booleans, empty strings. docs/assumptions.md, "One
engine kit", records why.
"""

from __future__ import annotations

from datetime import datetime

__all__ = ["parse_timestamp", "timestamp_or_none"]

#: A number above this is epoch milliseconds (1e11 seconds is the year 5138).
_MILLISECONDS_OVER = 1e11


def parse_timestamp(value: object) -> float:
    """``value`` as epoch seconds; ValueError saying why when it is not a timestamp.

    Example:
        >>> parse_timestamp("2026-01-01T00:00:00Z"), parse_timestamp(1767225600500)
        (1767225600.0, 1767225600.5)
        >>> parse_timestamp("2026-01-01T00:00:00")
        Traceback (most recent call last):
        ...
        ValueError: timestamp has no time zone
    """
    if isinstance(value, bool):
        raise ValueError("a boolean is not a timestamp")
    if isinstance(value, int | float):
        return float(value) / 1000.0 if value > _MILLISECONDS_OVER else float(value)
    if isinstance(value, str) and value:
        # Python 3.11+ reads "Z"; the replace keeps older spellings ("...000Z") unambiguous.
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError("timestamp has no time zone")
        return parsed.timestamp()
    raise ValueError("not a timestamp")


def timestamp_or_none(value: object) -> float | None:
    """:func:`parse_timestamp`, None instead of ValueError (for an optional or checked field)."""
    try:
        return parse_timestamp(value)
    except ValueError:
        return None
