"""Local mode's reading of template.yaml's AWS::LanguageExtensions, held to SAM CLI's own expansion,
and the routes-as-data template held to the hand-written one it replaced.

SAM CLI (.venv-sam) expands the template with the Phase 1 it runs for `sam build` / `sam validate`
(samcli.lib.cfn_language_extensions); local mode reads the result as an ordinary template. Both
views must agree on every function, queue, event source, environment and role statement.
tests/functional/data/template-before-routes.yaml is template.yaml as it was written out by hand
before the route loop: each function's rendered role must grant exactly what it did. It is a
historical snapshot, kept as it was: its GenerateReport* parameters (gone from template.yaml since
routes carry their own settings) are read by nothing but this comparison, which takes its roles.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from workerless_devkit.devtools.scaffold import _yaml, with_job_types
from workerless_devkit.devtools.stack import routes_in_text
from workerless_devkit.local.iam.roles import render_roles
from workerless_devkit.local.template import STACK_NAME, LocalTemplate, load_template, resolve_template

from tests.functional.project.test_template import (  # noqa: F401 - pytest fixture used by name
    ROOT,
    TEMPLATE,
    _run,
    _sam_path,
    _sam_python,
    offline_env,
)

BEFORE = Path(__file__).resolve().parents[1] / "data" / "template-before-routes.yaml"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:workerless/sheptra-AbCdEf"
PARAMETERS = {"EngineSecretArn": SECRET}

EXPAND = r"""
import json, sys
from samcli.yamlhelper import yaml_parse
from samcli.lib.cfn_language_extensions.sam_integration import expand_language_extensions

with open(sys.argv[1], encoding="utf-8") as fh:
    source = yaml_parse(fh.read())
values = {
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::Partition": "aws",
    "AWS::StackName": "workerless-local",
    **json.loads(sys.argv[2]),
}
result = expand_language_extensions(source, parameter_values=values, enabled=True)
assert result.had_language_extensions
json.dump(result.expanded_template, sys.stdout)
"""


@pytest.fixture(scope="module")
def sam_cli_view(offline_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> LocalTemplate:  # noqa: F811
    sam = _sam_path()
    result = _run([str(_sam_python(sam)), "-c", EXPAND, str(TEMPLATE), json.dumps(PARAMETERS)], offline_env)
    assert result.returncode == 0, result.stderr
    expanded = tmp_path_factory.mktemp("sam-cli") / "template.json"
    expanded.write_text(result.stdout, encoding="utf-8")
    return resolve_template(json.loads(result.stdout), base_dir=ROOT, path=expanded, parameters=PARAMETERS)


@pytest.fixture(scope="module")
def local_view() -> LocalTemplate:
    return load_template(TEMPLATE, parameters=PARAMETERS)


def _functions(template: LocalTemplate) -> dict[str, Any]:
    return {
        f.logical_id: (
            f.code_dir,
            f.handler,
            f.timeout,
            f.memory_size,
            f.environment,
            f.recursive_loop,
            sorted(
                (e.name, e.queue_id, e.batch_size, e.maximum_concurrency, e.report_batch_item_failures)
                for e in f.sqs_events
            ),
            [(e.expression, e.enabled) for e in f.schedule_events],
        )
        for f in template.functions
    }


def _statements(template: LocalTemplate, parameters: dict[str, str]) -> dict[str, set[tuple[str, str, str]]]:
    return {
        function: {
            (s.effect, action, resource) for s in role.statements for action in s.actions for resource in s.resources
        }
        for function, role in render_roles(template, parameters=parameters).items()
    }


def test_local_mode_sees_the_functions_sam_cli_expands(local_view: LocalTemplate, sam_cli_view: LocalTemplate) -> None:
    ours, theirs = _functions(local_view), _functions(sam_cli_view)
    assert set(ours) == set(theirs)
    assert len([f for f in ours if f.endswith("Function")]) == len(ours) >= 6
    for function in ours:
        assert ours[function] == theirs[function], function


def test_local_mode_sees_the_queues_sam_cli_expands(local_view: LocalTemplate, sam_cli_view: LocalTemplate) -> None:
    assert local_view.queues == sam_cli_view.queues
    assert local_view.tables == sam_cli_view.tables
    # The routes' SSM parameters: SAM CLI resolves each Value's FindInMap defaults (MaxInFlight, the
    # empty EngineQueue) as local mode does. Its Phase 1 leaves the queue's ${<stem>Queue} as text
    # (the Fn::Sub it cannot resolve, as with the claim check's prefixes: _mangled below);
    # CloudFormation's transform, which deploys the original template, resolves it.
    ours = {p.logical_id: p for p in local_view.ssm_parameters}
    theirs = {p.logical_id: p for p in sam_cli_view.ssm_parameters}
    assert set(ours) == set(theirs) and ours
    for logical_id, parameter in ours.items():
        queue = local_view.queue(logical_id.removesuffix("Route") + "Queue")
        unresolved = parameter.value.replace(queue.url, "${" + queue.logical_id + "}")
        assert (parameter.name, unresolved, parameter.tier) == (
            theirs[logical_id].name,
            theirs[logical_id].value,
            theirs[logical_id].tier,
        ), logical_id


def _mangled(resource: str) -> bool:
    """SAM CLI 1.170's Phase 1 turns an unresolvable Fn::Sub / Fn::Join of a resource attribute in
    Resources into plain text ("${PayloadBucket.Arn}/jobs/*"); CloudFormation's own transform (which
    deploys the original template) resolves it. Those statements cannot be compared."""
    return "${" in resource or "{'Fn::" in resource


def test_local_mode_renders_the_roles_sam_cli_expands(local_view: LocalTemplate, sam_cli_view: LocalTemplate) -> None:
    ours, theirs = _statements(local_view, PARAMETERS), _statements(sam_cli_view, PARAMETERS)
    assert set(ours) == set(theirs)
    for function in ours:
        comparable = {s for s in theirs[function] if not _mangled(s[2])}
        mangled = theirs[function] - comparable
        # Only the claim check's S3 prefixes are written that way; everything else must match exactly.
        assert {a for _, a, _ in mangled} <= {"s3:GetObject", "s3:PutObject"}, function
        # The listing grant names the bucket itself (!GetAtt), which SAM CLI resolves: compared.
        objects = {s for s in ours[function] if s[1] in ("s3:GetObject", "s3:PutObject")}
        assert comparable == ours[function] - objects, function
        assert len(objects) == len(mangled), function


def test_each_function_is_granted_exactly_what_the_hand_written_template_granted(tmp_path: Path) -> None:
    """Same routes, same grants. The route loop's logical IDs are the type without its hyphens
    (chargepaymentQueue where the hand-written template had ChargePaymentQueue): names compare
    without case. The template is given the hand-written one's routes (a scaffolded type of the
    user's own has no counterpart there).

    One change is by design: the hand-written template gave each route a dead-letter queue of its
    own (<Type>DeadLetterQueue); now every route's job queue dead-letters to the one
    JobDeadLetterQueue (one event source for the dead-letter function instead of one per route: each
    idles at Lambda's long polls). Those grants compare with each old per-route dead-letter queue read
    as the shared one: the same actions, on the queue that now holds the same messages. Only those
    queues are mapped; every other grant, the dead-letter function's included, must match as it was.

    One addition: the routes moved from WORKERLESS_ROUTES (in every function's environment) to one
    SSM parameter per route, so the poller, and it alone, is granted GetParametersByPath on the
    stack's routes path (the path, not the parameters: what Parameter Store authorises it against).

    One removal: the dead-letter function drains the shared queue on a schedule instead of through an
    event source (which idles at Lambda's long polls), and its code never reads the queue's
    attributes: GetQueueAttributes, which only the event source mapping needed, is gone.

    One addition per route (issue 26, 2.6): its handler may hand back, on its own queue, the jobs a
    batch has no time left to finish (ChangeMessageVisibility). And one per reader of claim-check
    objects (issue 26, 2.11): each handler, the heartbeat and the dead-letter function may list the
    payload bucket (held by s3:prefix to what each reads), so a gone object answers NoSuchKey."""
    before = load_template(BEFORE, parameters=PARAMETERS)
    variables = _yaml().load(BEFORE.read_text(encoding="utf-8"))["Globals"]["Function"]["Environment"]["Variables"]
    routes = [job_type for job_type, _ in routes_in_text(str(variables["WORKERLESS_ROUTES"].value))]
    variant = tmp_path / "template.yaml"
    variant.write_text(with_job_types(TEMPLATE.read_text(encoding="utf-8"), routes), encoding="utf-8")
    local_view = load_template(variant, parameters=PARAMETERS)
    old_dead_letter_queues = {
        before.queue(q.dead_letter_queue_id).arn.lower()
        for q in before.queues
        if q.dead_letter_queue_id and q.logical_id not in ("TickerQueue", "HeartbeatQueue")
    }
    assert len(old_dead_letter_queues) == len(routes)  # one per route, before
    shared = local_view.queue("JobDeadLetterQueue").arn.lower()

    def as_now(resource: str) -> str:
        return shared if resource.lower() in old_dead_letter_queues else resource.lower()

    old = {k.lower(): {(e, a, as_now(r)) for e, a, r in v} for k, v in _statements(before, PARAMETERS).items()}
    new = {k.lower(): {(e, a, r.lower()) for e, a, r in v} for k, v in _statements(local_view, PARAMETERS).items()}
    assert set(new) == set(old) == {f.logical_id.lower() for f in before.functions}
    routes_path = f"arn:aws:ssm:us-east-1:123456789012:parameter/workerless/{STACK_NAME}/routes"
    table = "arn:aws:dynamodb:us-east-1:123456789012:table/workerless-local-jobstable"
    # BatchGetItem: the poller reads the records of the jobs it tracks (MaxInFlight, issue 26 2.7).
    added = {
        "pollerfunction": {
            ("Allow", "ssm:GetParametersByPath", routes_path),
            ("Allow", "dynamodb:BatchGetItem", table),
        }
    }
    for q in local_view.queues:
        library = q.logical_id in ("TickerQueue", "HeartbeatQueue")
        if not library and q.logical_id.lower().removesuffix("queue") + "function" in old:
            added[q.logical_id.lower().removesuffix("queue") + "function"] = {
                ("Allow", "sqs:ChangeMessageVisibility", q.arn.lower())
            }
    bucket = ("Allow", "s3:ListBucket", local_view.buckets[0].arn.lower())
    for function in [f for f in added if f != "pollerfunction"] + ["heartbeatfunction", "deadletterfunction"]:
        added[function] = added.get(function, set()) | {bucket}
    removed = {"deadletterfunction": {("Allow", "sqs:GetQueueAttributes", shared)}}
    for function in old:
        assert new[function] - old[function] == added.get(function, set()), function
        assert old[function] - new[function] == removed.get(function, set()), function
    # What was mapped: the dead-letter function's event-source grant, per route before, once now
    # (the drain's receive and delete).
    assert {(a, r) for _, a, r in new["deadletterfunction"] if r == shared} == {
        (a, shared) for a in ("sqs:ReceiveMessage", "sqs:DeleteMessage")
    }
