"""Local mode on the stack a deploy creates (issue 25, item 3): a rehearsal bundle's transformed
template created as a stack on moto's CloudFormation, read back, and run.

- The inner loop (template.yaml through the devkit's own expansion and resolver) and the stack
  agree on every function (handler, timeout, memory, environment, recursive loop, logging config),
  every grant (each function's IAM statements as created in IAM), every event source and every
  queue attribute. Physical names differ (CloudFormation names a resource
  <stack>-<LogicalId>-<suffix>, the inner loop <stack>-<LogicalId>): both are compared as <LogicalId>.
- The three example job types run through the stack-backed local mode against the Sheptra
  emulator over 127.0.0.1, every job final.

The bundle is the deploy rehearsal's: this module rehearses one stack (us-east-1) itself, or takes a
bundle directory a rehearsal wrote (``WORKERLESS_REHEARSAL_BUNDLE``: bundle.json, transformed.json,
artifacts/; `make rehearse` writes .cache/rehearsal/bundle).
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
from tests.functional.test_template import _sam_path

pytestmark = pytest.mark.slow

BUNDLE_ENV = "WORKERLESS_REHEARSAL_BUNDLE"


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    value = os.environ.get(BUNDLE_ENV)
    if value:
        return Path(value)
    # The rehearsal of one stack: sam build (its own directory, the shared build cache) and package
    # on moto's server, the transforms, the stack created; its bundle is what local mode runs here.
    work = tmp_path_factory.mktemp("local-stack-rehearsal")
    result = rehearse(
        RehearsalOptions(
            root=ROOT,
            out=work / "bundle",
            stacks=(StackTarget("workerless-rehearsal", "us-east-1"),),
            build_dir=work / "build",
            cache_dir=ROOT / ".cache" / "rehearsal" / "cache",
            sam=str(_sam_path()),
            try_deploy=False,
        )
    )
    return result.stacks[0].bundle


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
