"""``workerless new-handler``: scaffold a job type (its handler, test, event and route)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from workerless_devkit.cli.common import (
    EXIT_OK,
)


def register(commands: Any) -> None:
    """Add ``workerless new-handler`` to the command parsers."""
    new_handler = commands.add_parser(
        "new-handler",
        help="scaffold a job type: functions/TYPE/app.py, its test, an event, and its wiring in template.yaml",
        description="Create functions/TYPE/app.py, tests/unit/test_handler_TYPE.py and events/sqs-TYPE.json next to "
        "the template, and add the job type's queue, role, function and route to the template "
        "(comments and order kept). Refuses when TYPE exists.",
    )
    new_handler.add_argument("job_type", metavar="TYPE", help="lowercase letters, digits and hyphens (ship-parcel)")
    new_handler.add_argument("--template", default="template.yaml", help="SAM template (default: template.yaml)")
    new_handler.set_defaults(run=cmd_new_handler)


def cmd_new_handler(args: argparse.Namespace) -> int:
    from workerless_devkit.devtools.app import ROUTES_FILE, add_route
    from workerless_devkit.devtools.scaffold import scaffold_handler, stem

    routes = Path(args.template).absolute().parent / ROUTES_FILE
    if routes.is_file():  # an application of its own: its routes file, then the template re-rendered
        files = add_route(routes.parent, args.job_type)
        print(f"job type {args.job_type}:")
        for path in files:
            print(f"  created {path}")
        print(f"  {routes}: added route {stem(args.job_type)}; template.yaml rendered again")
        return EXIT_OK
    done = scaffold_handler(args.job_type, template=args.template)
    print(f"job type {done.job_type}:")
    for path in done.files:
        print(f"  created {path}")
    print(f"  {done.template}: added route {stem(done.job_type)} (the routes list, and its Mappings.Routes line)")
    print(f"    (the route loop generates {', '.join(done.resources)}; the dashboard finds it by SEARCH)")
    print("  nothing is left to wire by hand")
    print()
    print(
        f"next: edit functions/{stem(done.job_type)}/app.py, then "
        f"`workerless invoke {done.job_type} --variables '{{}}'`"
    )
    return EXIT_OK
