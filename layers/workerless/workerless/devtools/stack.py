"""Where a deployment's queues and table are: from a CloudFormation stack, from explicit values, or
from a running :class:`~workerless.local.LocalTopology`.

A deployed stack is read with ListStackResources (paginated): a queue's physical id is its URL, the
table's is its name. Job types come from the template's contract: ``<stem>Queue`` with a
``<stem>DeadLetterQueue`` is a job type (the poller's TickerQueue and the HeartbeatQueue are not).
The route loop's logical IDs drop the type's dashes (``charge-payment`` -> ``chargepaymentQueue``), so
the names come from the stack's own routes, read from its processed template (GetTemplate): each
route's ``AWS::SSM::Parameter`` (its value names the type and its queue's logical ID), or, for a stack
deployed before the routes were parameters, its functions' WORKERLESS_ROUTES. Not from Parameter
Store itself: GetTemplate is the call (and the permission) the tools need anyway, and the template
names the queue by its logical ID, which is what ListStackResources is matched on. When the
template cannot be read, the names come from ``routes`` (job type, queue logical id) the caller
passes (a local template.yaml's). Only when neither names a queue is its stem taken as the name
(``ChargePayment`` -> ``charge-payment``, ``chargepayment`` as is).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workerless.errors import ConfigurationError

#: Queues of the library's own functions, not job types.
LIBRARY_QUEUES = ("TickerQueue", "HeartbeatQueue")


@dataclass(frozen=True)
class RouteQueues:
    job_type: str
    queue_url: str | None
    dead_letter_url: str | None


@dataclass(frozen=True)
class Deployment:
    """What the dev tools read: each route's queues, the job table, the library queues."""

    routes: list[RouteQueues]
    table: str | None = None
    library_queues: dict[str, str] = field(default_factory=dict)
    source: str = ""

    def route(self, job_type: str) -> RouteQueues:
        for route in self.routes:
            if route.job_type == job_type:
                return route
        known = ", ".join(r.job_type for r in self.routes) or "none"
        raise ConfigurationError(f"no job type {job_type!r} in {self.source or 'the deployment'} (known: {known})")


def kebab(camel: str) -> str:
    """``SendReceipt`` -> ``send-receipt`` (the inverse of the scaffold's naming)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", camel).lower()


def routes_in_text(text: str) -> list[tuple[str, str]]:
    """(job type, queue logical id) of each route of a WORKERLESS_ROUTES ``Fn::Sub`` string, in order.

    ``"${X}"`` (quoted) is a queue's reference, a bare ``${X}`` a number (``${MaxInFlight}``). Raises
    ValueError when the text is not a JSON list of routes."""
    text = re.sub(r'"\$\{([A-Za-z0-9:.]+)\}"', r'"@\1"', text)
    text = re.sub(r"\$\{[A-Za-z0-9:.]+\}", "0", text)
    routes = json.loads(text)
    if not isinstance(routes, list):
        raise ValueError("WORKERLESS_ROUTES is not a JSON list")
    out: list[tuple[str, str]] = []
    for route in routes:
        if not isinstance(route, dict):
            raise ValueError(f"a route of WORKERLESS_ROUTES is not an object: {route!r}")
        out.append((str(route.get("type", "")), str(route.get("queue", "")).removeprefix("@")))
    return out


def _sub_text(value: Any) -> str | None:
    """The text of an ``Fn::Sub`` (string or [string, variables]) or of a plain string."""
    if isinstance(value, dict):
        value = value.get("Fn::Sub")
    if isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, str) else None


def deployed_routes(template: Any) -> list[tuple[str, str]] | None:
    """The routes of a processed (deployed) template: its route parameters (``AWS::SSM::Parameter``
    whose value is a route naming its queue by logical ID), in template order; else the
    WORKERLESS_ROUTES of its first function that has it (a stack deployed before the routes were
    parameters). None when neither is there."""
    resources = template.get("Resources") if isinstance(template, dict) else None
    found: list[tuple[str, str]] = []
    for resource in (resources or {}).values():
        if not isinstance(resource, dict) or resource.get("Type") != "AWS::SSM::Parameter":
            continue
        text = _sub_text((resource.get("Properties") or {}).get("Value"))
        try:
            routes = routes_in_text(f"[{text}]") if text else []
        except ValueError:
            continue  # some other parameter
        found += [(job_type, queue) for job_type, queue in routes if job_type and queue]
    if found:
        return found
    for resource in (resources or {}).values():
        if not isinstance(resource, dict) or resource.get("Type") != "AWS::Lambda::Function":
            continue
        variables = ((resource.get("Properties") or {}).get("Environment") or {}).get("Variables") or {}
        value = _sub_text(variables.get("WORKERLESS_ROUTES"))
        if value is not None:
            try:
                return routes_in_text(value)
            except ValueError:
                return None
    return None


def from_resources(
    resources: Sequence[tuple[str, str, str]],
    *,
    routes: Sequence[tuple[str, str]] | None = None,
    source: str = "",
) -> Deployment:
    """``resources``: (logical id, type, physical id) of a stack. ``routes``: optional (type, queue id)."""
    queues = {lid: pid for lid, kind, pid in resources if kind == "AWS::SQS::Queue"}
    tables = [pid for lid, kind, pid in resources if kind in ("AWS::DynamoDB::Table", "AWS::Serverless::SimpleTable")]
    names: dict[str, str] = {queue_id: job_type for job_type, queue_id in routes or ()}
    found: list[RouteQueues] = []
    for logical_id, url in queues.items():
        if logical_id in LIBRARY_QUEUES or not logical_id.endswith("Queue") or logical_id.endswith("DeadLetterQueue"):
            continue
        stem = logical_id[: -len("Queue")]
        dead_letter = queues.get(f"{stem}DeadLetterQueue")
        if logical_id not in names and dead_letter is None:
            continue
        found.append(RouteQueues(names.get(logical_id, kebab(stem)), url, dead_letter))
    library: dict[str, str] = {}
    for lid in (*LIBRARY_QUEUES, "TickerDeadLetterQueue", "HeartbeatDeadLetterQueue"):
        if lid in queues:
            library[lid] = queues[lid]
    return Deployment(found, tables[0] if len(tables) == 1 else None, library, source)


def resolve_stack(
    cloudformation: Any, stack_name: str, *, routes: Sequence[tuple[str, str]] | None = None
) -> Deployment:
    """The deployment of stack ``stack_name`` (a boto3 CloudFormation client)."""
    from botocore.exceptions import BotoCoreError, ClientError

    resources: list[tuple[str, str, str]] = []
    try:
        pages = cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name)
        for page in pages:
            for summary in page.get("StackResourceSummaries", []):
                physical = summary.get("PhysicalResourceId")
                if physical:
                    resources.append((summary["LogicalResourceId"], summary["ResourceType"], physical))
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ConfigurationError(
            f"cannot read stack {stack_name!r}: {error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": "),
            key="stack-name",
        ) from None
    except BotoCoreError as exc:
        raise ConfigurationError(f"cannot reach CloudFormation: {type(exc).__name__}", key="stack-name") from None
    routes = _stack_routes(cloudformation, stack_name) or routes
    return from_resources(resources, routes=routes, source=f"stack {stack_name}")


def _stack_routes(cloudformation: Any, stack_name: str) -> list[tuple[str, str]] | None:
    """The stack's routes from its processed template; None (names from the stems) when it cannot be
    read, e.g. a caller without cloudformation:GetTemplate: the queues are still found."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        body = cloudformation.get_template(StackName=stack_name, TemplateStage="Processed").get("TemplateBody")
    except (ClientError, BotoCoreError):
        return None
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return None
    return deployed_routes(body)


def from_topology(topology: Any) -> Deployment:
    """The deployment of a running :class:`~workerless.local.LocalTopology` (its moto queues and table)."""
    from workerless.routes import with_route_parameters
    from workerless.settings import Settings

    settings = Settings.from_env(topology.environment)
    if not settings.routes and settings.routes_path:
        # The routes the poller reads: the template's route parameters under the path.
        settings = with_route_parameters(settings, topology.template.parameters_under(settings.routes_path))
    by_url = {spec.url: spec for spec in topology.template.queues}
    routes: list[RouteQueues] = []
    for route in settings.routes:
        spec = by_url.get(route.queue_url)
        dead_letter = None
        if spec is not None and spec.dead_letter_queue_id is not None:
            dead_letter = topology.queue_url(spec.dead_letter_queue_id)
        routes.append(
            RouteQueues(route.type, topology.queue_url(spec.logical_id) if spec else route.queue_url, dead_letter)
        )
    library: dict[str, str] = {}
    for lid in (*LIBRARY_QUEUES, "TickerDeadLetterQueue", "HeartbeatDeadLetterQueue"):
        try:
            library[lid] = topology.queue_url(lid)
        except KeyError:
            continue
    return Deployment(routes, settings.table_name, library, source=f"local topology {topology.template.path}")


def parse_route_options(items: Sequence[str]) -> list[RouteQueues]:
    """``TYPE=QUEUE_URL[,DEAD_LETTER_URL]`` words (``--route``) -> routes."""
    routes: list[RouteQueues] = []
    for item in items:
        job_type, sep, urls = item.partition("=")
        if not sep or not job_type or not urls:
            raise ConfigurationError(f"--route {item!r} is not TYPE=QUEUE_URL[,DEAD_LETTER_QUEUE_URL]", key="route")
        queue, _, dead_letter = urls.partition(",")
        routes.append(RouteQueues(job_type, queue or None, dead_letter or None))
    return routes
