"""``workerless invoke``: run one handler locally on one made-up job and print what would be reported."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workerless_devkit.cli.common import (
    EXIT_FAILED,
    EXIT_HANDLER_BROKEN,
    EXIT_OK,
)


def register(commands: Any) -> None:
    """Add ``workerless invoke`` to the command parsers."""
    invoke = commands.add_parser(
        "invoke",
        help="run one handler locally on one made-up job and print what would be reported",
        description="Run functions/TYPE/app.py's handler on one made-up job, through the wrapper's outcome mapping, "
        "without an engine or AWS. Prints the outcome as JSON; exits 0 when the job would complete, 1 when it would "
        "fail or throw, 2 for a mistake on the command line, 3 when the handler cannot run (it does not import, or is "
        "not a @job_handler).",
    )
    invoke.add_argument("job_type", metavar="TYPE", help="the job type whose handler to run (functions/TYPE/app.py)")
    invoke.add_argument("--variables", default=None, metavar="JSON", help="the job's variables: a JSON object or @FILE")
    invoke.add_argument("--retries", type=int, default=3, help="retries left on the made-up job (default 3)")
    invoke.add_argument(
        "--functions-dir", default="functions", help="where function directories are (default: functions)"
    )
    invoke.set_defaults(run=cmd_invoke)


def cmd_invoke(args: argparse.Namespace) -> int:
    import json

    from workerless_devkit.devtools.invoke import HandlerLoadError, invoke_handler, parse_variables

    variables = parse_variables(args.variables)
    # stdout is the report (JSON a script can read): the handler's log lines go to stderr meanwhile,
    # one readable line each (a traceback as Python prints it), job.log lines once (in the report).
    try:
        with _library_logs_to_stderr():
            report = invoke_handler(args.job_type, variables, functions_dir=args.functions_dir, retries=args.retries)
    except HandlerLoadError as exc:
        print(f"workerless: {exc}", file=sys.stderr)
        if exc.detail:
            print(exc.detail, file=sys.stderr)
        return EXIT_HANDLER_BROKEN
    print(json.dumps(report, indent=2, default=str))
    return EXIT_OK if report["outcome"]["kind"] == "complete" else EXIT_FAILED


@contextlib.contextmanager
def _library_logs_to_stderr() -> Iterator[None]:
    """Point the library's (Powertools) log handler, which writes to stdout, at stderr for a while, in
    the readable format, without the lines a handler sent with ``job.log`` (the report lists them)."""
    from workerless.observability import logger

    from workerless_devkit.local.logs import ReadableFormatter

    handler = logger.registered_handler
    if not isinstance(handler, logging.StreamHandler):  # pragma: no cover - Powertools' is one
        yield
        return
    formatter = handler.formatter
    not_job_log = _NotJobLog()
    stream = handler.setStream(sys.stderr)
    handler.setFormatter(ReadableFormatter())
    handler.addFilter(not_job_log)
    try:
        yield
    finally:
        if stream is not None:
            handler.setStream(stream)
        handler.setFormatter(formatter)
        handler.removeFilter(not_job_log)


class _NotJobLog(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.funcName == "log" and Path(record.pathname).name == "job.py")
