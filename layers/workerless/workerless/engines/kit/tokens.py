"""Token caching with early renewal and one shared refresh (Sheptra's OAuth2 token, node-flow's
service-account token; StageNext's worker session uses :func:`renew_at` for its rotation time).

Why early: a token renewed only at its expiry can expire between our check and the engine's, so a
token is renewed ``early`` seconds before it runs out (a minute: both seeds' SDKs), or at half its
life when it is shorter than twice that (else it would be minted on every call). Why one refresh:
concurrent callers who all find the token due would each mint one; the lock makes the first mint
and the others take its token ("a poller working eight queues does not mint eight tokens").
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["TokenCache", "renew_at"]


def renew_at(start: float, ttl: float, early: float) -> float:
    """When a credential issued at ``start`` for ``ttl`` seconds is renewed: ``early`` seconds
    before it expires, but never later than half-way through its life.

    Example:
        >>> renew_at(0, 3600, 60), renew_at(0, 60, 60)
        (3540, 30.0)
    """
    return start + ttl - min(early, ttl / 2)


class TokenCache:
    """One cached bearer token, minted by ``mint`` (which returns the token and its lifetime in
    seconds) and renewed :func:`renew_at` ``early``.

    Example:
        >>> cache = TokenCache(lambda: ("t-1", 3600.0), early=60, clock=lambda: 0.0)
        >>> cache.get(), cache.get()
        ('t-1', 't-1')
    """

    def __init__(
        self,
        mint: Callable[[], tuple[str, float]],
        *,
        early: float,
        clock: Callable[[], float],
        lock: threading.RLock | None = None,
    ) -> None:
        self._mint = mint
        self._early = early
        self._clock = clock
        self._lock = lock or threading.RLock()
        self._token: str | None = None
        self._renew_at = 0.0
        #: The last token dropped: no longer sent, still redacted from any error an engine echoes.
        self._spent: str | None = None

    def get(self) -> str:
        """The cached token, or a fresh one when it is due (one mint for all concurrent callers)."""
        token = self._token
        if token is not None and self._clock() < self._renew_at:
            return token
        with self._lock:
            # Double-checked: whoever waited on the lock finds the token the first caller minted.
            if self._token is None or self._clock() >= self._renew_at:
                token, ttl = self._mint()
                self._token = token
                self._renew_at = renew_at(self._clock(), ttl, self._early)
            assert self._token is not None
            return self._token

    def invalidate(self, token: str | None = None) -> None:
        """Drop the token a call was refused with (a 401), so the next :meth:`get` mints again.
        With ``token``, only if nobody has minted a newer one since that call was sent."""
        with self._lock:
            if self._token is not None and (token is None or token == self._token):
                self._spent = self._token
                self._token = None
                self._renew_at = 0.0

    def held(self) -> tuple[str, ...]:
        """The tokens to redact: the current one and the last one dropped."""
        return tuple(t for t in (self._token, self._spent) if t)
