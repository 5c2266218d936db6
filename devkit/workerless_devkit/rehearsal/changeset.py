"""A change set on moto's CloudFormation made from the template CloudFormation's transforms would give.

CloudFormation runs a template's transforms (``AWS::LanguageExtensions``, then
``AWS::Serverless-2016-10-31``) before it computes a change set; moto's CreateChangeSet runs none and
reads the packaged template's ``Fn::ForEach::Route`` key as a resource (its change-set builder then
fails with "list indices must be integers or slices, not str", and `sam deploy` sees a 500).

While :func:`transforming_change_sets` is open, moto's backend is given the template after the
rehearsal's own two steps (:func:`~workerless_devkit.rehearsal.transform.expand`, SAM CLI's
implementation, and :func:`~workerless_devkit.rehearsal.transform.translate`, samtranslator), with the
parameters the request carried and the pseudo-parameters of the stack it names: the same transforms
the rehearsal's stack is created from. A template the transforms refuse fails CreateChangeSet with a
ValidationError naming the cause, as CloudFormation fails a change set whose transform fails.

moto's backends are this process's objects and its server runs in this process: the method is
replaced on the class for the block only, and restored after.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workerless_devkit.local.template import parse_template_text
from workerless_devkit.rehearsal.errors import RehearsalError
from workerless_devkit.rehearsal.tools import SamCli
from workerless_devkit.rehearsal.transform import check_expanded, expand, pseudo_parameters, translate

# One replacement at a time: two blocks open at once would restore each other's method.
_PATCHING = threading.Lock()


@contextmanager
def transforming_change_sets(
    sam: SamCli, env: Mapping[str, str], *, work_dir: Path, transformed: list[str]
) -> Iterator[None]:
    """For the block, moto's CreateChangeSet transforms the template first; ``transformed`` gets each stack name."""
    from moto.cloudformation.exceptions import ValidationError
    from moto.cloudformation.models import CloudFormationBackend

    original = CloudFormationBackend.create_change_set

    def create_change_set(
        self: CloudFormationBackend,
        stack_name: str,
        change_set_name: str,
        template: str,
        parameters: dict[str, str],
        *args: Any,
        **kwargs: Any,
    ) -> tuple[str, str]:
        data = parse_template_text(template, source=f"CreateChangeSet {stack_name}")
        if data.get("Transform"):
            source = work_dir / f"change-set-{stack_name}.json"
            source.write_text(json.dumps(data), encoding="utf-8")
            pseudo = pseudo_parameters(stack_name=stack_name, region=self.region_name, account_id=self.account_id)
            try:
                expanded = expand(sam, source, {**parameters, **pseudo}, env, work_dir=work_dir)
                check_expanded(expanded.template)
                data = translate(expanded.template, parameters, self.region_name)
            except RehearsalError as exc:
                raise ValidationError(message=f"Transform failed: {exc}") from None
            template = json.dumps(data)
            transformed.append(stack_name)
        return original(self, stack_name, change_set_name, template, parameters, *args, **kwargs)

    with _PATCHING:
        CloudFormationBackend.create_change_set = create_change_set  # type: ignore[method-assign]
        try:
            yield
        finally:
            CloudFormationBackend.create_change_set = original  # type: ignore[method-assign]


def check_change_set(cloudformation: Any, stack_name: str, created: set[str]) -> list[str]:
    """The logical IDs the stack's one change set adds; raises unless ``created`` are all among them.

    ``created``: the transformed template's resources whose conditions hold, which CloudFormation's
    change set would add. (moto's lists every resource, conditions unread; a resource it adds beyond
    ``created`` is moto's leniency, not a finding.)
    """
    summaries = cloudformation.list_change_sets(StackName=stack_name)["Summaries"]
    if len(summaries) != 1:
        raise RehearsalError(f"sam deploy left {len(summaries)} change sets on {stack_name}, not one")
    added: list[str] = []
    kwargs: dict[str, Any] = {"ChangeSetName": summaries[0]["ChangeSetId"]}
    for _page in range(100):  # 100 pages of 100 changes: past CloudFormation's 500 resources
        described = cloudformation.describe_change_set(**kwargs)
        added += [
            change["ResourceChange"]["LogicalResourceId"]
            for change in described.get("Changes", [])
            if change.get("ResourceChange", {}).get("Action") == "Add"
        ]
        if not described.get("NextToken"):
            break
        kwargs["NextToken"] = described["NextToken"]
    missing = sorted(created - set(added))
    if missing:
        raise RehearsalError(f"the change set sam deploy made on {stack_name} does not add {', '.join(missing)}")
    return added
