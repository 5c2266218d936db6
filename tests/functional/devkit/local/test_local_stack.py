"""Local mode on the stack a deploy creates (issue 25, item 3): a rehearsal bundle's transformed
template created as a stack on moto's CloudFormation, read back, and run.

- The inner loop (template.yaml through the devkit's own expansion and resolver) and the stack
  agree on every function (handler, timeout, memory, environment, recursive loop, logging config),
  every grant (each function's IAM statements as created in IAM), every event source and every
  queue attribute. Physical names differ (CloudFormation names a resource
  <stack>-<LogicalId>-<suffix>, the inner loop <stack>-<LogicalId>): both are compared as <LogicalId>.
- The three example job types run through the stack-backed local mode against the Sheptra
  emulator over 127.0.0.1, every job final.
- Two stacks side by side (item 4): the rehearsal's second stack, another name in another region
  (us-west-2), runs too, everything of it in its own region (queue URLs, ARNs, the IAM check, the
  functions' AWS_REGION and so their clients).

The bundles are the deploy rehearsal's: this module rehearses two stacks (us-east-1, then
us-west-2 as `make rehearse` does) itself, or takes a bundle directory a rehearsal wrote
(``WORKERLESS_REHEARSAL_BUNDLE``: bundle.json, transformed.json, artifacts/, and the second stack's
bundle under others/; `make rehearse` writes .cache/rehearsal/bundle).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from workerless_devkit.emulators import RunningEmulator
from workerless_devkit.local import LocalTopology
from workerless_devkit.local.iam.roles import FunctionRole, render_roles
from workerless_devkit.local.stack import StackView, load_bundle, load_stack
from workerless_devkit.local.template import LocalTemplate, load_template
from workerless_devkit.rehearsal import RehearsalOptions, StackTarget, rehearse

from tests.functional.pipeline import ROOT, TEMPLATE, wait_final
from tests.functional.project.test_template import _sam_path

pytestmark = pytest.mark.slow

BUNDLE_ENV = "WORKERLESS_REHEARSAL_BUNDLE"
#: The two stacks of `make rehearse`: another name, another region.
STACKS = (
    StackTarget("workerless-rehearsal", "us-east-1"),
    StackTarget("workerless-rehearsal-b", "us-west-2", alarms=False),
)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The first stack's bundle and the second's, of one rehearsal."""
    value = os.environ.get(BUNDLE_ENV)
    if value:
        others = sorted(p for p in (Path(value) / "others").glob("*") if p.is_dir())
        assert len(others) == 1, f"{BUNDLE_ENV}={value}: expected one second stack's bundle under others/, {others}"
        return Path(value), others[0]
    # The rehearsal of two stacks: sam build (its own directory, the shared build cache) and package
    # on moto's server, the transforms, the stacks created; their bundles are what local mode runs here.
    work = tmp_path_factory.mktemp("local-stack-rehearsal")
    result = rehearse(
        RehearsalOptions(
            root=ROOT,
            out=work / "bundle",
            stacks=STACKS,
            build_dir=work / "build",
            cache_dir=ROOT / ".cache" / "rehearsal" / "cache",
            sam=str(_sam_path()),
            try_deploy=False,
        )
    )
    return result.stacks[0].bundle, result.stacks[1].bundle


@pytest.fixture(scope="module")
def bundle_dir(bundles: tuple[Path, Path]) -> Path:
    return bundles[0]


@pytest.fixture(scope="module")
def stack(bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> StackView:
    import boto3

    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    try:
        # The stack is read into plain data; the mock ends with this fixture's setup, so a topology's own runs alone.
        with mock_aws():
            bundle = load_bundle(bundle_dir)
            view = load_stack(
                bundle, boto3.session.Session(region_name=bundle.region), tmp_path_factory.mktemp("stack-code")
            )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return view


@pytest.fixture(scope="module")
def inner(stack: StackView) -> LocalTemplate:
    """template.yaml as the inner loop reads it, with the stack's name and parameters."""
    declared = load_template(TEMPLATE, parameters={"EngineSecretArn": _secret(stack)}).parameters
    values = {k: v for k, v in stack.created.parameters.items() if k in declared}
    return load_template(TEMPLATE, parameters=values, stack_name=stack.created.stack_name)


def _secret(stack: StackView) -> str:
    return stack.created.parameters["EngineSecretArn"]


class _Names:
    """Physical names of either side -> <LogicalId>."""

    def __init__(self, stack: StackView, inner: LocalTemplate) -> None:
        names: dict[str, str] = {}
        for resource in stack.created.resources.values():
            physical = (
                resource.physical_id.rsplit("/", 1)[-1]
                if resource.physical_id.startswith("https://")
                else resource.physical_id
            )
            if physical.startswith(f"{stack.created.stack_name}-"):
                names[physical] = f"<{resource.logical_id}>"
        prefix = f"{inner_stack(inner)}-"
        for lid in stack.created.resources:
            names.setdefault(f"{prefix}{lid}", f"<{lid}>")
            names.setdefault(f"{prefix}{lid}".lower(), f"<{lid}>")
        # Longest first: ...-chargepaymentFunction is a prefix of ...-chargepaymentFunctionRole.
        self._pattern = re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)))
        self._names = names

    def __call__(self, text: str) -> str:
        return self._pattern.sub(lambda m: self._names[m.group(0)], text)


def inner_stack(inner: LocalTemplate) -> str:
    return str(inner.parameters.get("AWS::StackName") or "") or _stack_name_of(inner)


def _stack_name_of(inner: LocalTemplate) -> str:
    table = inner.tables[0].name
    return table.rsplit("-", 1)[0]


def _functions(template: LocalTemplate, names: _Names) -> dict[str, Any]:
    return {
        f.logical_id: {
            "handler": f.handler,
            "timeout": f.timeout,
            "memory": f.memory_size,
            "environment": {k: names(v) for k, v in f.environment.items()},
            "recursive loop": f.recursive_loop,
            "logging": (f.log_format, f.application_log_level, f.system_log_level),
            "role": None if f.role is None else names(f.role.rsplit("/", 1)[-1]),
            "sqs": sorted(
                (e.name, e.queue_id, e.batch_size, e.maximum_concurrency, e.report_batch_item_failures, e.enabled)
                for e in f.sqs_events
            ),
            "schedules": sorted((s.name, s.expression, s.enabled) for s in f.schedule_events),
        }
        for f in template.functions
    }


def _grants(roles: dict[str, FunctionRole], names: _Names) -> dict[str, set[tuple[str, str, str]]]:
    return {
        function: {
            (s.effect, action.lower(), names(resource))
            for s in role.statements
            for action in s.actions
            for resource in s.resources
        }
        for function, role in roles.items()
    }


def _queues(template: LocalTemplate) -> dict[str, Any]:
    return {
        q.logical_id: {
            "visibility": q.visibility_timeout,
            "max size": q.maximum_message_size,
            # SQS's default when the template sets none (4 days).
            "retention": q.message_retention_seconds if q.message_retention_seconds is not None else 345_600,
            "delay": q.delay_seconds,
            "redrive": (q.dead_letter_queue_id, q.max_receive_count),
            "fifo": q.fifo,
        }
        for q in template.queues
    }


def test_the_inner_loop_and_the_stack_agree_on_every_function(stack: StackView, inner: LocalTemplate) -> None:
    names = _Names(stack, inner)
    ours, theirs = _functions(inner, names), _functions(stack.template, names)
    assert set(ours) == set(theirs)
    differences = {lid: (ours[lid], theirs[lid]) for lid in ours if ours[lid] != theirs[lid]}
    assert not differences, differences


def test_the_inner_loop_and_the_stack_agree_on_every_grant(stack: StackView, inner: LocalTemplate) -> None:
    names = _Names(stack, inner)
    ours = _grants(render_roles(inner, stack_name=stack.created.stack_name), names)
    theirs = _grants(stack.roles, names)
    assert set(ours) == set(theirs)
    for function in ours:
        assert ours[function] == theirs[function], (
            function,
            sorted(ours[function] - theirs[function]),
            sorted(theirs[function] - ours[function]),
        )


def test_the_inner_loop_and_the_stack_agree_on_every_queue_and_the_routes(
    stack: StackView, inner: LocalTemplate
) -> None:
    names = _Names(stack, inner)
    assert _queues(inner) == _queues(stack.template)
    ours = {p.logical_id: (p.name, names(p.value), p.type, p.tier) for p in inner.ssm_parameters}
    theirs = {p.logical_id: (p.name, names(p.value), p.type, p.tier) for p in stack.template.ssm_parameters}
    assert ours == theirs
    assert [(t.logical_id, t.key_schema, t.ttl_attribute) for t in inner.tables] == [
        (t.logical_id, t.key_schema, t.ttl_attribute) for t in stack.template.tables
    ]


def test_what_moto_does_not_create_is_named_and_the_code_is_the_artifacts(stack: StackView) -> None:
    assert set(stack.created.skipped) <= {
        "AWS::Lambda::EventInvokeConfig",
        "AWS::S3::BucketPolicy",
        "AWS::SQS::QueuePolicy",
        "AWS::CloudWatch::Alarm",
    }, stack.created.skipped
    assert stack.layers and all(count > 0 for count in stack.layers.values())
    for function in stack.template.functions:
        assert (function.code_dir / "app.py").is_file(), function.logical_id
        assert TEMPLATE.parent not in function.code_dir.parents, function.code_dir


def test_the_example_job_types_run_through_the_stack_to_a_final_state(
    bundle_dir: Path, sheptra_emulator: RunningEmulator
) -> None:
    emulator = sheptra_emulator.emulator
    assert sheptra_emulator.env_file is not None
    jobs = [
        emulator.create_job("charge-payment", {"orderId": "o1", "amount": 12}),
        emulator.create_job("charge-payment", {"orderId": "bad", "amount": 0}),
        emulator.create_job("send-receipt", {"orderId": "o1"}),
        emulator.create_job("generate-report", {"seconds": 1}),
    ]
    started = time.monotonic()
    topology = LocalTopology.from_bundle(
        bundle_dir, sheptra_emulator.env_file, parameters={"LeaseSeconds": "5", "TickSeconds": "1"}, schedule_seconds=1
    )
    with topology:
        assert topology.template.source == "stack"
        wait_final(topology, emulator.job_state, jobs, 60)
        assert topology.iam is not None and not topology.iam.refusals
    states = [emulator.job_state(j)["state"] for j in jobs]
    assert states == ["completed", "failed", "completed", "completed"], states
    print(f"stack-backed run: {time.monotonic() - started:.1f} s")  # the run's cost, in -s output


def test_two_stacks_of_one_rehearsal_run_each_in_its_own_region(
    bundles: tuple[Path, Path], sheptra_emulator: RunningEmulator
) -> None:
    """Item 4 in local mode: the rehearsal's us-east-1 stack and its us-west-2 one (another name),
    each created and run through ``LocalTopology.from_bundle``, every job final, everything of the
    second in us-west-2. One after the other in this process, not at once: each topology starts its
    own moto mock and sets the process environment (AWS_REGION among it), so two cannot run together
    in one process."""
    import boto3

    emulator = sheptra_emulator.emulator
    assert sheptra_emulator.env_file is not None
    ran: dict[str, str] = {}
    for bundle_path in bundles:
        bundle = load_bundle(bundle_path)
        region, other = bundle.region, "us-west-2" if bundle.region == "us-east-1" else "us-east-1"
        jobs = [
            emulator.create_job("charge-payment", {"orderId": f"{region}-1", "amount": 12}),
            emulator.create_job("charge-payment", {"orderId": "bad", "amount": 0}),
            emulator.create_job("send-receipt", {"orderId": f"{region}-1"}),
            emulator.create_job("generate-report", {"seconds": 1}),
        ]
        topology = LocalTopology.from_bundle(
            bundle_path,
            sheptra_emulator.env_file,
            parameters={"LeaseSeconds": "5", "TickSeconds": "1"},
            schedule_seconds=1,
        )
        with topology:
            assert (topology.stack_name, topology.place.region) == (bundle.stack_name, region)
            wait_final(topology, emulator.job_state, jobs, 60)
            # What Lambda sets in each function's environment, and what the library's clients use.
            assert (os.environ["AWS_REGION"], os.environ["AWS_DEFAULT_REGION"]) == (region, region)
            template = topology.template
            for queue in template.queues:
                assert topology.queue_url(queue.logical_id).startswith(f"https://sqs.{region}.amazonaws.com/"), queue
                assert queue.arn.startswith(f"arn:aws:sqs:{region}:"), queue
            assert all(f.arn.startswith(f"arn:aws:lambda:{region}:") for f in template.functions)
            assert all(t.arn.startswith(f"arn:aws:dynamodb:{region}:") for t in template.tables)
            # The IAM check held every call to the roles as created, on resources of this region.
            assert topology.iam is not None and not topology.iam.refusals, topology.iam.refusals
            regional = {g.resource for g in topology.iam.grants if g.action.split(":")[0] in ("sqs", "dynamodb", "ssm")}
            assert regional and all(f":{region}:" in arn for arn in regional), sorted(regional)
            # The functions' records are in this region's table, and nothing was created in the other.
            (table,) = template.tables
            assert topology.client("dynamodb").scan(TableName=table.name, Select="COUNT")["Count"] > 0
            elsewhere = boto3.session.Session(region_name=other)
            assert elsewhere.client("dynamodb").list_tables()["TableNames"] == []
            assert elsewhere.client("sqs").list_queues().get("QueueUrls", []) == []
        states = [emulator.job_state(j)["state"] for j in jobs]
        assert states == ["completed", "failed", "completed", "completed"], (region, states)
        ran[region] = bundle.stack_name
    assert ran == {"us-east-1": "workerless-rehearsal", "us-west-2": "workerless-rehearsal-b"}, ran
