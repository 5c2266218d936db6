"""Whether the engine answered a local run at all.

A poller whose every poll fails keeps backing off and returns normally (in Lambda that is right: the
engine may be back next tick), so a local run against an engine that is down, or a URL pointing at
nothing, used to end "idle" with no jobs and exit 0. :class:`EngineHealth` counts the HTTP responses
the engine clients receive (:meth:`answered_by`, a response watcher: any status is an answer) and, as
a logging filter, the failed polls and the last one's error (the adapters' translated error, which
names the URL tried), so ``workerless local --until-idle`` can end non-zero naming what it tried.

Example:
    >>> import logging
    >>> health = EngineHealth()
    >>> record = logging.LogRecord("workerless", logging.WARNING, __file__, 1, "poll failed; backing off", None, None)
    >>> record.error = "token mint failed: ConnectError (POST http://127.0.0.1:9/oauth2/token)"
    >>> health.filter(record)
    True
    >>> print(health.never_answered())
    the engine never answered: 1 failed poll(s), last: token mint failed: ConnectError (POST http://127.0.0.1:9/oauth2/token)

An engine that answers every request with 401 or 403 answers, but refuses the credentials: the
functions cannot work either (:meth:`problem` says so, naming the last request refused).
"""

from __future__ import annotations

import logging
import threading

import httpx

#: The poller's messages for a failed poll (workerless._poller.poller.Poller.cycle).
_POLL_FAILURES = ("poll failed; backing off", "poll rejected; backing off")


class EngineHealth(logging.Filter):
    """Polls answered and failed over a local run; as a logging filter, it keeps the last poll error."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.answered = 0
        self.refused = 0
        self.last_refused: str | None = None
        self.failed = 0
        self.last_error: str | None = None

    def answered_by(self, response: httpx.Response) -> None:
        """A response watcher (workerless.engines.EngineHooks.response_watchers): the engine answered."""
        refused = response.status_code in (401, 403)
        if refused:
            url = response.request.url
            # Neither credentials nor a query string in what is printed.
            port = f":{url.port}" if url.port else ""
            where = f"{response.request.method} {url.scheme}://{url.host}{port}{url.path}"
        with self._lock:
            self.answered += 1
            if refused:
                self.refused += 1
                self.last_refused = f"{response.status_code} on {where}"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() in _POLL_FAILURES:
            error = getattr(record, "error", None)
            with self._lock:
                self.failed += 1
                if error:
                    self.last_error = str(error)
        return True

    def tried(self) -> bool:
        """Whether any engine call has ended yet (answered, or a poll failed)."""
        with self._lock:
            return bool(self.answered or self.failed)

    def problem(self) -> str | None:
        """Why the functions could not work with the engine (never answered, or refused every
        request), else None."""
        never = self.never_answered()
        if never is not None:
            return never
        with self._lock:
            if self.refused and self.refused == self.answered:
                return (
                    f"the engine refused the credentials: all {self.refused} answer(s) were 401/403, "
                    f"last: {self.last_refused} (check the env file's client id, secret or API key)"
                )
        return None

    def never_answered(self) -> str | None:
        """What went wrong when polls failed and none succeeded, else None."""
        with self._lock:
            if self.answered or not self.failed:
                return None
            detail = f", last: {self.last_error}" if self.last_error else ""
            return f"the engine never answered: {self.failed} failed poll(s){detail}"
