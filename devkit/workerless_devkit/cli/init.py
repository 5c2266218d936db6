"""``workerless init``: create a new application that uses workerless, in a directory of its own."""

from __future__ import annotations

import argparse
from typing import Any

from workerless_devkit.cli.common import (
    ENGINES,
    EXIT_OK,
)


def register(commands: Any) -> None:
    """Add ``workerless init`` to the command parsers."""
    init = commands.add_parser(
        "init",
        help="create a new application that uses workerless, in a directory of its own",
        description="Write only what the application's team owns: DIR/routes.yaml (one line per job type), the "
        "example handler, its test and event, samconfig.toml, requirements.txt (workerless==this version), "
        "requirements-dev.txt (the devkit), pyproject.toml, a Makefile (demo, test, build, rehearse), a README and "
        "a .gitignore. The framework's template comes from the installed version (`workerless build`). DIR must "
        "be absent or empty.",
    )
    init.add_argument("directory", metavar="DIR", help="the new application's directory (its name names the stack)")
    init.add_argument("--job-type", default="example-job", help="the example job type (default: example-job)")
    init.add_argument(
        "--engine", choices=ENGINES, default="sheptra", help="the engine it deploys for and demos (default: sheptra)"
    )
    init.set_defaults(run=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    from workerless_devkit.devtools.init import init_application

    app = init_application(args.directory, job_type=args.job_type, engine=args.engine)
    print(f"created {app.directory} (job type {app.job_type}):")
    for path in app.files:
        print(f"  {path.relative_to(app.directory)}")
    print()
    print(f"next: cd {args.directory} && make demo && make test")
    return EXIT_OK
