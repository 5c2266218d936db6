"""Create a rehearsal bundle's stack on the embedded (moto) CloudFormation, through boto3 as on AWS.

:func:`create_stack` uploads the bundle's artifacts to the embedded S3 (the bucket ``sam package``
wrote to), calls CreateStack with transformed.json and the parameters, waits (bounded) for
CREATE_COMPLETE and lists what the stack holds. moto's CloudFormation skips the resource types it
does not model with a warning; they are collected (:attr:`CreatedStack.skipped`) instead of
escaping as warnings, so a caller can cover them from the template.

One departure from moto, towards AWS: ``!GetAtt LogGroup.Arn`` is the group's ARN followed by
``:*`` on AWS (CloudFormation's documented return value, which a role's log statements rely on to
cover the group's streams); moto returns it without. While a stack is created here it returns
AWS's value (:func:`_aws_log_group_arn`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from workerless_devkit.local.stack.bundle import Bundle, BundleError

#: CreateStack capabilities a SAM stack needs (named IAM resources, the nested transforms).
CAPABILITIES = ("CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND")
#: How often, and how many times, DescribeStacks is asked while the stack is created.
WAIT_POLL_SECONDS = 0.05
WAIT_ATTEMPTS = 600


class StackCreateError(BundleError):
    """The stack was not created: names the stack, its status and the reasons CloudFormation gave."""


@dataclass(frozen=True, slots=True)
class StackResource:
    logical_id: str
    type: str
    physical_id: str


@dataclass(frozen=True, slots=True)
class CreatedStack:
    """A stack created in the embedded CloudFormation."""

    stack_name: str
    stack_id: str
    #: The parameters it was created with, every declared one (defaults included), as DescribeStacks says.
    parameters: dict[str, str]
    #: What it holds, by logical id (ListStackResources).
    resources: dict[str, StackResource]
    #: Resource types moto's CloudFormation did not create -> the template's logical ids of that type.
    skipped: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def physical_ids(self) -> dict[str, str]:
        return {lid: r.physical_id for lid, r in self.resources.items() if r.physical_id}

    def of_type(self, resource_type: str) -> list[StackResource]:
        return [r for r in self.resources.values() if r.type == resource_type]


def create_bucket(s3: Any, name: str) -> None:
    """CreateBucket in the client's region: outside us-east-1 S3 needs the region named as the
    LocationConstraint (IllegalLocationConstraintException without it)."""
    region = str(s3.meta.region_name)
    if region == "us-east-1":
        s3.create_bucket(Bucket=name)
    else:
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})


def upload_artifacts(bundle: Bundle, s3: Any) -> int:
    """Put every artifact of the bundle into the embedded S3 (creating its buckets); how many."""
    artifacts = bundle.artifacts()
    if not artifacts:
        raise BundleError(f"rehearsal bundle {str(bundle.path)!r} has no artifacts/<bucket>/<key> files")
    buckets = sorted({bucket for bucket, _ in artifacts})
    for bucket in buckets:
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            create_bucket(s3, bucket)
    for (bucket, key), path in artifacts.items():
        s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    return len(artifacts)


def create_stack(
    bundle: Bundle, session: Any, *, parameters: Mapping[str, str] | None = None, template_body: str | None = None
) -> CreatedStack:
    """Upload the artifacts, create the bundle's stack, wait for CREATE_COMPLETE, list it.

    ``parameters`` override the bundle's (as ``sam deploy --parameter-overrides`` would), and must be
    parameters the template declares. Raises :class:`StackCreateError` naming the failure.
    """
    transformed = bundle.transformed()
    if "Transform" in transformed:
        raise BundleError(
            f"{bundle.transformed_path}: still declares Transform {transformed['Transform']!r}: "
            "transformed.json must be the template after every transform"
        )
    declared = transformed.get("Parameters") or {}
    values = {**bundle.parameters, **(parameters or {})}
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise BundleError(f"parameter(s) {', '.join(unknown)}: {bundle.transformed_path} declares no such parameter")
    upload_artifacts(bundle, session.client("s3"))
    cloudformation = session.client("cloudformation")
    body = template_body if template_body is not None else bundle.transformed_path.read_text(encoding="utf-8")
    with moto_skip_notes() as skipped_types, _aws_log_group_arn():
        try:
            answer = cloudformation.create_stack(
                StackName=bundle.stack_name,
                TemplateBody=body,
                Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()],
                Capabilities=list(CAPABILITIES),
            )
        except Exception as exc:  # moto creates the resources inside the call: its failure surfaces here
            raise StackCreateError(
                f"stack {bundle.stack_name!r} from {bundle.transformed_path} was not created: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        stack_id = str(answer["StackId"])
        stack = _wait_complete(cloudformation, bundle.stack_name)
        # moto parses a skipped type again (and warns again) whenever the stack's resources are listed.
        resources = _list_resources(cloudformation, bundle.stack_name)
    _detach_moto_event_sources(bundle.account_id, bundle.region)
    template_resources: Mapping[str, Any] = transformed.get("Resources") or {}
    skipped = {
        kind: tuple(sorted(lid for lid, r in template_resources.items() if r.get("Type") == kind))
        for kind in sorted(skipped_types)
    }
    return CreatedStack(
        stack_name=bundle.stack_name,
        stack_id=stack_id,
        parameters={str(p["ParameterKey"]): str(p.get("ParameterValue", "")) for p in stack.get("Parameters") or []},
        resources=resources,
        skipped=skipped,
    )


def _wait_complete(cloudformation: Any, stack_name: str) -> dict[str, Any]:
    status = "?"
    for _ in range(WAIT_ATTEMPTS):
        stack: dict[str, Any] = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
        status = str(stack["StackStatus"])
        if status == "CREATE_COMPLETE":
            return stack
        if not status.endswith("_IN_PROGRESS"):
            raise StackCreateError(
                f"stack {stack_name!r} is {status}: {'; '.join(_failure_reasons(cloudformation, stack_name)) or '?'}"
            )
        time.sleep(WAIT_POLL_SECONDS)
    raise StackCreateError(
        f"stack {stack_name!r} still {status} after {WAIT_ATTEMPTS * WAIT_POLL_SECONDS:g} s of DescribeStacks"
    )


def _failure_reasons(cloudformation: Any, stack_name: str) -> list[str]:
    events = cloudformation.describe_stack_events(StackName=stack_name).get("StackEvents") or []
    return [
        f"{e.get('LogicalResourceId')}: {e.get('ResourceStatusReason')}"
        for e in events
        if str(e.get("ResourceStatus", "")).endswith("FAILED")
    ]


def _list_resources(cloudformation: Any, stack_name: str) -> dict[str, StackResource]:
    resources: dict[str, StackResource] = {}
    for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        for summary in page.get("StackResourceSummaries") or []:
            lid = str(summary.get("LogicalResourceId") or "")
            if not lid:
                continue  # moto lists a resource type it skipped without a logical id
            resources[lid] = StackResource(
                lid, str(summary["ResourceType"]), str(summary.get("PhysicalResourceId") or "")
            )
    return resources


def _detach_moto_event_sources(account_id: str, region: str) -> None:
    """Keep moto's SQS from running the stack's SQS event source mappings itself.

    moto links each mapping to its queue, and on every SendMessage receives a batch (counting a
    receive) to invoke the function in Docker, then makes it visible again when that fails (no
    Docker here): the receive counts would redrive messages to the dead-letter queue unprocessed.
    Local mode pumps the queues itself (:mod:`~workerless_devkit.local.event_source`);
    the mappings stay in Lambda (ListEventSourceMappings answers as on AWS).
    """
    from moto.sqs.models import sqs_backends

    for queue in sqs_backends[account_id][region].queues.values():
        queue.lambda_event_source_mappings.clear()


@contextlib.contextmanager
def _aws_log_group_arn() -> Iterator[None]:
    """``!GetAtt LogGroup.Arn`` as AWS returns it (``...:log-group:NAME:*``) while a stack is created."""
    from moto.logs.models import LogGroup

    original = LogGroup.get_cfn_attribute

    def get_cfn_attribute(self: Any, attribute_name: str) -> Any:
        value = original(self, attribute_name)
        if attribute_name == "Arn" and isinstance(value, str) and not value.endswith(":*"):
            return f"{value}:*"
        return value

    LogGroup.get_cfn_attribute = get_cfn_attribute  # type: ignore[method-assign]
    try:
        yield
    finally:
        LogGroup.get_cfn_attribute = original  # type: ignore[method-assign]


#: What moto's CloudFormation warns (and logs) for each resource type it does not create.
SKIP_WARNING = r"Tried to parse \S+ but it's not supported by moto's CloudFormation implementation"
_SKIP_LOG = "No Moto CloudFormation support for %s"


@contextlib.contextmanager
def moto_skip_notes() -> Iterator[list[str]]:
    """Collects, for the block, the resource types moto's CloudFormation skips (its warning; its log
    line is dropped), each type once, in the order seen. Every other warning is handed on as it came.

    moto raises the warning wherever it parses the template: in this thread (mock_aws) or in its
    server's request thread (the rehearsal); the filter list is process-wide either way.
    """
    types: list[str] = []
    logger = logging.getLogger("moto")

    class _Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return record.msg != _SKIP_LOG

    drop = _Drop()
    logger.addFilter(drop)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.filterwarnings("always", message=SKIP_WARNING, category=UserWarning)
            yield types
        for item in caught:
            text = str(item.message)
            if re.match(SKIP_WARNING, text):
                found = text.split()[3]
                if found not in types:
                    types.append(found)
            else:  # not ours to judge: hand it on as it came
                warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
    finally:
        logger.removeFilter(drop)
