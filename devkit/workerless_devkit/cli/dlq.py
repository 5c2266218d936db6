"""``workerless dlq show|redrive``: the job dead-letter queue every route shares."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workerless_devkit.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_target_options,
    client,
    template_routes,
)


def register(commands: Any) -> None:
    """Add ``workerless dlq show|redrive`` to the command parsers."""
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
    add_target_options(show, routes=False)
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
    add_target_options(redrive, routes=False)
    redrive.add_argument("--to-queue-url", default=None, help="TYPE's job queue (with --queue-url; needs TYPE)")
    redrive.add_argument("--limit", type=int, default=100, help="at most this many messages (default 100)")
    redrive.add_argument("--max-seconds", type=float, default=60.0, help="stop after this long (default 60)")
    redrive.set_defaults(run=cmd_dlq_redrive)


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

    names = template_routes("template.yaml")
    deployment = resolve_stack(client(args, "cloudformation"), args.stack_name, routes=names)
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
    sqs = client(args, "sqs")
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
        client(args, "sqs"), url, queues, job_type=args.job_type, limit=args.limit, max_seconds=args.max_seconds
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
