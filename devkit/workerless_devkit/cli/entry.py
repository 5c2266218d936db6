"""The ``workerless`` entry point: the parser (each command adds its own), logging, and exit codes."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from workerless.errors import ConfigurationError, WorkerlessError

from workerless_devkit.cli import build, demo, dlq, emulate, init, invoke, local, new_handler, secrets, status
from workerless_devkit.cli.common import EXIT_FAILED, EXIT_USAGE, UsageError
from workerless_devkit.cli_options import apply_option_rules
from workerless_devkit.versions import version_line


def main(argv: Sequence[str] | None = None) -> int:
    """``workerless`` console script. Returns the exit code (and exits with it when run as a script)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    restore_logging = configure_logging(args.log_level)
    try:
        code: int = args.run(args)
    except (ConfigurationError, UsageError) as exc:
        print(f"workerless: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except WorkerlessError as exc:
        print(f"workerless: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("workerless: interrupted", file=sys.stderr)
        return 130
    finally:
        restore_logging()
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workerless",
        description="Run workflow-engine workers as AWS Lambda functions — locally, against an emulator, or in a demo.",
    )
    parser.add_argument("--version", action="version", version=version_line(), help="print the version and exit")
    parser.add_argument(
        "--log-level", default=None, help="log level of workerless_devkit.local (default: INFO; demo: WARNING)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # In this order in --help: running things, then the daily loop.
    for command in (local, emulate, demo, new_handler, init, build, invoke, status, secrets, dlq):
        command.register(commands)
    return apply_option_rules(parser)


def configure_logging(level: str | None) -> Callable[[], None]:
    """Send workerless_devkit.local's lines to stderr; returns what undoes it (main() runs in tests too)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    local = logging.getLogger("workerless_devkit.local")
    library = logging.getLogger("workerless")
    saved = (local.handlers[:], local.propagate, local.level, library.level)
    local.handlers[:] = [handler]
    local.propagate = False
    try:
        local.setLevel(level.upper() if level is not None else logging.INFO)
    except ValueError:
        raise SystemExit(f"workerless: error: unknown log level {level!r}") from None

    def restore() -> None:
        local.handlers[:], local.propagate = saved[0], saved[1]
        local.setLevel(saved[2])
        library.setLevel(saved[3])

    return restore
