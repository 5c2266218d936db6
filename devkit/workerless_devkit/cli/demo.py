"""``workerless demo``: an emulator, the local topology and example jobs, end to end."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from workerless_devkit.cli.common import (
    ENGINES,
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_log_format,
    add_schedule_option,
    log_format,
    stop_on_signals,
    template_routes,
)
from workerless_devkit.cli.emulate import start_emulator

DEMO_JOB_TYPES = ("charge-payment", "send-receipt", "generate-report")
TERMINAL_STATES = ("completed", "failed", "thrown")


def register(commands: Any) -> None:
    """Add ``workerless demo`` to the command parsers."""
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
    add_log_format(demo)
    add_schedule_option(demo, default=2.0)
    demo.add_argument("--tick-seconds", type=int, default=1, help="TickSeconds parameter for the demo (default 1)")
    demo.set_defaults(run=cmd_demo)


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
    return tuple(t for t, _ in template_routes(str(template)) or ()) or DEMO_JOB_TYPES


def cmd_demo(args: argparse.Namespace) -> int:
    from workerless_devkit.local.runtime import LocalTopology

    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    # Readable (a terminal): the progress lines, then each job's outcome and its handler's log lines,
    # one short line each. JSON (a pipe, CI): the progress lines and the summary only.
    functions_level = "INFO" if log_format(args) == "readable" else "WARNING"
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
                "log_format": log_format(args),
            }
            topology = (
                LocalTopology(template, env_file, route_settings=demo_route_settings(template), **options)
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
            with stop_on_signals() as stop, topology:
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
#: :func:`demo_route_settings`.
DEMO_TIMINGS: tuple[tuple[tuple[str, str], tuple[str, str]], ...] = (
    (("HandlerTimeout", "10"), ("JobQueueVisibilityTimeout", "10")),
    (("HeartbeatTimeout", "10"), ("HeartbeatVisibilityTimeout", "10")),
)


DEMO_ROUTE_SECONDS = 10


def demo_route_settings(template: Path) -> dict[str, dict[str, int]]:
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
