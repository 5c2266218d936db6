"""The library's one logger: Powertools' JSON Logger with a faster formatter (same lines)."""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import formatter as _powertools_formatter


class JsonFormatter(_powertools_formatter.LambdaPowertoolsFormatter):
    """Powertools' JSON formatter, every line as it writes it less three keys, at less CPU a line.

    The keys left out (:attr:`PER_FUNCTION_KEYS`) are Lambda-context keys that
    ``inject_lambda_context`` puts on every line of an invocation and that say nothing the line's
    log group does not (each function has its own): ``function_name``, ``function_arn`` and
    ``function_memory_size``, a fifth of an outcome line's bytes (CloudWatch Logs bills each byte).
    ``function_request_id`` and ``cold_start`` stay. The same key set on the record itself (an
    ``extra``; local mode stamps ``function_name``, one process running every function) is kept.

    Two of its steps cost more than the line needs, on every line: it sorts the record's attributes
    from the extras by scanning a 25-name tuple once per attribute, and it tries to decode every
    message as JSON (a failing ``json.loads`` and its exception, for "job completed"). Here the same
    names are a frozenset, and a message whose first character cannot begin a JSON document is
    kept as it is without trying (a string that can is decoded as Powertools does).
    tests/unit/runtime/observability/test_observability.py compares the lines with Powertools' own formatter.
    """

    _RESERVED = frozenset(_powertools_formatter.RESERVED_LOG_ATTRS)
    #: Lambda-context keys the log group already names (see above).
    PER_FUNCTION_KEYS = frozenset({"function_name", "function_arn", "function_memory_size"})
    #: What a document json.loads accepts can begin with, after JSON whitespace (NaN, Infinity too).
    _JSON_START = frozenset('{["-0123456789tfnNI')

    def _extract_log_message(self, log_record: logging.LogRecord) -> Any:
        message = log_record.msg
        if isinstance(message, str) and not log_record.args and message.lstrip(" \t\n\r")[:1] not in self._JSON_START:
            return message
        return super()._extract_log_message(log_record)

    def _extract_log_keys(self, log_record: logging.LogRecord) -> dict[str, Any]:
        # Powertools' own, with the reserved names in a frozenset (same names, same order of keys),
        # less the per-function keys of the logger's and the thread's keys.
        reserved, skipped = self._RESERVED, self.PER_FUNCTION_KEYS
        record_dict = log_record.__dict__.copy()
        record_dict["asctime"] = self.formatTime(record=log_record)
        extras = {k: v for k, v in record_dict.items() if k not in reserved}
        formatted_log: dict[str, Any] = {}
        for keys in (self.log_format, _powertools_formatter._get_context().get()):
            for key, value in keys.items():
                if key in skipped:
                    continue
                if value and key in reserved:
                    if not isinstance(value, str):
                        raise ValueError(
                            "Logging keys that override reserved log attributes need to be type 'str', "
                            f"instead got '{type(value).__name__}'",
                        )
                    formatted_log[key] = value % record_dict
                else:
                    formatted_log[key] = value
        formatted_log.update(**extras)
        return formatted_log


logger = Logger(service="workerless", child=False)
# The same formatter Powertools builds for it (its keys: service, sampling rate), the faster class.
logger.registered_handler.setFormatter(JsonFormatter(service=logger.service, sampling_rate=logger.sampling_rate))


#: Lambda's application log levels (LoggingConfig ApplicationLogLevel, AWS_LAMBDA_LOG_LEVEL) as
#: Python's, as Powertools maps them: TRACE lets all through. Local mode filters with the same map.
LAMBDA_LEVELS = {
    "TRACE": logging.NOTSET,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}


def apply_log_level(log_level: str | None, lambda_log_level: str | None) -> None:
    """Keep the deployment's ``LogLevel`` (POWERTOOLS_LOG_LEVEL) when Lambda's advanced logging
    controls set a more verbose one (AWS_LAMBDA_LOG_LEVEL).

    Powertools lets Lambda's application level win over its own, and the template never sets
    Lambda's above INFO: Lambda takes a line without a "level" key, every EMF metric line, as INFO,
    and would drop it under WARN. So with LogLevel WARNING Powertools would log at INFO; this sets the
    library's logger to WARNING again. Nothing changes outside Lambda's controls (no
    ``lambda_log_level``), nor when Lambda's level is the less verbose one (Lambda drops those lines
    anyway, and Powertools warns at import).
    """
    if not log_level or not lambda_log_level:
        return
    wanted = logging.getLevelName(log_level.strip().upper())
    lambda_level = LAMBDA_LEVELS.get(lambda_log_level.strip().upper())
    if not isinstance(wanted, int) or lambda_level is None:
        return  # a level Powertools refused at import, or one Lambda does not set
    library = logging.getLogger(logger.name)
    if wanted > lambda_level and wanted > library.level:
        library.setLevel(wanted)
