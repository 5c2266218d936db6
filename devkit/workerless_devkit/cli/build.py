"""``workerless build``: render an application's template.yaml from its routes.yaml."""

from __future__ import annotations

import argparse
from typing import Any

from workerless_devkit.cli.common import (
    EXIT_OK,
)


def register(commands: Any) -> None:
    """Add ``workerless build`` to the command parsers."""
    build = commands.add_parser(
        "build",
        help="render an application's template.yaml from its routes.yaml and the installed framework",
        description="In an application made by `workerless init`: write template.yaml (the installed workerless "
        "version's framework template with routes.yaml's routes) and .workerless/ (the library's entry points and "
        "the layer's build, from the pinned workerless wheel). Both are generated and git-ignored.",
    )
    build.add_argument("--dir", default=".", help="the application's directory (default: the current one)")
    build.set_defaults(run=cmd_build)


def cmd_build(args: argparse.Namespace) -> int:
    from workerless_devkit.devtools.app import render_application

    rendered = render_application(args.dir)
    print(f"rendered {rendered.template} ({len(rendered.routes)} route(s): {', '.join(rendered.routes)})")
    return EXIT_OK
