"""``workerless status``: per route, what waits, runs, failed or was dead-lettered, of a deployed stack."""

from __future__ import annotations

import argparse
from typing import Any

from workerless_devkit.cli.common import (
    EXIT_OK,
    UsageError,
    add_target_options,
    client,
    template_routes,
)


def register(commands: Any) -> None:
    """Add ``workerless status`` to the command parsers."""
    status = commands.add_parser(
        "status",
        help="per route: waiting, in flight, recent failures and dead letters; the job DLQ; last poll",
        description="Read a deployed stack's queues, job table and metrics (or explicit queue URLs) and print, per job "
        "type, what waits, what runs, what failed or was dead-lettered, then the job dead-letter queue every route "
        "shares, and when the poller last ticked.",
    )
    add_target_options(status, routes=True)
    status.add_argument(
        "--dead-letter-queue-url", default=None, help="the job dead-letter queue (with --route; a stack's is found)"
    )
    status.add_argument("--table", default=None, help="job table name (with --route; a stack's is found)")
    status.add_argument(
        "--template", default="template.yaml", help="read job type names from this template's routes, if present"
    )
    status.add_argument("--no-metrics", action="store_true", help="skip CloudWatch (recent failures, oldest message)")
    status.add_argument("--window-minutes", type=int, default=60, help="recent-failures window (default 60)")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(run=cmd_status)


def _deployment(args: argparse.Namespace) -> Any:
    from workerless_devkit.devtools.stack import Deployment, parse_route_options, resolve_stack

    routes = getattr(args, "route", None) or []
    if args.stack_name and routes:
        raise UsageError("give --stack-name or --route, not both")
    if args.stack_name:
        names = template_routes(args.template) if hasattr(args, "template") else None
        return resolve_stack(client(args, "cloudformation"), args.stack_name, routes=names)
    if routes:
        return Deployment(
            parse_route_options(routes),
            args.table,
            source="routes given on the command line",
            dead_letter_url=args.dead_letter_queue_url,
        )
    raise UsageError("give --stack-name NAME, or --route TYPE=QUEUE_URL")


def cmd_status(args: argparse.Namespace) -> int:
    import json

    from workerless_devkit.devtools.status import collect_status

    if args.window_minutes < 1:
        raise UsageError("--window-minutes must be at least 1")
    deployment = _deployment(args)
    status = collect_status(
        deployment,
        sqs=client(args, "sqs"),
        dynamodb=client(args, "dynamodb") if deployment.table else None,
        cloudwatch=None if args.no_metrics else client(args, "cloudwatch"),
        window_minutes=args.window_minutes,
    )
    print(json.dumps(status.as_dict(), indent=2) if args.json else status.table())
    return EXIT_OK
