"""``workerless local``: run every function of the template (or a rehearsal bundle's stack) in one process."""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from workerless.errors import ConfigurationError

from workerless_devkit.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_log_format,
    add_schedule_option,
    log_format,
    stop_on_signals,
)


def register(commands: Any) -> None:
    """Add ``workerless local`` to the command parsers."""
    local = commands.add_parser(
        "local",
        help="run every function of template.yaml in one process (embedded SQS and DynamoDB)",
        description="Run the template's functions in one process, on moto's SQS and DynamoDB, against the "
        "engine named by the env file (a real engine or `workerless emulate`).",
    )
    local.add_argument("--template", default="template.yaml", help="SAM template (default: template.yaml)")
    local.add_argument(
        "--bundle",
        default=None,
        metavar="DIR",
        help="run the stack a deploy creates instead: a deploy rehearsal's bundle directory (transformed.json and "
        "its artifacts), created as a stack on the embedded CloudFormation; --template is then not read",
    )
    local.add_argument("--env-file", default=None, help="engine connection values, dotenv (default: .env if present)")
    local.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="template parameter values, as for sam deploy",
    )
    local.add_argument("--until-idle", type=float, default=None, metavar="SECONDS", help="exit 0 once idle this long")
    local.add_argument("--max-seconds", type=float, default=None, help="safety cap on the whole run (exit 1 past it)")
    add_log_format(local)
    local.add_argument(
        "--status-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="print the topology's status (per route: waiting, in flight, DLQ, last poll) to stderr this often",
    )
    add_schedule_option(local)
    local.set_defaults(run=cmd_local)


def cmd_local(args: argparse.Namespace) -> int:
    from workerless_devkit.local.runtime import IdleTimeout, LocalTopology

    if args.status_every is not None and args.status_every <= 0:
        raise UsageError("--status-every must be positive")
    env_file = args.env_file
    if env_file is None and Path(".env").is_file():
        env_file = ".env"
    options: dict[str, Any] = {
        "parameters": parse_overrides(args.parameter_overrides),
        "schedule_seconds": args.schedule_seconds,
        "log_format": log_format(args),
    }
    bundle = getattr(args, "bundle", None)
    if bundle is not None:
        # What runs is read from the stack, which exists once the topology has started.
        topology = LocalTopology.from_bundle(bundle, env_file, **options)
    else:
        topology = LocalTopology(args.template, env_file, **options)
        print(describe(topology), file=sys.stderr)
        _check_engine_values(topology, env_file)
    code = EXIT_OK
    problem: str | None = None
    with stop_on_signals() as stop, topology, _status_reporter(topology, args.status_every):
        if bundle is not None:
            print(describe(topology), file=sys.stderr)
            _check_engine_values(topology, env_file)
        try:
            if args.until_idle is not None:
                problem = _run_until_idle(topology, args, stop)
                if problem is not None:
                    code = EXIT_FAILED
            elif not topology.wait(stop, args.max_seconds):
                print(f"workerless: --max-seconds {args.max_seconds:g} reached", file=sys.stderr)
        except IdleTimeout as exc:
            print(f"workerless: {exc}", file=sys.stderr)
            code = EXIT_FAILED
        print("draining...", file=sys.stderr)
    if problem is not None:
        # Said again after the drain: the count then includes the polls that failed while it ran
        # (printed above), so the summary agrees with the lines before it.
        problem = topology.engine_health.problem() or problem
    print_report(topology)
    if problem is not None:  # last, where a CI log's reader looks
        print(f"workerless: {problem}", file=sys.stderr)
    return 130 if stop.is_set() and args.until_idle is not None else code


def _run_until_idle(topology: Any, args: argparse.Namespace, stop: threading.Event) -> str | None:
    """Run until idle; what makes the run a failure although idle (the engine never answered, or
    refused every request), or None.
    Raises IdleTimeout past --max-seconds."""
    from workerless_devkit.local.engine_health import EngineHealth

    cap = args.max_seconds if args.max_seconds is not None else 3600.0
    started = time.monotonic()
    topology.run_until_idle(args.until_idle, cap, stop=stop)
    health: EngineHealth = topology.engine_health
    if _talks_to_engine(topology) and not health.tried() and not stop.is_set():
        # Idle before the first poll ended (a slow start, a long schedule): not a verdict yet.
        print("idle, but no poll has reached the engine yet: waiting for one...", file=sys.stderr)
        if not topology.run_until(
            lambda: health.tried() or stop.is_set(), max(0.0, cap - (time.monotonic() - started))
        ):
            return f"no poll reached the engine within --max-seconds {cap:g}"
        if health.problem() is None and not stop.is_set():  # it answered: its jobs may be flowing now
            topology.run_until_idle(args.until_idle, max(0.0, cap - (time.monotonic() - started)), stop=stop)
    # Idle because nothing could be polled is not idle: the functions cannot work.
    return health.problem()


def _talks_to_engine(topology: Any) -> bool:
    return "WORKERLESS_ENGINE" in topology.template.environment()


def _check_engine_values(topology: Any, env_file: str | None) -> None:
    """Refuse to run functions that cannot work: a template whose functions talk to an engine
    (WORKERLESS_ENGINE in their environment) needs its connection values, valid by the adapter's own
    rules, before anything starts (else every poll fails and the run ends "idle" with no jobs)."""
    if not _talks_to_engine(topology):
        return
    if env_file is None:
        raise UsageError(
            "no --env-file and no .env here: the template's functions need the engine's connection values "
            "(`workerless emulate ENGINE --env-out emulator.env` writes an emulator's)"
        )
    from workerless._core.settings import parse_env_text

    from workerless_devkit.devtools.secrets_cli import validate_values

    values = parse_env_text(Path(env_file).read_text(encoding="utf-8"), source=env_file)
    try:
        validate_values(values)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{env_file}: {exc}", key=exc.key) from None


@contextlib.contextmanager
def _status_reporter(topology: Any, every: float | None) -> Iterator[None]:
    """With ``every``: a thread printing the running topology's status to stderr every ``every`` s.

    The topology's SQS and DynamoDB live in this process (moto), so this is where its status can be
    read; the thread ends before the topology stops (this context exits first).
    """
    if every is None:
        yield
        return
    from workerless_devkit.devtools.status import topology_status

    done = threading.Event()

    def report() -> None:
        while not done.wait(every):
            try:
                print(topology_status(topology).table(), file=sys.stderr, flush=True)
            except Exception as exc:  # noqa: BLE001 - a status line must never stop the run
                print(f"workerless: status unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)

    thread = threading.Thread(target=report, name="workerless-status", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=max(5.0, every))


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` words (also ``ParameterKey=K,ParameterValue=V``) → a dict."""
    overrides: dict[str, str] = {}
    for item in items:
        found = re.fullmatch(r"ParameterKey=([^,]+),ParameterValue=(.*)", item)
        key, sep, value = (found.group(1), "=", found.group(2)) if found else item.partition("=")
        if not sep or not key:
            raise UsageError(f"parameter override {item!r} is not KEY=VALUE")
        overrides[key] = value
    return overrides


def describe(topology: Any) -> str:
    template = topology.template
    lines = [f"workerless local: {template.path}"]
    for spec in template.functions:
        sources = [f"SQS {e.queue_id} (batch {e.batch_size})" for e in spec.sqs_events if e.enabled]
        sources += [f"schedule {s.expression}" for s in spec.schedule_events if s.enabled]
        loop = ", RecursiveLoop Allow" if spec.allows_recursion else ""
        lines.append(
            f"  {spec.logical_id}: {spec.handler} in {spec.code_dir.name}/ <- {', '.join(sources) or '-'}{loop}"
        )
    return "\n".join(lines)


def print_report(topology: Any) -> None:
    print(topology.summary.table())
    invocations = topology.invocations
    errors = topology.errors
    if invocations:
        print()
        print(
            "invocations: "
            + ", ".join(
                f"{name} {count}" + (f" ({errors[name]} failed)" if errors.get(name) else "")
                for name, count in sorted(invocations.items())
            )
        )
    for stopped in topology.stopped_loops:
        print(f"recursive loop stopped: {stopped.function} (queue {stopped.queue}, depth {stopped.depth})")
    iam = getattr(topology, "iam", None)
    refused = sorted({(r.function, r.action, r.resource) for r in iam.refusals}) if iam is not None else []
    for function, action, resource in refused:
        # What the deployed stack would refuse too: the role in template.yaml lacks it.
        print(f"IAM refused: {function} {action} on {resource} (its role does not allow it)")
