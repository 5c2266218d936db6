"""The HTTP client class every adapter gets from :func:`workerless.engines.new_http_client`: an
``httpx.Client`` whose jar keeps no cookie an engine sets.

No engine's protocol needs a client-wide jar: StageNext's affinity cookie belongs to one delivery
(read from that pull's own ``response.cookies``, kept in the job's handle and sent back as a
``Cookie`` header on that delivery's ack only; docs/assumptions.md), and the other engines set
none. httpx's jar still parses every response into it: a urllib request and response built per
response and ``http.cookiejar``'s header scan, about 60-90 µs a request on the bench's machine, a
quarter of an engine report's client-side CPU (issue 29). Cookies a caller sets on the client are
still sent; a user who wants a jar passes a client of their own to the wiring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from httpx._types import CookieTypes


class UnkeptCookies(httpx.Cookies):
    """A client's cookies that responses never add to."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class EngineHttpClient(httpx.Client):
    """``httpx.Client`` with :class:`UnkeptCookies` for its jar."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._unkept = UnkeptCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        return self._unkept

    @cookies.setter
    def cookies(self, cookies: CookieTypes) -> None:
        self._unkept = UnkeptCookies(cookies)
