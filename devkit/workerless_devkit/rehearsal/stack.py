"""The transformed template created as a stack on moto's CloudFormation, and what moto skipped.

moto creates the resource types it models and skips the others: it warns ("Tried to parse TYPE but
it's not supported by moto's CloudFormation implementation"), logs "No Moto CloudFormation support
for TYPE", and lists the resource without a logical ID. Which ones it skipped is not taken from
those messages but measured: every resource the template creates (its Condition holding) whose
logical ID is not among the stack's resources. The messages themselves are expected and collected
here (that one warning, that one log line; any other warning passes through untouched), so a run
under ``-W error`` sees them as findings instead of failing inside moto's request thread. moto
parses a skipped resource anew, and says so again, at every look at the stack (DescribeStacks,
DescribeStackResources): every CloudFormation call here is inside that collection.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workerless_devkit.local.stack.create import moto_skip_notes
from workerless_devkit.rehearsal.conditions import created_resources
from workerless_devkit.rehearsal.errors import StackError
from workerless_devkit.rehearsal.server import Endpoint

#: moto's warning for a resource type its CloudFormation does not model (moto 5.x).
#: Bounds of the wait for CREATE_COMPLETE (moto creates synchronously: the first look usually sees it).
WAIT_POLLS = 120
WAIT_SECONDS = 60.0
_DONE = re.compile(r"_(COMPLETE|FAILED)$")


@dataclass(frozen=True, slots=True)
class StackResource:
    logical_id: str
    type: str
    physical_id: str | None

    def as_json(self) -> dict[str, str | None]:
        return {"logical_id": self.logical_id, "type": self.type, "physical_id": self.physical_id}


@dataclass(frozen=True, slots=True)
class CreatedStack:
    """The stack as moto created it, and what of the template it did not create."""

    name: str
    region: str
    stack_id: str
    resources: tuple[StackResource, ...]
    #: Logical ID -> type of each resource the template creates and moto skipped.
    skipped: dict[str, str]
    #: The types moto warned it could not parse, as it said them.
    warned: tuple[str, ...]

    @property
    def skipped_types(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.skipped.values())))

    def physical_id(self, logical_id: str) -> str:
        for resource in self.resources:
            if resource.logical_id == logical_id and resource.physical_id:
                return resource.physical_id
        raise StackError(f"stack {self.name} has no physical resource for {logical_id}")

    def as_json(self) -> dict[str, Any]:
        return {
            "stack_name": self.name,
            "region": self.region,
            "stack_id": self.stack_id,
            "resources": [r.as_json() for r in self.resources],
            "skipped_types": list(self.skipped_types),
            "skipped": dict(sorted(self.skipped.items())),
        }


def create_stack(
    endpoint: Endpoint,
    *,
    name: str,
    region: str,
    template: Mapping[str, Any],
    parameters: Mapping[str, str],
) -> CreatedStack:
    """create_stack with ``template`` as TemplateBody, then a bounded wait for CREATE_COMPLETE."""
    cloudformation = endpoint.client("cloudformation", region)
    from botocore.exceptions import ClientError

    with moto_skip_notes() as warned:
        try:
            stack_id = cloudformation.create_stack(
                StackName=name,
                TemplateBody=json.dumps(template),
                Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
                Capabilities=["CAPABILITY_IAM"],
            )["StackId"]
        except ClientError as exc:
            raise StackError(f"CreateStack {name} in {region} refused: {exc}") from None
        status, reason = _wait(cloudformation, name)
        if status != "CREATE_COMPLETE":
            raise StackError(f"stack {name} in {region} ended {status}: {reason or 'no reason given'}")
        # moto parses a skipped resource again (and warns again) on every look at the stack.
        listed = cloudformation.describe_stack_resources(StackName=name)["StackResources"]
    resources = tuple(
        StackResource(
            logical_id=str(r["LogicalResourceId"]), type=str(r["ResourceType"]), physical_id=r.get("PhysicalResourceId")
        )
        for r in listed
        if r.get("LogicalResourceId")  # moto lists a skipped resource without one
    )
    created = {r.logical_id for r in resources}
    expected = created_resources(template, parameters)
    unexpected = sorted(created - set(expected))
    if unexpected:
        raise StackError(f"stack {name} has resources its template does not create: {', '.join(unexpected)}")
    skipped = {lid: str(r.get("Type")) for lid, r in expected.items() if lid not in created}
    return CreatedStack(
        name=name, region=region, stack_id=str(stack_id), resources=resources, skipped=skipped, warned=tuple(warned)
    )


def _wait(cloudformation: Any, name: str) -> tuple[str, str]:
    deadline = time.monotonic() + WAIT_SECONDS
    status, reason = "", ""
    for _ in range(WAIT_POLLS):
        stack = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
        status, reason = str(stack["StackStatus"]), str(stack.get("StackStatusReason") or "")
        if _DONE.search(status) or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    if not _DONE.search(status):
        raise StackError(f"stack {name} still {status} after {WAIT_POLLS} looks or {WAIT_SECONDS:.0f} s")
    return status, reason
