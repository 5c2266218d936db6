"""``python -m workerless_devkit.rehearsal``: the deploy rehearsal from the command line (`make rehearse`).

Prints each step and, at the end, what each stack is (resources created, types moto skipped and
how they were checked, cfn-lint's warnings, what `sam deploy --no-execute-changeset`'s change set adds). Exit
status 1 with the reason when anything would not deploy.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from workerless_devkit.rehearsal.errors import RehearsalError
from workerless_devkit.rehearsal.run import RehearsalOptions, RehearsalResult, StackTarget, rehearse


def _stack(text: str) -> StackTarget:
    name, _, region = text.partition("@")
    if not name or not region:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME@REGION")
    return StackTarget(name=name, region=region)


def _parameter(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not Key=Value")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workerless_devkit.rehearsal", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the project (template.yaml); default: .")
    parser.add_argument(
        "--out", type=Path, default=None, help="the bundle directory (default: ROOT/.cache/rehearsal/bundle)"
    )
    parser.add_argument("--built", type=Path, default=None, help="an already built directory: skip `sam build`")
    parser.add_argument(
        "--stack",
        type=_stack,
        action="append",
        default=None,
        metavar="NAME@REGION",
        help="a stack to create (repeat: side by side); default workerless-rehearsal@us-east-1 and "
        "workerless-rehearsal-b@us-west-2 (the second with the alarms off)",
    )
    parser.add_argument(
        "--parameter", type=_parameter, action="append", default=[], metavar="KEY=VALUE", help="a parameter value"
    )
    parser.add_argument("--no-deploy", action="store_true", help="skip the `sam deploy --no-execute-changeset` try")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    stacks = (
        tuple(args.stack)
        if args.stack
        else (
            StackTarget("workerless-rehearsal", "us-east-1"),
            StackTarget("workerless-rehearsal-b", "us-west-2", alarms=False),
        )
    )
    options = RehearsalOptions(
        root=root,
        out=(args.out or root / ".cache" / "rehearsal" / "bundle").resolve(),
        stacks=stacks,
        built=args.built,
        parameters=dict(args.parameter),
        try_deploy=not args.no_deploy,
    )
    start = time.monotonic()
    try:
        result = rehearse(options, say=lambda line: print(line, file=sys.stderr, flush=True))
    except RehearsalError as exc:
        print(f"rehearsal failed: {exc}", file=sys.stderr)
        return 1
    _summary(result, time.monotonic() - start)
    return 0


def _summary(result: RehearsalResult, seconds: float) -> None:
    print(f"\nrehearsal passed in {seconds:.1f} s (SAM CLI {result.sam_cli_version})")
    for item in result.stacks:
        stack = item.stack
        print(f"\n{stack.name} ({stack.region}): bundle {item.bundle}")
        types = Counter(r.type for r in stack.resources)
        print(f"  created {len(stack.resources)} resources: " + ", ".join(f"{n} {t}" for t, n in sorted(types.items())))
        for kind, ids in sorted(item.checks["skipped_checked"].items()):
            print(f"  moto skipped {len(ids)} {kind}: checked from the transformed template")
        layered = len(item.checks["function_layers_checked"])
        print(f"  function layers checked from the template (moto drops them): {layered}")
        print(
            f"  function artifacts checked: {len(item.checks['function_modules'])}; layer modules with bytecode: "
            f"{sum(item.checks['layer_modules_with_bytecode'].values())}"
        )
        if item.kept_subs:
            print(f"  Fn::Sub kept where SAM CLI's expansion would have made plain text: {item.kept_subs}")
        warnings = Counter(f"{f.stage} {f.rule}" for f in item.findings if not f.not_created)
        if warnings:
            print("  cfn-lint warnings: " + ", ".join(f"{k} x{n}" for k, n in sorted(warnings.items())))
        for finding in (f for f in item.findings if f.not_created):
            print(f"  cfn-lint on a resource CloudFormation does not create (Condition false): {finding}")
        if item.deploy is not None:
            adds = item.checks["change_set_adds"]
            print(
                f"  sam deploy --no-execute-changeset created its change set: {len(adds)} resources to add, "
                "every resource the stack creates among them (the server ran the transforms)"
            )
        print(f"  seconds: {item.seconds}")


if __name__ == "__main__":
    sys.exit(main())
