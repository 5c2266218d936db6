"""What the commands share: exit codes, the usage error, option groups, the AWS client, signals."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from workerless.engines import ENGINE_NAMES

EXIT_OK = 0


EXIT_FAILED = 1


EXIT_USAGE = 2


#: `invoke`: the handler itself cannot run (it does not import, or is not a @job_handler).
EXIT_HANDLER_BROKEN = 3


ENGINES = ENGINE_NAMES


class UsageError(Exception):
    """A user mistake on the command line: printed as one line, exit 2."""


def add_schedule_option(parser: argparse.ArgumentParser, *, default: float | None = None) -> None:
    """``--schedule-seconds``: the one timing local mode takes from the command line rather than the
    template (a schedule's rate cannot be under a minute); every other timing is a template
    parameter (``--parameter-overrides``)."""
    parser.add_argument(
        "--schedule-seconds",
        type=float,
        default=default,
        help="fire Schedule events this often instead of at the template's rate (a departure, for quick runs; "
        + ("default: the template's rate)" if default is None else f"default {default:g})"),
    )


def add_log_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=("auto", "readable", "text", "json"),
        default="auto",
        help="the functions' log lines: one short line each (readable, or its alias text) or as CloudWatch gets "
        "them (json); "
        "auto: readable on a terminal, json otherwise",
    )


def log_format(args: argparse.Namespace) -> Literal["json", "readable"]:
    if args.log_format == "auto":
        return "readable" if sys.stdout.isatty() else "json"
    return "json" if args.log_format == "json" else "readable"


def add_aws_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--region", default=None, help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, then your profile's)"
    )
    parser.add_argument("--profile", default=None, help="AWS CLI profile")
    parser.add_argument("--endpoint-url", default=None, help="AWS endpoint (a moto server, LocalStack)")


def add_target_options(parser: argparse.ArgumentParser, *, routes: bool) -> None:
    parser.add_argument("--stack-name", default=None, help="the deployed stack (sam deploy's stack name)")
    if routes:
        parser.add_argument(
            "--route",
            action="append",
            default=[],
            metavar="TYPE=QUEUE_URL",
            help="a route's queues, instead of --stack-name (repeat per job type)",
        )
    else:
        parser.add_argument(
            "--queue-url", default=None, help="the job dead-letter queue's URL, instead of --stack-name"
        )
    add_aws_options(parser)


def client(args: argparse.Namespace, service: str) -> Any:
    from workerless_devkit.devtools.clients import aws_client

    return aws_client(service, region=args.region, profile=args.profile, endpoint_url=args.endpoint_url)


def template_routes(path: str) -> list[tuple[str, str]] | None:
    """(type, queue logical id) of a template's route loop (its &Routes list), when the template is there."""
    from workerless_devkit.devtools.scaffold import ScaffoldError, route_types

    template = Path(path)
    if not template.is_file():
        return None
    try:
        return route_types(template.read_text(encoding="utf-8"))
    except (ScaffoldError, ValueError):
        return None


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT / SIGTERM (the first one; a second SIGINT interrupts the drain)."""
    stop = threading.Event()
    previous: dict[signal.Signals, Any] = {}

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handle)
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
