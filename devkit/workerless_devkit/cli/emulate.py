"""``workerless emulate``: serve an engine emulator on 127.0.0.1 and print the env-file lines that reach it."""

from __future__ import annotations

import argparse
import inspect
import sys
import typing
from typing import Any

from workerless_devkit.cli.common import (
    ENGINES,
    EXIT_OK,
    UsageError,
    stop_on_signals,
)
from workerless_devkit.emulators.core import EngineEmulator
from workerless_devkit.emulators.harness import RunningEmulator, emulator_module, start
from workerless_devkit.emulators.harness import create as create_engine_emulator


def register(commands: Any) -> None:
    """Add ``workerless emulate`` to the command parsers."""
    emulate = commands.add_parser(
        "emulate",
        help="serve an engine emulator on 127.0.0.1",
        description="Serve a faithful emulator of an engine's worker API on loopback and print the env-file lines "
        "that reach it.",
    )
    emulate.add_argument("engine", choices=ENGINES, help="the engine whose worker API to serve")
    emulate.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    emulate.add_argument("--auth", choices=("on", "off"), default=None, help="require credentials (emulators that can)")
    emulate.add_argument(
        "--jobs",
        default=None,
        metavar="FILE",
        help='jobs to queue, one format for every engine: [{"type": ..., "variables": {}, "retries": 3}]',
    )
    emulate.add_argument("--env-out", default=None, metavar="FILE", help="also write the env-file lines to FILE")
    emulate.set_defaults(run=cmd_emulate)


def emulator_options(engine: str, *, auth: bool | None) -> dict[str, Any]:
    """The emulator options ``--auth`` asks for: ``auth`` only where the emulator ``create()`` builds
    takes it as an on/off switch (Sheptra's); a UsageError for an engine without one."""
    if auth is None:
        return {}
    try:
        module = emulator_module(engine)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except ImportError as exc:
        raise UsageError(f"the {engine} emulator cannot be loaded: {exc}") from None
    emulator_class = typing.get_type_hints(module.create)["return"]
    parameter = inspect.signature(emulator_class).parameters.get("auth")
    if parameter is None or not isinstance(parameter.default, bool):
        raise UsageError(f"the {engine} emulator has no --auth switch")
    return {"auth": auth}


def create_emulator(engine: str, *, auth: bool | None) -> EngineEmulator:
    """``engine``'s emulator with the ``--auth`` switch applied, not serving yet."""
    return create_engine_emulator(engine, **emulator_options(engine, auth=auth))


def start_emulator(engine: str, *, port: int = 0, auth: bool | None = None, jobs: str | None = None) -> RunningEmulator:
    """Serve ``engine``'s emulator (with the jobs of the file ``jobs``), as a UsageError when it cannot."""
    options = emulator_options(engine, auth=auth)
    try:
        return start(engine, port=port, jobs=jobs, **options)
    except ImportError as exc:
        raise UsageError(f"the {engine} emulator cannot be loaded: {exc}") from None
    except FileNotFoundError:
        raise UsageError(f"jobs file {jobs!r} not found") from None
    except OSError as exc:
        raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"jobs file {jobs!r}: {exc}" if jobs else str(exc)) from None


def cmd_emulate(args: argparse.Namespace) -> int:
    auth = None if args.auth is None else args.auth == "on"
    running = start_emulator(args.engine, port=args.port, auth=auth, jobs=args.jobs)
    if args.jobs:
        print(f"created {len(running.jobs())} job(s) from {args.jobs}", file=sys.stderr)
    # This prints the emulator's demo credentials on purpose: it is the developer's own loopback
    # emulator, and these lines are what they paste into their .env to reach it.
    text = running.env_text()
    print(f"{args.engine} emulator on {running.url} (Ctrl-C to stop); env-file lines on stdout", file=sys.stderr)
    print(f"# {args.engine} emulator on {running.url}")
    print(text, end="", flush=True)
    if args.env_out:
        running.write_env_file(args.env_out)
        print(f"wrote {args.env_out}", file=sys.stderr)
    with stop_on_signals() as stop:
        while not stop.wait(0.5):
            pass
    running.stop()
    return EXIT_OK
