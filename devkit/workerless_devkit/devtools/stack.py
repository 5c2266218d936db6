"""Where a deployment's queues and table are: from a CloudFormation stack, from explicit values, or
from a running :class:`~workerless_devkit.local.LocalTopology`.

A deployed stack is read with ListStackResources (paginated): a queue's physical id is its URL, the
table's is its name. Job types come from the template's contract: every ``<stem>Queue`` that is
neither a library queue (the poller's TickerQueue, the HeartbeatQueue) nor a dead-letter queue is a
route's job queue, and every route's jobs dead-letter to the one ``JobDeadLetterQueue`` (a dead
letter names its job type in its body: :mod:`workerless_devkit.devtools.dlq` reads it there). The route
loop's logical IDs drop the type's dashes (``charge-payment`` -> ``chargepaymentQueue``), so the
names come from the stack's own routes, read from its processed template (GetTemplate): each route's
``AWS::SSM::Parameter`` (its value names the type and its queue's logical ID), or, for a stack
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
#: The library's own dead-letter queues (ticks, tickets); the jobs' is JOB_DEAD_LETTER_QUEUE.
LIBRARY_DEAD_LETTER_QUEUES = ("TickerDeadLetterQueue", "HeartbeatDeadLetterQueue")
#: The one dead-letter queue every route's job queue redrives to.
JOB_DEAD_LETTER_QUEUE = "JobDeadLetterQueue"
#: The poller function's logical id (template.yaml).
POLLER_FUNCTION = "PollerFunction"


@dataclass(frozen=True)
class RouteQueues:
    job_type: str
    queue_url: str | None


@dataclass(frozen=True)
class Deployment:
    """What the dev tools read: each route's job queue, the job dead-letter queue they share, the job
    table, the library queues."""

    routes: list[RouteQueues]
    table: str | None = None
    library_queues: dict[str, str] = field(default_factory=dict)
    source: str = ""
    #: The job dead-letter queue every route's queue redrives to (None: not known).
    dead_letter_url: str | None = None
    #: The poller function's name (its AWS/Lambda Invocations: whether anyone polls); None: not known.
    poller_function: str | None = None

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
    """The text of an ``Fn::Sub`` (string or [string, variables]) or of a plain string; a variable
    whose value is already a string (a route's Type, resolved by AWS::LanguageExtensions) is put in."""
    if isinstance(value, dict):
        value = value.get("Fn::Sub")
    if isinstance(value, list) and value:
        text, variables = value[0], value[1] if len(value) > 1 and isinstance(value[1], dict) else {}
        if not isinstance(text, str):
            return None
        for name, item in variables.items():
            if isinstance(item, str):
                text = text.replace(f"${{{name}}}", item)
        return text
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
        found.append(RouteQueues(names.get(logical_id, kebab(logical_id[: -len("Queue")])), url))
    library = {lid: queues[lid] for lid in (*LIBRARY_QUEUES, *LIBRARY_DEAD_LETTER_QUEUES) if lid in queues}
    table = tables[0] if len(tables) == 1 else None
    functions = {lid: pid for lid, kind, pid in resources if kind == "AWS::Lambda::Function"}
    return Deployment(
        found,
        table,
        library,
        source,
        dead_letter_url=queues.get(JOB_DEAD_LETTER_QUEUE),
        poller_function=functions.get(POLLER_FUNCTION),
    )


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
    """The deployment of a running :class:`~workerless_devkit.local.LocalTopology` (its moto queues and table)."""
    from workerless._core.settings import Settings
    from workerless._poller.routes import with_route_parameters

    settings = Settings.from_env(topology.environment)
    if not settings.routes and settings.routes_path:
        # The routes the poller reads: the template's route parameters under the path.
        settings = with_route_parameters(settings, topology.template.parameters_under(settings.routes_path))
    by_url = {spec.url: spec for spec in topology.template.queues}
    routes: list[RouteQueues] = []
    dead_letter_ids: set[str] = set()
    for route in settings.routes:
        spec = by_url.get(route.queue_url)
        if spec is not None and spec.dead_letter_queue_id is not None:
            dead_letter_ids.add(spec.dead_letter_queue_id)
        routes.append(RouteQueues(route.type, topology.queue_url(spec.logical_id) if spec else route.queue_url))
    if len(dead_letter_ids) > 1:
        raise ConfigurationError(
            f"the routes of {topology.template.path} dead-letter to {len(dead_letter_ids)} queues "
            f"({', '.join(sorted(dead_letter_ids))}); the dev tools read the one job dead-letter queue they share"
        )
    library: dict[str, str] = {}
    for lid in (*LIBRARY_QUEUES, *LIBRARY_DEAD_LETTER_QUEUES):
        try:
            library[lid] = topology.queue_url(lid)
        except KeyError:
            continue
    poller = next((f.function_name for f in topology.template.functions if f.logical_id == POLLER_FUNCTION), None)
    return Deployment(
        routes,
        settings.table_name,
        library,
        source=f"local topology {topology.template.path}",
        dead_letter_url=topology.queue_url(dead_letter_ids.pop()) if dead_letter_ids else None,
        poller_function=poller,
    )


def parse_route_options(items: Sequence[str]) -> list[RouteQueues]:
    """``TYPE=QUEUE_URL`` words (``--route``) -> routes. The routes share one job dead-letter queue,
    given on its own (``--dead-letter-queue-url``)."""
    routes: list[RouteQueues] = []
    for item in items:
        job_type, sep, url = item.partition("=")
        if not sep or not job_type or not url:
            raise ConfigurationError(f"--route {item!r} is not TYPE=QUEUE_URL", key="route")
        if "," in url:
            raise ConfigurationError(
                f"--route {item!r}: a route names its job queue only; every route's jobs dead-letter to one queue, "
                "given once with --dead-letter-queue-url",
                key="route",
            )
        routes.append(RouteQueues(job_type, url))
    return routes
