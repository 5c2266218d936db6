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

The daily-loop commands' logic lives in workerless_devkit.devtools; this module only parses their options.

A configuration mistake (a bad template, env file or option) prints one line to stderr and exits 2;
exit 1 means the run itself did not succeed (not idle in time, a demo job not completed).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import logging
import re
import signal
import sys
import tempfile
import threading
import time
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from workerless.engines import ENGINE_NAMES
from workerless.errors import ConfigurationError, WorkerlessError

from workerless_devkit.cli_options import apply_option_rules
from workerless_devkit.emulators.core import EngineEmulator
from workerless_devkit.emulators.harness import RunningEmulator, emulator_module, start
from workerless_devkit.emulators.harness import create as create_engine_emulator
from workerless_devkit.emulators.harness import env_lines as env_lines  # re-exported: the one env-file writer
from workerless_devkit.versions import version_line

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: `invoke`: the handler itself cannot run (it does not import, or is not a @job_handler).
EXIT_HANDLER_BROKEN = 3

ENGINES = ENGINE_NAMES
DEMO_JOB_TYPES = ("charge-payment", "send-receipt", "generate-report")
TERMINAL_STATES = ("completed", "failed", "thrown")


class UsageError(Exception):
    """A user mistake on the command line: printed as one line, exit 2."""


# ------------------------------------------------------------------------------------------------
# Entry point


def main(argv: Sequence[str] | None = None) -> int:
    """``workerless`` console script. Returns the exit code (and exits with it when run as a script)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    restore_logging = _configure_logging(args.log_level)
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
    _add_log_format(local)
    local.add_argument(
        "--status-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="print the topology's status (per route: waiting, in flight, DLQ, last poll) to stderr this often",
    )
    _add_schedule_option(local)
    local.set_defaults(run=cmd_local)

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

    demo = commands.add_parser(
        "demo",
        help="emulator + local topology + example jobs, end to end",
        description="Start an engine emulator, create example jobs, run the template locally until every job is "
        "done at the emulator, and print the summary. No AWS account and no engine needed.",
    )
    demo.add_argument("--engine", choices=ENGINES, default="sheptra", help="the engine to emulate (default: sheptra)")
    demo.add_argument("--jobs", type=int, default=9, help="jobs to create, spread over the example types (default 9)")
    demo.add_argument("--template", default="template.yaml", help="SAM template (default: template.yaml)")
    demo.add_argument(
        "--bundle",
        default=None,
        metavar="DIR",
        help="run the stack of a deploy rehearsal's bundle (`make rehearse` writes .cache/rehearsal/bundle): what "
        "CloudFormation creates from the packaged template, code from the uploaded artifacts; the job types are "
        "still read from --template",
    )
    demo.add_argument("--max-seconds", type=float, default=50.0, help="give up after this long (default 50)")
    _add_log_format(demo)
    _add_schedule_option(demo, default=2.0)
    demo.add_argument("--tick-seconds", type=int, default=1, help="TickSeconds parameter for the demo (default 1)")
    demo.set_defaults(run=cmd_demo)
    _add_daily_loop_commands(commands)
    return apply_option_rules(parser)


def _add_schedule_option(parser: argparse.ArgumentParser, *, default: float | None = None) -> None:
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


def _configure_logging(level: str | None) -> Callable[[], None]:
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


# ------------------------------------------------------------------------------------------------
# workerless local


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
        "log_format": _log_format(args),
    }
    bundle = getattr(args, "bundle", None)
    if bundle is not None:
        # What runs is read from the stack, which exists once the topology has started.
        topology = LocalTopology.from_bundle(bundle, env_file, **options)
    else:
        topology = LocalTopology(args.template, env_file, **options)
        print(_describe(topology), file=sys.stderr)
        _check_engine_values(topology, env_file)
    code = EXIT_OK
    problem: str | None = None
    with _stop_on_signals() as stop, topology, _status_reporter(topology, args.status_every):
        if bundle is not None:
            print(_describe(topology), file=sys.stderr)
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
    _print_report(topology)
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
    from workerless.settings import parse_env_text

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


def _describe(topology: Any) -> str:
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


def _print_report(topology: Any) -> None:
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


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
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


# ------------------------------------------------------------------------------------------------
# workerless emulate


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
    with _stop_on_signals() as stop:
        while not stop.wait(0.5):
            pass
    running.stop()
    return EXIT_OK


# ------------------------------------------------------------------------------------------------
# workerless demo


def demo_variables(job_type: str, index: int, events_dir: Path | None = None) -> dict[str, Any]:
    """The variables of the type's sample event (``events_dir/sqs-TYPE.json``, which `new-handler`
    and `init` write and a user edits when typing the handler's input: the first record's body);
    without one, valid input for the example handlers, an order id for any other type."""
    sample = None if events_dir is None else events_dir / f"sqs-{job_type}.json"
    if sample is not None and sample.is_file():
        return _sample_event_variables(sample)
    order = f"order-{index + 1:04d}"
    if job_type == "charge-payment":
        return {"orderId": order, "amount": round(10 + index * 2.5, 2)}
    if job_type == "generate-report":
        return {"seconds": 1}
    return {"orderId": order}


def _sample_event_variables(sample: Path) -> dict[str, Any]:
    import json

    try:
        body = json.loads(json.loads(sample.read_text(encoding="utf-8"))["Records"][0]["body"])
        variables = body["variables"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        problem = f"not a sample SQS event with a job's variables in its first record ({exc})"
        raise UsageError(f"{sample}: {problem}") from exc
    if not isinstance(variables, dict):
        raise UsageError(f"{sample}: the first record's variables are not a JSON object")
    return variables


def _demo_job_types(template: Path) -> tuple[str, ...]:
    """The template's job types (its route loop's list), the examples' when it has none to read."""
    return tuple(t for t, _ in _template_routes(str(template)) or ()) or DEMO_JOB_TYPES


def cmd_demo(args: argparse.Namespace) -> int:
    from workerless_devkit.local.runtime import LocalTopology

    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    # Readable (a terminal): the progress lines, then each job's outcome and its handler's log lines,
    # one short line each. JSON (a pipe, CI): the progress lines and the summary only.
    functions_level = "INFO" if _log_format(args) == "readable" else "WARNING"
    if args.log_level is None:
        # The library's Powertools logger (named after the service, "workerless") was built at
        # import with the default level.
        logging.getLogger("workerless_devkit.local").setLevel(logging.WARNING)
        logging.getLogger("workerless").setLevel(functions_level)
    template = Path(args.template)
    if not template.is_file():
        raise UsageError(f"template {str(template)!r} not found (run the demo from the project directory)")
    running = start_emulator(args.engine)
    emulator = running.emulator
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="workerless-demo-") as tmp:
            env_file = running.write_env_file(Path(tmp) / "demo.env")
            parameters = _demo_parameters(template, args, log_level=functions_level)
            options: dict[str, Any] = {
                "parameters": parameters,
                "schedule_seconds": args.schedule_seconds,
                "log_format": _log_format(args),
            }
            topology = (
                LocalTopology(template, env_file, route_settings=_demo_route_settings(template), **options)
                if args.bundle is None
                else LocalTopology.from_bundle(args.bundle, env_file, **options)
            )
            types = _demo_job_types(template)
            events_dir = template.parent / "events"
            print(f"{args.engine} emulator on {running.url}; {args.jobs} job(s) of {', '.join(types)}")
            ids = [
                emulator.create_job(types[i % len(types)], demo_variables(types[i % len(types)], i, events_dir))
                for i in range(args.jobs)
            ]
            progress = _Progress(emulator, ids, started)
            where = "the template" if args.bundle is None else f"the stack of {args.bundle}"
            print(f"starting the functions of {where} locally (embedded AWS: moto)...", flush=True)
            with _stop_on_signals() as stop, topology:
                finished = topology.run_until(lambda: progress.update() or stop.is_set(), args.max_seconds)
                finished = finished and not stop.is_set()
                # Leaving the topology waits for invocations still running (bounded): say so, it can take seconds.
                print("draining: waiting for running invocations to end...", flush=True)
            states = progress.states()
    finally:
        running.stop()
    print()
    print(topology.summary.table())
    print()
    completed = sum(1 for state in states.values() if state == "completed")
    elapsed = time.monotonic() - started
    if completed == len(ids):
        print(f"demo: all {len(ids)} jobs completed in {elapsed:.1f} s")
        return EXIT_OK
    unfinished = {job_id: state for job_id, state in states.items() if state != "completed"}
    detail = ", ".join(f"{job_id[:8]}: {state}" for job_id, state in list(unfinished.items())[:10])
    why = "gave up" if not finished else "finished"
    print(f"demo: {why} after {elapsed:.1f} s with {completed}/{len(ids)} completed ({detail})", file=sys.stderr)
    return EXIT_FAILED


#: The demo's timings, as template parameters, in (timeout, visibility) pairs: a failed delivery
#: comes back in 10 s, not minutes, and each function's timeout stays within its queue's visibility
#: as Lambda requires (a pair is set only where the template declares both). A route with its own
#: Timeout and VisibilityTimeout (its Mappings.Routes line) gets the same 10 s:
#: :func:`_demo_route_settings`.
DEMO_TIMINGS: tuple[tuple[tuple[str, str], tuple[str, str]], ...] = (
    (("HandlerTimeout", "10"), ("JobQueueVisibilityTimeout", "10")),
    (("HeartbeatTimeout", "10"), ("HeartbeatVisibilityTimeout", "10")),
)
DEMO_ROUTE_SECONDS = 10


def _demo_route_settings(template: Path) -> dict[str, dict[str, int]]:
    """The demo's timings for the routes that set their own (a template without Mappings.Routes: none)."""
    from workerless_devkit.local.template import route_timing_settings

    return route_timing_settings(template, timeout=DEMO_ROUTE_SECONDS, visibility=DEMO_ROUTE_SECONDS)


def _demo_parameters(template: Path, args: argparse.Namespace, *, log_level: str = "WARNING") -> dict[str, str]:
    """Demo-friendly parameter values (:data:`DEMO_TIMINGS`, a 1 s tick, ``log_level``), for the
    parameters this template declares."""
    from workerless_devkit.local.template import parse_template_text

    declared = parse_template_text(template.read_text(encoding="utf-8"), source=str(template)).get("Parameters") or {}
    wanted = {"EngineName": args.engine, "TickSeconds": str(args.tick_seconds), "LogLevel": log_level}
    for pair in DEMO_TIMINGS:
        if all(name in declared for name, _ in pair):
            wanted.update(pair)
    return {key: value for key, value in wanted.items() if key in declared}


class _Progress:
    """Polls the emulator's job states and prints a line whenever the counts change, and one saying
    what it waits for when they have not changed for :attr:`QUIET_SECONDS` (a pause is not a hang)."""

    QUIET_SECONDS = 5.0

    def __init__(self, emulator: Any, ids: list[str], started: float) -> None:
        self._emulator = emulator
        self._ids = ids
        self._started = started
        self._last: tuple[tuple[str, int], ...] = ()
        self._states: dict[str, str] = {}
        self._printed = started

    def states(self) -> dict[str, str]:
        return dict(self._states)

    def update(self) -> bool:
        """True once every job is in a terminal state."""
        for job_id in self._ids:
            self._states[job_id] = str(self._emulator.job_state(job_id).get("state", "unknown"))
        counts: dict[str, int] = {}
        for state in self._states.values():
            counts[state] = counts.get(state, 0) + 1
        key = tuple(sorted(counts.items()))
        if key != self._last:
            self._last = key
            shown = ", ".join(f"{state} {n}" for state, n in sorted(counts.items()))
            done = sum(n for state, n in counts.items() if state in TERMINAL_STATES)
            print(f"[{time.monotonic() - self._started:5.1f}s] {done}/{len(self._ids)} done  ({shown})", flush=True)
            self._printed = time.monotonic()
        elif time.monotonic() - self._printed >= self.QUIET_SECONDS:
            waiting = sum(1 for state in self._states.values() if state not in TERMINAL_STATES)
            print(
                f"[{time.monotonic() - self._started:5.1f}s] waiting for {waiting} job(s): a failed attempt comes "
                "back after its queue's visibility timeout (10 s here), a new one at the next poller tick",
                flush=True,
            )
            self._printed = time.monotonic()
        return all(state in TERMINAL_STATES for state in self._states.values())


# ------------------------------------------------------------------------------------------------
# The daily loop: new-handler, invoke, status, secrets import, dlq show / redrive


def _add_daily_loop_commands(commands: Any) -> None:
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

    build = commands.add_parser(
        "build",
        help="render an application's template.yaml from its routes.yaml and the installed framework",
        description="In an application made by `workerless init`: write template.yaml (the installed workerless "
        "version's framework template with routes.yaml's routes) and .workerless/ (the library's entry points and "
        "the layer's build, from the pinned workerless wheel). Both are generated and git-ignored.",
    )
    build.add_argument("--dir", default=".", help="the application's directory (default: the current one)")
    build.set_defaults(run=cmd_build)

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

    status = commands.add_parser(
        "status",
        help="per route: waiting, in flight, recent failures and dead letters; the job DLQ; last poll",
        description="Read a deployed stack's queues, job table and metrics (or explicit queue URLs) and print, per job "
        "type, what waits, what runs, what failed or was dead-lettered, then the job dead-letter queue every route "
        "shares, and when the poller last ticked.",
    )
    _add_target_options(status, routes=True)
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

    secrets = commands.add_parser("secrets", help="the engine's connection values in Secrets Manager")
    secrets_commands = secrets.add_subparsers(dest="secrets_command", required=True, metavar="SUBCOMMAND")
    secrets_import = secrets_commands.add_parser(
        "import",
        help="validate an env file's engine values and store them in Secrets Manager",
        description="Validate the engine's connection values in an env file (the Sheptra block as Drive prints it, "
        "node-flow's NF_* or StageNext's STAGENEXT_* keys) and create or update the secret. Prints the key names "
        "and the secret's ARN, never a value.",
    )
    secrets_import.add_argument("--env-file", default=".env", help="dotenv file (default: .env)")
    secrets_import.add_argument("--secret-name", default=None, help="secret name (default: workerless/engine)")
    _add_aws_options(secrets_import)
    secrets_import.set_defaults(run=cmd_secrets_import)

    dlq = commands.add_parser("dlq", help="the job dead-letter queue (every route's): show or redrive its messages")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="SUBCOMMAND")
    show = dlq_commands.add_parser(
        "show",
        help="list the jobs in the job dead-letter queue, of every type or of TYPE (nothing deleted)",
        description="List the dead-lettered jobs (of TYPE only, when given; the type is read from each message): "
        "job id, type, engine, attempt, retries and receive count (never the engine's handle). Messages are peeked, "
        "not deleted.",
    )
    show.add_argument("job_type", metavar="TYPE", nargs="?", default=None, help="only this job type's dead letters")
    _add_target_options(show, routes=False)
    show.add_argument("--limit", type=int, default=10, help="at most this many messages (default 10)")
    show.add_argument(
        "--scan", type=int, default=100, help="with TYPE: read at most this many messages to find them (default 100)"
    )
    show.add_argument("--variables", action="store_true", help="also print each job's variables")
    show.add_argument(
        "--peek-seconds", type=int, default=5, help="messages read stay hidden this long (default 5; 0-43200)"
    )
    show.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    show.set_defaults(run=cmd_dlq_show)
    redrive = dlq_commands.add_parser(
        "redrive",
        help="move dead-lettered jobs (of every type, or of TYPE) back to their job queues",
        description="Move up to --limit messages from the job dead-letter queue back to the job queue of the type "
        "each message names (send, then delete), within --max-seconds; with TYPE, only that type's. Messages not "
        "moved are made visible again at once.",
    )
    redrive.add_argument("job_type", metavar="TYPE", nargs="?", default=None, help="only this job type's dead letters")
    _add_target_options(redrive, routes=False)
    redrive.add_argument("--to-queue-url", default=None, help="TYPE's job queue (with --queue-url; needs TYPE)")
    redrive.add_argument("--limit", type=int, default=100, help="at most this many messages (default 100)")
    redrive.add_argument("--max-seconds", type=float, default=60.0, help="stop after this long (default 60)")
    redrive.set_defaults(run=cmd_dlq_redrive)


def _add_log_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=("auto", "readable", "text", "json"),
        default="auto",
        help="the functions' log lines: one short line each (readable, or its alias text) or as CloudWatch gets "
        "them (json); "
        "auto: readable on a terminal, json otherwise",
    )


def _log_format(args: argparse.Namespace) -> Literal["json", "readable"]:
    if args.log_format == "auto":
        return "readable" if sys.stdout.isatty() else "json"
    return "json" if args.log_format == "json" else "readable"


def _add_aws_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--region", default=None, help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, then your profile's)"
    )
    parser.add_argument("--profile", default=None, help="AWS CLI profile")
    parser.add_argument("--endpoint-url", default=None, help="AWS endpoint (a moto server, LocalStack)")


def _add_target_options(parser: argparse.ArgumentParser, *, routes: bool) -> None:
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
    _add_aws_options(parser)


def _client(args: argparse.Namespace, service: str) -> Any:
    from workerless_devkit.devtools.clients import aws_client

    return aws_client(service, region=args.region, profile=args.profile, endpoint_url=args.endpoint_url)


def _template_routes(path: str) -> list[tuple[str, str]] | None:
    """(type, queue logical id) of a template's route loop (its &Routes list), when the template is there."""
    from workerless_devkit.devtools.scaffold import ScaffoldError, route_types

    template = Path(path)
    if not template.is_file():
        return None
    try:
        return route_types(template.read_text(encoding="utf-8"))
    except (ScaffoldError, ValueError):
        return None


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


def cmd_init(args: argparse.Namespace) -> int:
    from workerless_devkit.devtools.init import init_application

    app = init_application(args.directory, job_type=args.job_type, engine=args.engine)
    print(f"created {app.directory} (job type {app.job_type}):")
    for path in app.files:
        print(f"  {path.relative_to(app.directory)}")
    print()
    print(f"next: cd {args.directory} && make demo && make test")
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    from workerless_devkit.devtools.app import render_application

    rendered = render_application(args.dir)
    print(f"rendered {rendered.template} ({len(rendered.routes)} route(s): {', '.join(rendered.routes)})")
    return EXIT_OK


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


def _deployment(args: argparse.Namespace) -> Any:
    from workerless_devkit.devtools.stack import Deployment, parse_route_options, resolve_stack

    routes = getattr(args, "route", None) or []
    if args.stack_name and routes:
        raise UsageError("give --stack-name or --route, not both")
    if args.stack_name:
        names = _template_routes(args.template) if hasattr(args, "template") else None
        return resolve_stack(_client(args, "cloudformation"), args.stack_name, routes=names)
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
        sqs=_client(args, "sqs"),
        dynamodb=_client(args, "dynamodb") if deployment.table else None,
        cloudwatch=None if args.no_metrics else _client(args, "cloudwatch"),
        window_minutes=args.window_minutes,
    )
    print(json.dumps(status.as_dict(), indent=2) if args.json else status.table())
    return EXIT_OK


def cmd_secrets_import(args: argparse.Namespace) -> int:
    from workerless_devkit.devtools.secrets_cli import DEFAULT_SECRET_NAME, import_secret, read_env_file

    values = read_env_file(args.env_file)
    name = args.secret_name or DEFAULT_SECRET_NAME
    done = import_secret(values, _client(args, "secretsmanager"), secret_name=name)
    print(f"{'created' if done.created else 'updated'} secret {name} ({done.engine}): {', '.join(done.keys)}")
    if done.skipped:
        print(f"not stored (not {done.engine} keys): {', '.join(done.skipped)}")
    print(f"EngineSecretArn: {done.arn}")
    return EXIT_OK


def _dead_letter_target(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """(job dead-letter queue URL, job type -> its job queue URL) of the target the options name."""
    if args.stack_name and args.queue_url:
        raise UsageError("give --stack-name or --queue-url, not both")
    if args.queue_url:
        to_queue = getattr(args, "to_queue_url", None)
        if to_queue and not args.job_type:
            # One queue for every type would hand each handler other types' jobs (it refuses them).
            raise UsageError("--to-queue-url needs TYPE: the dead-letter queue holds every route's jobs")
        return args.queue_url, {args.job_type: to_queue} if to_queue and args.job_type else {}
    if getattr(args, "to_queue_url", None):
        raise UsageError("--to-queue-url goes with --queue-url (a stack's job queues are found)")
    if not args.stack_name:
        raise UsageError("give --stack-name NAME, or --queue-url URL")
    from workerless_devkit.devtools.stack import resolve_stack

    names = _template_routes("template.yaml")
    deployment = resolve_stack(_client(args, "cloudformation"), args.stack_name, routes=names)
    if args.job_type:
        deployment.route(args.job_type)  # an unknown type is an error, with the known ones
    if not deployment.dead_letter_url:
        raise UsageError(f"stack {args.stack_name} has no JobDeadLetterQueue")
    return deployment.dead_letter_url, {r.job_type: r.queue_url for r in deployment.routes if r.queue_url}


def cmd_dlq_show(args: argparse.Namespace) -> int:
    import json

    from workerless_devkit.devtools.dlq import depth, show

    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if args.scan < 1:
        raise UsageError("--scan must be at least 1")
    url, _ = _dead_letter_target(args)
    sqs = _client(args, "sqs")
    if not 0 <= args.peek_seconds <= 43_200:
        raise UsageError("--peek-seconds must be between 0 and 43200")
    letters, read = show(
        sqs, url, limit=args.limit, peek_seconds=args.peek_seconds, job_type=args.job_type, scan=args.scan
    )
    if args.json:
        for letter in letters:
            print(json.dumps(letter.as_dict(variables=args.variables), default=str))
        return EXIT_OK
    which = (
        f"showing {len(letters)} of type {args.job_type} (of {read} read)"
        if args.job_type
        else f"showing {len(letters)}"
    )
    print(f"job dead-letter queue: about {depth(sqs, url)} message(s); {which}")
    for letter in letters:
        if letter.problem:
            print(f"  message {letter.message_id}: {letter.problem} (received {letter.receive_count}x)")
            continue
        line = (
            f"  job {letter.job_id} type {letter.job_type} engine {letter.engine} attempt {letter.attempt or '-'} "
            f"retries {letter.retries if letter.retries is not None else '-'} received {letter.receive_count}x"
        )
        if args.variables:
            line += f" variables {json.dumps(letter.variables, default=str)}"
        print(line)
    return EXIT_OK


def cmd_dlq_redrive(args: argparse.Namespace) -> int:
    from workerless_devkit.devtools.dlq import redrive

    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    url, queues = _dead_letter_target(args)
    if not queues:
        raise UsageError("give --to-queue-url (TYPE's job queue to move its messages back to)")
    result = redrive(
        _client(args, "sqs"), url, queues, job_type=args.job_type, limit=args.limit, max_seconds=args.max_seconds
    )
    which = f"{args.job_type} job(s)" if args.job_type else "job(s)"
    where = "to --to-queue-url" if args.queue_url else "back to their job queue"
    print(f"moved {result.moved} {which} {where}; {result.left} message(s) left in the DLQ")
    for reason, count in result.kept.items():
        why = "not a workerless job" if reason == "not a job" else f"type {reason}"
        if reason != "not a job" and reason not in queues:
            why += ", no route here"
        print(f"  kept {count} message(s): {why}")
    if result.failed:
        print(f"{result.failed} message(s) could not be sent; they stay in the DLQ", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
