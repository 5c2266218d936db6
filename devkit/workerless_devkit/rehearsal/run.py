"""The deploy rehearsal, end to end: what `sam deploy` and CloudFormation do, as far as loopback allows.

1. `sam build` into a build directory of its own (or an already built one);
2. moto's server on 127.0.0.1; per stack, an artifact bucket in the stack's region (Lambda reads
   code only from a bucket in its own region, so `sam deploy` packages per region) and
   `sam package` into it; cfn-lint on the packaged template;
3. `sam deploy --no-execute-changeset` against moto's CloudFormation, its outcome recorded;
4. AWS::LanguageExtensions (SAM CLI's implementation), then AWS::Serverless (samtranslator),
   cfn-lint after each;
5. create_stack on moto's CloudFormation; what it skipped, checked from the transformed template;
6. every function's and layer's artifact downloaded and checked;
7. the bundle written (:mod:`.bundle`): the first stack's in ``out``, every further one's in
   ``out/others/<stack name>``.

Several stacks (item 4 of issue 25, "two stacks side by side") are created on the same server:
a collision of anything named account-wide (a dashboard, an SSM parameter path, a role) fails the
second CreateStack, and is reported as such.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workerless_devkit.local.stack.create import create_bucket
from workerless_devkit.rehearsal import artifacts as artifact_checks
from workerless_devkit.rehearsal.bundle import (
    ARTIFACTS_DIR,
    OTHERS_DIR,
    PACKAGED_FILE,
    BundleHeader,
    prepare,
    write_bundle,
)
from workerless_devkit.rehearsal.changeset import check_change_set, transforming_change_sets
from workerless_devkit.rehearsal.conditions import created_resources
from workerless_devkit.rehearsal.errors import RehearsalError
from workerless_devkit.rehearsal.lint import Finding, lint
from workerless_devkit.rehearsal.sam import DeployAttempt, build, deploy_without_executing, package
from workerless_devkit.rehearsal.server import ACCOUNT_ID, Endpoint, moto_server
from workerless_devkit.rehearsal.skipped import check_dropped_properties, check_skipped
from workerless_devkit.rehearsal.stack import CreatedStack, create_stack
from workerless_devkit.rehearsal.tools import SamCli, build_env, locate_sam, loopback_env, sam_config_dir
from workerless_devkit.rehearsal.transform import check_expanded, expand, pseudo_parameters, translate


@dataclass(frozen=True, slots=True)
class StackTarget:
    """One stack to rehearse. ``alarms``: give AlarmTopicArn a (fake) topic, so the alarms exist."""

    name: str
    region: str
    alarms: bool = True


@dataclass(frozen=True, slots=True)
class RehearsalOptions:
    root: Path
    out: Path
    stacks: tuple[StackTarget, ...] = (StackTarget("workerless-rehearsal", "us-east-1"),)
    #: An already built directory (holding template.yaml): no `sam build`.
    built: Path | None = None
    #: Where `sam build` writes (default root/.cache/rehearsal/build: not the developer's .aws-sam).
    build_dir: Path | None = None
    #: `sam build --cached`'s cache (default root/.cache/rehearsal/cache: the layer is rebuilt only
    #: when layers/workerless changes, as with `make build`).
    cache_dir: Path | None = None
    #: Parameter values over the rehearsal's own (a fake engine secret, and an alarm topic).
    parameters: Mapping[str, str] = field(default_factory=dict)
    #: The `sam` script (default: WORKERLESS_SAM, else root/.venv-sam/bin/sam).
    sam: str | None = None
    #: Try `sam deploy --no-execute-changeset` against moto's CloudFormation (first stack only).
    try_deploy: bool = True


@dataclass(frozen=True, slots=True)
class StackRehearsal:
    """What the rehearsal of one stack found; its bundle is in ``bundle``."""

    bundle: Path
    header: BundleHeader
    stack: CreatedStack
    findings: tuple[Finding, ...]
    deploy: DeployAttempt | None
    kept_subs: int
    checks: dict[str, Any]
    seconds: dict[str, float]


@dataclass(frozen=True, slots=True)
class RehearsalResult:
    sam_cli_version: str
    stacks: tuple[StackRehearsal, ...]
    seconds: dict[str, float]


def default_parameters(target: StackTarget, account_id: str = ACCOUNT_ID) -> dict[str, str]:
    """The stack's parameter values: a full (fake) secret ARN in the stack's region, and the alarm topic."""
    values = {
        "EngineSecretArn": f"arn:aws:secretsmanager:{target.region}:{account_id}:secret:workerless/rehearsal-AbCdEf"
    }
    if target.alarms:
        values["AlarmTopicArn"] = f"arn:aws:sns:{target.region}:{account_id}:workerless-rehearsal-alarms"
    return values


def rehearse(options: RehearsalOptions, say: Callable[[str], None] = lambda _: None) -> RehearsalResult:
    """Runs the whole rehearsal; raises a :class:`RehearsalError` naming the first thing that would not deploy."""
    if not options.stacks:
        raise RehearsalError("no stack to rehearse")
    names = [(t.name, t.region) for t in options.stacks]
    if len(set(names)) != len(names):
        raise RehearsalError(f"the same stack twice in {names}")
    sam = locate_sam(options.root, options.sam)
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="workerless-rehearsal-") as scratch:
        work = Path(scratch)
        app_dir = sam_config_dir(work)
        with _timed(seconds, "build"):
            if options.built is not None:
                built = options.built / "template.yaml"
                if not built.is_file():
                    raise RehearsalError(f"{options.built} is not a built directory: it has no template.yaml")
                say(f"using the build in {options.built}")
            else:
                build_dir = options.build_dir or options.root / ".cache" / "rehearsal" / "build"
                cache_dir = options.cache_dir or options.root / ".cache" / "rehearsal" / "cache"
                say(f"sam build (SAM CLI {sam.version}) into {build_dir}")
                built = build(sam, options.root, build_dir, cache_dir, build_env(app_dir, "us-east-1"))
        with moto_server() as endpoint:
            say(f"moto's server on {endpoint.url}")
            results = []
            for index, target in enumerate(options.stacks):
                bundle = options.out if index == 0 else options.out / OTHERS_DIR / target.name
                parameters = {**default_parameters(target), **options.parameters}
                results.append(
                    _rehearse_stack(
                        sam,
                        endpoint,
                        built,
                        target,
                        parameters,
                        bundle=bundle,
                        work=work,
                        app_dir=app_dir,
                        try_deploy=options.try_deploy and index == 0,
                        say=say,
                    )
                )
    return RehearsalResult(sam_cli_version=sam.version, stacks=tuple(results), seconds=seconds)


def _rehearse_stack(
    sam: SamCli,
    endpoint: Endpoint,
    built: Path,
    target: StackTarget,
    parameters: Mapping[str, str],
    *,
    bundle: Path,
    work: Path,
    app_dir: Path,
    try_deploy: bool,
    say: Callable[[str], None],
) -> StackRehearsal:
    seconds: dict[str, float] = {}
    region, name = target.region, target.name
    prepare(bundle)
    bucket = f"workerless-rehearsal-artifacts-{region}"
    s3 = endpoint.client("s3", region)
    create_bucket(s3, bucket)
    env = loopback_env(app_dir, region, endpoint.url, endpoint.s3_url)
    findings: list[Finding] = []

    with _timed(seconds, "package"):
        say(f"[{name} {region}] sam package into s3://{bucket}")
        packaged = package(sam, built, bucket, bundle / PACKAGED_FILE, env)
        findings += lint("packaged", packaged.template.read_text(encoding="utf-8"), [region])

    attempt = None
    if try_deploy:
        with _timed(seconds, "deploy"):
            say(f"[{name} {region}] sam deploy --no-execute-changeset against moto's CloudFormation")
            transformed_by_server: list[str] = []
            with transforming_change_sets(sam, env, work_dir=work, transformed=transformed_by_server):
                attempt = deploy_without_executing(
                    sam,
                    packaged.template,
                    stack_name=name,
                    bucket=bucket,
                    region=region,
                    parameters=parameters,
                    env=env,
                )
            if not attempt.succeeded:
                said = f"{attempt.sam_said} {attempt.server_said}".strip()
                raise RehearsalError(f"sam deploy --no-execute-changeset failed (exit {attempt.returncode}): {said}")
            if not transformed_by_server:
                raise RehearsalError("sam deploy made its change set without the server transforming the template")
            say(f"[{name} {region}]   exit {attempt.returncode}: {attempt.sam_said} {attempt.server_said}".rstrip())

    with _timed(seconds, "transform"):
        say(f"[{name} {region}] AWS::LanguageExtensions (SAM CLI), AWS::Serverless (samtranslator), cfn-lint")
        values = {**parameters, **pseudo_parameters(stack_name=name, region=region, account_id=ACCOUNT_ID)}
        expanded = expand(sam, packaged.template, values, env, work_dir=work)
        check_expanded(expanded.template)
        absent = set(expanded.template["Resources"]) - set(created_resources(expanded.template, parameters))
        findings += lint("expanded", json.dumps(expanded.template), [region], not_created=absent)
        transformed = translate(expanded.template, parameters, region)
        created = set(created_resources(transformed, parameters))  # also what the change set must add
        absent = set(transformed["Resources"]) - created
        findings += lint("transformed", json.dumps(transformed), [region], not_created=absent)

    change_set: list[str] = []
    if attempt is not None:
        cloudformation = endpoint.client("cloudformation", region)
        change_set = check_change_set(cloudformation, name, created)
        # The change set is reviewed, not executed: its stack (REVIEW_IN_PROGRESS, no resources) goes,
        # as `aws cloudformation delete-stack` removes it, and the stack is created under that name.
        cloudformation.delete_stack(StackName=name)

    with _timed(seconds, "stack"):
        say(f"[{name} {region}] create_stack on moto's CloudFormation")
        stack = create_stack(endpoint, name=name, region=region, template=transformed, parameters=parameters)
        say(f"[{name} {region}]   {len(stack.resources)} resources; skipped {', '.join(stack.skipped_types) or 'none'}")
        lambda_client = endpoint.client("lambda", region)
        skipped = check_skipped(transformed, stack, parameters)
        layered = check_dropped_properties(transformed, stack, lambda_client)

    with _timed(seconds, "artifacts"):
        say(f"[{name} {region}] artifacts")
        saved = artifact_checks.download(transformed, s3, bundle / ARTIFACTS_DIR)
        modules = artifact_checks.check_functions(transformed, saved, stack, lambda_client)
        layers = artifact_checks.check_layers(transformed, saved)

    header = BundleHeader(
        stack_name=name,
        region=region,
        account_id=ACCOUNT_ID,
        sam_cli_version=sam.version,
        artifact_bucket=bucket,
        parameters=_effective_parameters(transformed, parameters),
    )
    checks = {
        "skipped_checked": skipped,
        "function_layers_checked": layered,
        "function_modules": modules,
        "layer_modules_with_bytecode": layers,
        "artifacts": [f"{a.bucket}/{a.key}" for a in saved.values()],
        "moto_warned_types": list(stack.warned),
        "change_set_adds": sorted(change_set),
    }
    report = {
        "sam_cli_version": sam.version,
        "stack": {"name": name, "region": region},
        "lint": [f.as_json() for f in findings],
        "sam_deploy": attempt.as_json() if attempt else None,
        "language_extensions_subs_kept": expanded.kept_subs,
        "checks": checks,
        "seconds": seconds,
    }
    write_bundle(bundle, header, expanded=expanded.template, transformed=transformed, stack=stack, report=report)
    return StackRehearsal(
        bundle=bundle,
        header=header,
        stack=stack,
        findings=tuple(findings),
        deploy=attempt,
        kept_subs=expanded.kept_subs,
        checks=checks,
        seconds=seconds,
    )


def _effective_parameters(template: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str]:
    """Every declared parameter's value as CloudFormation holds it: given, else the Default, as text."""
    values: dict[str, str] = {}
    for name, spec in (template.get("Parameters") or {}).items():
        if name in given:
            values[name] = given[name]
        elif "Default" in spec:
            default = spec["Default"]
            values[name] = ",".join(map(str, default)) if isinstance(default, list) else str(default)
    return values


@contextmanager
def _timed(seconds: dict[str, float], step: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        seconds[step] = round(time.monotonic() - start, 2)
