"""The runtime's log lines as local mode shows them.

In Lambda each function has a process of its own, so the Powertools logger's Lambda-context keys
(``function_name``, ``function_request_id``) name the function that wrote a line. Local mode runs
every function in one process, where those keys are shared and the last invocation to start wins:
:class:`InvocationFilter` stamps each line with the function and request of the invocation that
wrote it (the current :class:`~workerless_devkit.local.loop.InvocationScope`).

On a terminal, :class:`ReadableFormatter` prints one short line per record instead of the JSON that
CloudWatch gets: time, function, job type and id, message, and the reason of a failure::

    14:02:11.348 chargepaymentFunction  charge-payment 2251799813685249  job failed  error=amount must be positive

Example:
    >>> import logging
    >>> record = logging.LogRecord("workerless", logging.INFO, __file__, 1, "job completed", None, None)
    >>> record.function_name, record.job_type, record.job_id = "chargepaymentFunction", "charge-payment", "7"
    >>> ReadableFormatter().format(record)[13:]
    'chargepaymentFunction  charge-payment 7  job completed'
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

from aws_lambda_powertools.logging import formatter as _powertools_formatter
from workerless import observability
from workerless.observability.logs import LAMBDA_LEVELS

from workerless_devkit.local import loop

LogFormat = Literal["json", "readable"]

#: Record fields shown after the message in the readable format, in this order.
_DETAILS = ("error", "reason", "error_code", "status", "message_id", "attempt")


class InvocationFilter(logging.Filter):
    """Stamp a record written inside a local invocation with that invocation's function and request."""

    def filter(self, record: logging.LogRecord) -> bool:
        scope = loop.current_scope()
        if scope is not None and scope.function_name:
            # Extras win over the logger's shared keys in the JSON formatter (see observability.JsonFormatter).
            record.function_name = scope.function_name
            record.function_id = scope.function_id
            if scope.request_id:
                record.function_request_id = scope.request_id
        return True


class ApplicationLevelFilter(logging.Filter):
    """Lambda's application log-level filtering, per function: inside an invocation of a function
    whose LoggingConfig is JSON, a line below its ApplicationLogLevel (INFO when none is set, as
    Lambda does) never reaches CloudWatch, whatever the logger's own level lets through.

    Example:
        >>> record = logging.LogRecord("workerless", logging.DEBUG, __file__, 1, "job activated", None, None)
        >>> ApplicationLevelFilter({"F": logging.INFO}).filter(record)  # outside an invocation: kept
        True
    """

    def __init__(self, levels: Mapping[str, int]) -> None:
        super().__init__()
        self._levels = dict(levels)

    def filter(self, record: logging.LogRecord) -> bool:
        scope = loop.current_scope()
        level = self._levels.get(scope.function_id) if scope is not None else None
        return level is None or record.levelno >= level


def application_levels(functions: Mapping[str, tuple[str, str | None]]) -> dict[str, int]:
    """Each function's application level filter (by logical id) from its LoggingConfig's LogFormat
    and ApplicationLogLevel: none in the Text format, INFO in JSON when no level is given."""
    return {
        function: LAMBDA_LEVELS[level or "INFO"]
        for function, (log_format, level) in functions.items()
        if log_format == "JSON"
    }


class ReadableFormatter(logging.Formatter):
    """``HH:MM:SS.mmm <function> <job type> <job id>  <message>  key=value ...`` for a terminal.

    It stands in for the Powertools formatter on the logger's handler, and the logger calls that
    formatter's own methods (``append_keys``, ``clear_state`` at each invocation): those go to
    ``inner``, the formatter replaced, whose keys are kept (and read here), so putting the JSON one
    back loses nothing.
    """

    def __init__(self, inner: logging.Formatter | None = None) -> None:
        super().__init__()
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        # Only reached for what logging.Formatter lacks: the Powertools formatter's key methods.
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def format(self, record: logging.LogRecord) -> str:
        # The handler wrapper's correlation keys (job type and id) are Powertools' thread-safe keys, in
        # a context variable of the thread that logs, not on the record (the JSON formatter reads them
        # the same way); the logger's persistent keys are the inner formatter's.
        persistent = getattr(self._inner, "log_format", None)
        fields = {
            **(persistent if isinstance(persistent, dict) else {}),
            **_powertools_formatter._get_context().get(),
            **record.__dict__,
        }
        when = self.formatTime(record, "%H:%M:%S") + f".{int(record.msecs):03d}"
        who = fields.get("function_id") or fields.get("function_name") or record.name
        job = " ".join(str(v) for v in (fields.get("job_type"), fields.get("job_id")) if v)
        level = "" if record.levelno == logging.INFO else f"{record.levelname} "
        message = record.getMessage()
        if fields.get("lifecycle") == "failed" and "terminal" in fields:
            message += _failure_outlook(fields, record.created)
        details = "  ".join(f"{key}={fields[key]}" for key in _DETAILS if fields.get(key) not in (None, ""))
        line = "  ".join(part for part in (f"{when} {who}", job, f"{level}{message}", details) if part)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _failure_outlook(fields: Mapping[str, Any], created: float) -> str:
    """What comes after a reported failure: the engine runs the job again (how many tries are left,
    and from when), or it is final (a TerminalError, or no retries left)."""
    retries = fields.get("retries")
    if fields.get("terminal"):
        return ", final: terminal"
    if not isinstance(retries, int) or retries <= 0:
        return ", final: no retries left"
    backoff = fields.get("retry_in_seconds")
    outlook = f", will retry: {retries} {'retry' if retries == 1 else 'retries'} left"
    if isinstance(backoff, int):
        at = time.strftime("%H:%M:%S", time.localtime(created + backoff))
        outlook += f", at {at} (in {backoff} s)"
    return outlook


@contextmanager
def local_logging(
    level: str, log_format: LogFormat, *watchers: logging.Filter, application_levels: Mapping[str, int] | None = None
) -> Iterator[None]:
    """While a topology runs: the runtime's logger at the template's level (POWERTOOLS_LOG_LEVEL,
    which Powertools read at import, before local mode applied the template's environment), each
    line stamped with its invocation, and in ``log_format``; ``watchers`` see every record too.
    ``application_levels`` (function logical id: level) is Lambda's filter on what the handler
    writes (:class:`ApplicationLevelFilter`)."""
    logger = observability.logger
    handler = logger.registered_handler
    library = logging.getLogger(logger.name)  # a filter here sees every record, whichever handler writes it
    saved_level, saved_formatter = logger.log_level, handler.formatter
    stamp = InvocationFilter()
    library.addFilter(stamp)
    # On the handler: it sees the records of the library's child loggers too (a logger's filters
    # see only the records logged to that logger).
    lambda_filter = ApplicationLevelFilter(application_levels or {})
    handler.addFilter(lambda_filter)
    for watcher in watchers:
        library.addFilter(watcher)
    try:
        logger.setLevel(level.upper())
    except ValueError:
        logger.setLevel(logging.INFO)
    if log_format == "readable":
        handler.setFormatter(ReadableFormatter(saved_formatter))
    try:
        yield
    finally:
        handler.removeFilter(lambda_filter)
        library.removeFilter(stamp)
        for watcher in watchers:
            library.removeFilter(watcher)
        handler.setFormatter(saved_formatter)
        logger.setLevel(saved_level)
