"""The ``workerless`` command: run the template locally, serve an engine emulator, or run the demo.

::

    workerless local    [--template template.yaml | --bundle DIR] [--env-file .env] [--until-idle S] ...
    workerless emulate  ENGINE [--port N] [--auth on|off] [--jobs FILE]
    workerless demo     [--engine sheptra] [--jobs N] [--template template.yaml]
    workerless new-handler TYPE [--template template.yaml]
    workerless init     DIR [--job-type example-job] [--engine sheptra]
    workerless build    [--dir .]   (an application's template.yaml, from its routes.yaml)
    workerless invoke   TYPE [--variables JSON|@FILE] [--retries N]
    workerless status   (--stack-name NAME | --route TYPE=URL ... [--dead-letter-queue-url URL] [--table NAME])
    workerless secrets import --env-file .env [--secret-name NAME]
    workerless dlq show|redrive [TYPE] (--stack-name NAME | --queue-url URL [--to-queue-url URL])

Each command is a module of this package that adds its own parser (``register``) and runs it
(``cmd_*``): local, emulate, demo, new_handler, init, build, invoke, status, secrets, dlq; what they
share is in :mod:`~workerless_devkit.cli.common`, the entry point in :mod:`~workerless_devkit.cli.entry`.
The daily-loop commands' logic lives in workerless_devkit.devtools; these modules only parse their options.

A configuration mistake (a bad template, env file or option) prints one line to stderr and exits 2;
exit 1 means the run itself did not succeed (not idle in time, a demo job not completed).
"""

from __future__ import annotations

from workerless_devkit.cli.common import (
    ENGINES,
    EXIT_FAILED,
    EXIT_HANDLER_BROKEN,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
)
from workerless_devkit.cli.demo import DEMO_JOB_TYPES, DEMO_ROUTE_SECONDS, DEMO_TIMINGS, TERMINAL_STATES, demo_variables
from workerless_devkit.cli.emulate import create_emulator, emulator_options, start_emulator
from workerless_devkit.cli.entry import build_parser, main
from workerless_devkit.cli.local import parse_overrides
from workerless_devkit.emulators.harness import env_lines as env_lines  # re-exported: the one env-file writer

__all__ = [
    "DEMO_JOB_TYPES",
    "DEMO_ROUTE_SECONDS",
    "DEMO_TIMINGS",
    "ENGINES",
    "EXIT_FAILED",
    "EXIT_HANDLER_BROKEN",
    "EXIT_OK",
    "EXIT_USAGE",
    "TERMINAL_STATES",
    "UsageError",
    "build_parser",
    "create_emulator",
    "demo_variables",
    "emulator_options",
    "env_lines",
    "main",
    "parse_overrides",
    "start_emulator",
]
