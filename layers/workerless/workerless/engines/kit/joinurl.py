"""An engine request's URL (a checked base URL plus an API path) without httpx parsing it each time.

httpx parses every URL it is handed as a string: a scan of each character for control characters,
regular expressions over each component, the path's percent-encoding check. That costs 15-28 µs a
request, about a tenth of the handler wrapper's CPU a job, for a base that never changes and a path
of plain characters (``/v1/jobs/2251799813685249/complete``).

:func:`engine_url` parses the base once a container and appends a *plain* path to the parsed form:
only characters httpx never percent-encodes or normalises (letters, digits, ``-._~`` and ``/``, no
``.`` or ``..`` segment), so the URL is the one httpx would build from the string; anything else
(a ``%``, a space, a query) is handed to httpx as the string, unchanged. The parsed form is httpx's
own (``httpx.URL._uri_reference``, a named tuple since httpx 0.23); a base whose joined URL does not
compare equal to httpx's own parse of the same string (another httpx) is never joined this way.
"""

from __future__ import annotations

import functools
import re
from typing import Final

import httpx

__all__ = ["engine_url"]

#: A path that httpx leaves exactly as written: unreserved characters and slashes, no dot segment.
_PLAIN_PATH: Final = re.compile(r"(?:/(?!\.\.?(?:/|$))[A-Za-z0-9._~-]*)*")
#: What each base URL checks against httpx's own parse (see _Base): a path of every plain character.
_PROBE_PATH: Final = "/v1/jobs/AZaz09-._~/complete"
#: httpx's URL length limit: a longer URL goes to httpx, which refuses it.
_MAX_URL_LENGTH: Final = 65536


class _Base:
    """One base URL parsed by httpx, joined to plain paths by replacing its parsed path."""

    __slots__ = ("_path", "_reference")

    def __init__(self, url: httpx.URL) -> None:
        self._reference = url._uri_reference
        self._path = self._reference.path

    def join(self, path: str) -> httpx.URL:
        url = httpx.URL.__new__(httpx.URL)
        url._uri_reference = self._reference._replace(path=self._path + path)
        return url


@functools.lru_cache(maxsize=16)  # the bases of this container: an adapter has one or two (a discovered cell)
def _base(base: str) -> _Base | None:
    """The parsed ``base``, or None when joining to it is left to httpx."""
    parsed: _Base | None = None
    try:
        url = httpx.URL(base)
        if url.query == b"" and not url.fragment and "?" not in base and "#" not in base:
            candidate = _Base(url)
            slow = httpx.URL(base + _PROBE_PATH)
            fast = candidate.join(_PROBE_PATH)
            if str(fast) == str(slow) and fast.raw_path == slow.raw_path and fast == slow:
                parsed = candidate
    except Exception:  # noqa: BLE001 - another httpx's internals, or a base httpx refuses: httpx parses each URL
        parsed = None
    return parsed


def engine_url(base: str, path: str) -> httpx.URL | str:
    """``base + path`` as httpx would parse it: an ``httpx.URL`` built from the base's parsed form
    when ``path`` is plain, else the string for httpx to parse.

    Example:
        >>> url = engine_url("http://127.0.0.1:8080/v1", "/jobs/42/complete")
        >>> str(url), url == httpx.URL("http://127.0.0.1:8080/v1/jobs/42/complete")
        ('http://127.0.0.1:8080/v1/jobs/42/complete', True)
        >>> engine_url("http://127.0.0.1:8080/v1", "/jobs/a b")  # not plain: httpx encodes it
        'http://127.0.0.1:8080/v1/jobs/a b'
    """
    if len(base) + len(path) <= _MAX_URL_LENGTH and _PLAIN_PATH.fullmatch(path):
        parsed = _base(base)
        if parsed is not None:
            return parsed.join(path)
    return base + path
