"""Checks, from the transformed template, of what moto's CloudFormation did not create or dropped.

One small checker per resource type moto skips, each stating what that resource must be for
workerless (not merely that it parses): every queue and bucket has a policy that denies insecure
transport on exactly its own ARN(s); every EventInvokeConfig names a created function and turns
retries off; every alarm's references are resources the stack created (or parameters) and it
notifies the alarm topic. A skipped type without a checker stops the rehearsal: the template grew
a type nothing verifies.

moto also drops properties it does not model on types it does create; the ones workerless relies
on are checked here too (:func:`check_dropped_properties`): each function's layer is the template's
own LayerVersion, which moto's Lambda leaves off (its Ref of a LayerVersion has no physical ID).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from workerless_devkit.rehearsal.errors import SkippedResourceError
from workerless_devkit.rehearsal.stack import CreatedStack

_PLACEHOLDER = re.compile(r"\$\{([^}!][^}]*)\}")

Checker = Callable[[str, Mapping[str, Any], Mapping[str, Any], CreatedStack, Mapping[str, str]], None]


def check_skipped(
    template: Mapping[str, Any], stack: CreatedStack, parameters: Mapping[str, str]
) -> dict[str, list[str]]:
    """Runs the checker of each skipped resource; returns type -> the logical IDs checked."""
    resources: Mapping[str, Any] = template.get("Resources") or {}
    checked: dict[str, list[str]] = {}
    for lid, kind in sorted(stack.skipped.items()):
        checker = CHECKERS.get(kind)
        if checker is None:
            raise SkippedResourceError(
                f"moto's CloudFormation skipped {lid} ({kind}) and the rehearsal has no check for {kind}: "
                "add one to workerless_devkit.rehearsal.skipped.CHECKERS"
            )
        checker(lid, resources[lid].get("Properties") or {}, resources, stack, parameters)
        checked.setdefault(kind, []).append(lid)
    # Coverage: every queue and bucket the stack has is guarded by a policy (created or checked here).
    for kind, policy_kind, key in (
        ("AWS::SQS::Queue", "AWS::SQS::QueuePolicy", "Queues"),
        ("AWS::S3::Bucket", "AWS::S3::BucketPolicy", "Bucket"),
    ):
        guarded = {
            ref
            for r in resources.values()
            if r.get("Type") == policy_kind
            for ref in _refs((r.get("Properties") or {}).get(key))
        }
        bare = sorted(r.logical_id for r in stack.resources if r.type == kind and r.logical_id not in guarded)
        if bare:
            raise SkippedResourceError(f"{', '.join(bare)} ({kind}) has no {policy_kind} denying insecure transport")
    return checked


def _queue_policy(lid: str, props: Mapping[str, Any], _: Mapping[str, Any], stack: CreatedStack, __: Any) -> None:
    queues = list(_refs(props.get("Queues")))
    if len(queues) != 1 or not _created(stack, queues[0], "AWS::SQS::Queue"):
        raise SkippedResourceError(f"{lid}: Queues must be the Ref of one created queue, is {props.get('Queues')!r}")
    _deny_insecure(lid, props, "sqs:*", [{"Fn::GetAtt": [queues[0], "Arn"]}])


def _bucket_policy(lid: str, props: Mapping[str, Any], _: Mapping[str, Any], stack: CreatedStack, __: Any) -> None:
    buckets = list(_refs(props.get("Bucket")))
    if len(buckets) != 1 or not _created(stack, buckets[0], "AWS::S3::Bucket"):
        raise SkippedResourceError(f"{lid}: Bucket must be the Ref of a created bucket, is {props.get('Bucket')!r}")
    arn = {"Fn::GetAtt": [buckets[0], "Arn"]}
    objects = {"Fn::Sub": f"${{{buckets[0]}.Arn}}/*"}
    _deny_insecure(lid, props, "s3:*", [arn, objects])


def _deny_insecure(lid: str, props: Mapping[str, Any], action: str, resources: list[Any]) -> None:
    statements = (props.get("PolicyDocument") or {}).get("Statement") or []
    for statement in statements if isinstance(statements, list) else [statements]:
        named = statement.get("Resource")
        if (
            statement.get("Effect") == "Deny"
            and statement.get("Principal") == "*"
            and statement.get("Action") == action
            and (named if isinstance(named, list) else [named]) == resources
            and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
        ):
            return
    raise SkippedResourceError(
        f"{lid}: no statement denies {action} without TLS (aws:SecureTransport false) on exactly {resources!r}"
    )


def _event_invoke_config(
    lid: str, props: Mapping[str, Any], _: Mapping[str, Any], stack: CreatedStack, __: Any
) -> None:
    functions = list(_refs(props.get("FunctionName")))
    if len(functions) != 1 or not _created(stack, functions[0], "AWS::Lambda::Function"):
        raise SkippedResourceError(f"{lid}: FunctionName must be the Ref of a created function, is {props!r}")
    if props.get("MaximumRetryAttempts") != 0:
        raise SkippedResourceError(
            f"{lid}: MaximumRetryAttempts is {props.get('MaximumRetryAttempts')!r}, not 0 "
            "(a retried poller or drain run races the next scheduled one)"
        )
    if props.get("Qualifier") != "$LATEST":
        raise SkippedResourceError(f"{lid}: Qualifier is {props.get('Qualifier')!r}, not $LATEST (what runs)")


def _alarm(
    lid: str, props: Mapping[str, Any], resources: Mapping[str, Any], stack: CreatedStack, params: Mapping[str, str]
) -> None:
    for name in sorted(set(_references(props))):
        if name.startswith("AWS::") or name in params:
            continue
        if not _created(stack, name, None):
            kind = (resources.get(name) or {}).get("Type", "not a resource of the template")
            raise SkippedResourceError(f"{lid}: refers to {name} ({kind}), which the stack did not create")
    actions = props.get("AlarmActions")
    topic = params.get("AlarmTopicArn")
    # AWS::LanguageExtensions (SAM CLI's) resolves a parameter's Ref to its value; either is the topic.
    if not topic or actions not in ([{"Ref": "AlarmTopicArn"}], [topic]):
        raise SkippedResourceError(f"{lid}: AlarmActions is {actions!r}, not [the AlarmTopicArn parameter ({topic!r})]")


CHECKERS: dict[str, Checker] = {
    "AWS::SQS::QueuePolicy": _queue_policy,
    "AWS::S3::BucketPolicy": _bucket_policy,
    "AWS::Lambda::EventInvokeConfig": _event_invoke_config,
    "AWS::CloudWatch::Alarm": _alarm,
}


def check_dropped_properties(template: Mapping[str, Any], stack: CreatedStack, lambda_client: Any) -> list[str]:
    """Each function's Layers, which moto's Lambda leaves empty: the template's own created layer."""
    resources: Mapping[str, Any] = template.get("Resources") or {}
    checked: list[str] = []
    for lid, resource in sorted(resources.items()):
        if resource.get("Type") != "AWS::Lambda::Function":
            continue
        layers = (resource.get("Properties") or {}).get("Layers") or []
        refs = [ref for layer in layers for ref in _refs(layer)]
        if not layers or len(refs) != len(layers):
            raise SkippedResourceError(f"{lid}: Layers is {layers!r}, not Refs of the template's layer versions")
        for ref in refs:
            if not _created(stack, ref, "AWS::Lambda::LayerVersion"):
                raise SkippedResourceError(f"{lid}: its layer {ref} is not a layer version the stack created")
        configured = lambda_client.get_function_configuration(FunctionName=stack.physical_id(lid)).get("Layers") or []
        if configured and len(configured) != len(refs):
            raise SkippedResourceError(f"{lid}: moto's function has layers {configured!r}, the template {refs!r}")
        checked.append(lid)
    return checked


def _created(stack: CreatedStack, logical_id: str, kind: str | None) -> bool:
    return any(r.logical_id == logical_id and (kind is None or r.type == kind) for r in stack.resources)


def _refs(value: Any) -> Iterator[str]:
    """The logical IDs ``value`` is a Ref of (itself, or each item of a list)."""
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict) and set(item) == {"Ref"}:
            yield str(item["Ref"])


def _references(value: Any) -> Iterator[str]:
    """Every name a Ref, Fn::GetAtt or Fn::Sub placeholder in ``value`` refers to."""
    if isinstance(value, list):
        for item in value:
            yield from _references(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "Ref":
                yield str(item)
            elif key == "Fn::GetAtt":
                yield str(item[0] if isinstance(item, list) else str(item).split(".", 1)[0])
            elif key == "Fn::Sub":
                text, variables = (item[0], item[1]) if isinstance(item, list) and len(item) == 2 else (item, {})
                names = (m.split(".", 1)[0] for m in _PLACEHOLDER.findall(str(text)))
                yield from (name for name in names if name not in variables)
                yield from _references(variables)
            else:
                yield from _references(item)
