"""Local mode's model of Lambda's application log-level filter (LoggingConfig ApplicationLogLevel):
per function, inside its invocations only, on top of the logger's own level."""

from __future__ import annotations

import logging

from workerless_devkit.local import loop
from workerless_devkit.local.logs import ApplicationLevelFilter, application_levels


def _record(level: int) -> logging.LogRecord:
    return logging.LogRecord("workerless.engines.sheptra", level, __file__, 1, "a line", None, None)


def test_json_functions_filter_at_their_level_and_lambdas_default_info() -> None:
    levels = application_levels(
        {"A": ("JSON", "WARN"), "B": ("JSON", None), "C": ("Text", None), "D": ("JSON", "TRACE")}
    )
    # Text: Lambda filters nothing; JSON without a level: Lambda's default INFO.
    assert levels == {"A": logging.WARNING, "B": logging.INFO, "D": logging.NOTSET}


def test_a_line_below_the_invocations_function_level_is_dropped() -> None:
    lambda_filter = ApplicationLevelFilter({"A": logging.WARNING})
    token = loop.enter_scope(loop.InvocationScope(tracker=None, function_id="A", depth=0))  # type: ignore[arg-type]
    try:
        assert not lambda_filter.filter(_record(logging.INFO))
        assert lambda_filter.filter(_record(logging.WARNING))
    finally:
        loop.exit_scope(token)
    other = loop.enter_scope(loop.InvocationScope(tracker=None, function_id="B", depth=0))  # type: ignore[arg-type]
    try:
        assert lambda_filter.filter(_record(logging.DEBUG))  # B has no filter
    finally:
        loop.exit_scope(other)
    assert lambda_filter.filter(_record(logging.DEBUG))  # outside an invocation: not Lambda's to filter
