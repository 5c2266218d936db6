"""``python -m workerless_devkit.chaos``: the mixed chaos run (every fault on at once) for each engine.

Example:
    $ python -m workerless_devkit.chaos --engine all --jobs 300 --seed 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workerless_devkit.chaos.plan import Fault, FaultPlan
from workerless_devkit.chaos.run import ENGINES, RunConfig, explain, print_figures, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workerless_devkit.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="all", choices=[*ENGINES, "all"])
    parser.add_argument("--jobs", type=int, default=300, help="jobs per engine (default 300)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every fault rate (default 1)")
    parser.add_argument(
        "--rate", action="append", default=[], metavar="KIND=P", help="set one fault's rate (repeatable)"
    )
    parser.add_argument("--max-seconds", type=float, default=240.0, help="give up on an engine after this")
    parser.add_argument("--deadline", type=float, default=90.0, help="stuck: not final this long after activation")
    parser.add_argument(
        "--large-jobs", type=int, default=3, help="jobs over the queue's message size: the claim check, S3 (default 3)"
    )
    parser.add_argument(
        "--stagenext-requeue",
        choices=("original", "back"),
        default="original",
        help="where StageNext's emulator requeues a delivery: its original place (default, as RabbitMQ) or the back",
    )
    parser.add_argument("--template", type=Path, default=Path("template.yaml"))
    parser.add_argument("--ledger", type=Path, default=None, help="append the side-effect ledger here (JSONL)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--log-level", default="CRITICAL", help="the functions' log level (default CRITICAL)")
    args = parser.parse_args(argv)
    from workerless.observability import logger

    logger.setLevel(args.log_level.upper())

    failed = False
    results = []
    for engine in ENGINES if args.engine == "all" else (args.engine,):
        plan = FaultPlan.mixed(seed=args.seed, scale=args.scale)
        rates = dict(plan.rates)
        for item in args.rate:
            kind, _, value = item.partition("=")
            rates[Fault(kind)] = float(value)
        plan = FaultPlan(rates, seed=args.seed, limits=plan.limits)
        config = RunConfig(
            engine=engine,
            jobs=args.jobs,
            plan=plan,
            template=args.template,
            max_seconds=args.max_seconds,
            deadline_seconds=args.deadline,
            long_reports=max(1, args.jobs // 50),
            large_jobs=min(args.large_jobs, args.jobs),
            ledger_path=args.ledger,
            log_level=args.log_level.upper(),
            stagenext_requeue=args.stagenext_requeue,
        )
        result = run(config)
        figures = result.figures
        results.append(figures.as_dict())
        if not args.json:
            print_figures(figures)
        if not figures.ok:
            sys.stderr.write(explain(result) + "\n")
        failed = failed or not figures.ok
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
