"""``workerless new-handler TYPE``: a new job type's files, and its wiring in template.yaml.

A job type is served by a route whose name is the type's letters and digits (``ship-parcel`` ->
``shipparcel``): the route's handler directory and the stem of its logical IDs. The name cannot
keep the hyphen: `sam package` finds a loop function's code only under a ``${Route}`` logical ID,
which CloudFormation allows letters and digits only (template.yaml's header says more).

Files (each refused if it exists)::

    functions/<route>/app.py                the handler (``from workerless import Job, job_handler``)
    tests/unit/test_handler_<type_>.py      its test, on the workerless.testing kit
    events/sqs-<type>.json                  an SQS event of one job, like events/sqs-charge-payment.json

template.yaml's routes are data: the route joins the routes list (&Routes, the collection of the route
loop that generates its queues, role, function, grants, alarms, outputs and the SSM parameter the
poller reads the route from), and Mappings.Routes gets its line naming the engine's job type
(``shipparcel: {Type: ship-parcel}``, where the route's settings go too). Both are text edits
(comments and layout stay as they are), and all there is to do: the dashboard finds every route by
SEARCH. Nothing is written unless every check passed.

Example:
    >>> stem("charge-payment")
    'chargepayment'
    >>> validate_job_type("ship-parcel")
    'ship-parcel'
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workerless.errors import ConfigurationError

#: Job types: lowercase letters, digits and single hyphens, starting with a letter.
JOB_TYPE_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
MAX_JOB_TYPE_LENGTH = 48
#: Names taken by the library's own functions and queues (their directories and logical ids).
RESERVED = frozenset(
    {"poller", "heartbeat", "deadletter", "dead-letter", "ticker", "workerless", "jobs", "layer", "layers"}
)


class ScaffoldError(ConfigurationError):
    """new-handler refused: the type is malformed, reserved, or already exists."""


@dataclass(frozen=True)
class Scaffold:
    """What :func:`scaffold_handler` wrote."""

    job_type: str
    files: list[Path]
    resources: list[str]
    template: Path


def camel(job_type: str) -> str:
    """The logical-ID stem of a job type, as template.yaml spells them (``send-receipt`` -> ``SendReceipt``)."""
    return "".join(part[:1].upper() + part[1:] for part in job_type.split("-"))


def validate_job_type(job_type: str) -> str:
    """Return ``job_type`` if it can name a function directory, a route and logical IDs; else raise."""
    if not JOB_TYPE_RE.fullmatch(job_type):
        raise ScaffoldError(
            f"job type {job_type!r} is not valid: use lowercase letters, digits and single hyphens, "
            "starting with a letter (e.g. charge-payment)",
            key="TYPE",
        )
    if len(job_type) > MAX_JOB_TYPE_LENGTH:
        raise ScaffoldError(f"job type {job_type!r} is longer than {MAX_JOB_TYPE_LENGTH} characters", key="TYPE")
    if job_type in RESERVED:
        raise ScaffoldError(f"job type {job_type!r} is reserved (a workerless function or queue)", key="TYPE")
    return job_type


def stem(job_type: str) -> str:
    """The name of the route that serves a job type: its letters and digits (``send-receipt`` ->
    ``sendreceipt``), the route's handler directory and the stem of its logical IDs."""
    return re.sub(r"[^A-Za-z0-9]", "", job_type)


def resource_ids(job_type: str) -> list[str]:
    """The logical IDs the template's route loop generates for ``job_type`` (SAM's own come on top)."""
    s = stem(job_type)
    return [
        f"{s}{suffix}"
        for suffix in (
            "Queue",
            "QueuePolicy",
            "FunctionLogGroup",
            "FunctionRole",
            "Function",
            "PollerPolicy",
            "HeartbeatPolicy",
            "QueueAgeAlarm",
            "Route",
        )
    ]


# ------------------------------------------------------------------------------------------------
# template.yaml: a text edit (comments, order and layout stay as they are; the diff is one line)

#: The routes: a YAML sequence anchored &Routes (the route loop's collection).
_ROUTES = re.compile(r"^(?P<indent>[ ]*)- &Routes[ ]*\n(?P<items>(?:(?P=indent)[ ]{2}- [^\n]*\n)+)", re.MULTILINE)
#: Mappings.Routes: one line per route (its Type and settings).
_ROUTE_SETTINGS = re.compile(r"^(?P<indent>[ ]*)Routes:[ ]*\n(?P<entries>(?:(?P=indent)[ ]{2}[^\n]*\n)+)", re.MULTILINE)


def _yaml() -> Any:
    from ruamel.yaml import YAML

    return YAML(typ="rt")  # round-trip: reads the short tags (!Ref, !Sub) without knowing them


def template_routes(text: str) -> list[str]:
    """The routes of template.yaml's route loop (the &Routes list), in order."""
    found = _ROUTES.search(text)
    if found is None:
        raise ScaffoldError(
            "template has no route list anchored &Routes (the collection of its route loop)", key="Routes"
        )
    return [line.strip()[2:].strip().strip("\"'") for line in found.group("items").splitlines()]


def template_route_types(text: str) -> dict[str, str]:
    """{route: the engine's job type} of template.yaml's routes: Mappings.Routes' Type, else the name."""
    routes = template_routes(text)
    settings = ((_yaml().load(text) or {}).get("Mappings") or {}).get("Routes") or {}
    types = {}
    for route in routes:
        entry = settings.get(route) or {}
        types[route] = str(entry.get("Type", route)) if isinstance(entry, dict) else route
    return types


def template_job_types(text: str) -> list[str]:
    """The engine job types of template.yaml's routes, in the &Routes list's order."""
    return list(template_route_types(text).values())


def route_types(text: str) -> list[tuple[str, str]]:
    """(job type, queue logical id) of each route of template.yaml's route loop, in order."""
    return [(job_type, f"{route}Queue") for route, job_type in template_route_types(text).items()]


def _route_line(indent: str, route: str, job_type: str) -> str:
    return f"{indent}  {route}: {{Type: {job_type}}}\n"


def with_job_types(text: str, job_types: list[str]) -> str:
    """template.yaml's text with exactly ``job_types`` as its routes, in that order: the &Routes list,
    and Mappings.Routes holding one line per route (a route kept keeps its line; the others go)."""
    for job_type in job_types:
        validate_job_type(job_type)
    if not job_types:
        raise ScaffoldError("no job types given", key="TYPE")
    template_routes(text)  # raises when the list is missing
    settings = _settings_block(text)
    kept = {line.strip().split(":", 1)[0]: line for line in settings.group("entries").splitlines(True)}
    indent = settings.group("indent")
    entries = "".join(
        kept[stem(t)] if stem(t) in kept and f"Type: {t}" in kept[stem(t)] else _route_line(indent, stem(t), t)
        for t in job_types
    )
    text = text[: settings.start("entries")] + entries + text[settings.end("entries") :]
    listed = _ROUTES.search(text)
    assert listed is not None
    items = "".join(f"{listed.group('indent')}  - {stem(t)}\n" for t in job_types)
    return text[: listed.start("items")] + items + text[listed.end("items") :]


def _settings_block(text: str) -> re.Match[str]:
    found = _ROUTE_SETTINGS.search(text)
    if found is None:
        raise ScaffoldError("template has no Mappings.Routes (one line per route)", key="Routes")
    return found


def add_job_type(text: str, job_type: str) -> tuple[str, list[str]]:
    """template.yaml's text with job type ``job_type`` added; returns (new text, logical IDs it generates).

    Two lines change: the type's route joins the &Routes list (its resources, SSM parameter included,
    are generated from it), and Mappings.Routes gets ``<route>: {Type: <job type>}``. Raises
    :class:`ScaffoldError` when the type is malformed or reserved, when it (or a type with the same
    route name) is already there, or when the template lacks the list or the mapping.
    """
    validate_job_type(job_type)
    route = stem(job_type)
    for existing_route, existing in template_route_types(text).items():
        if existing == job_type:
            raise ScaffoldError(f"job type {job_type!r} is already in the template's routes", key="TYPE")
        if existing_route == route:
            raise ScaffoldError(
                f"job type {job_type!r} would have the route of {existing!r} ({route}: {route}Queue, ...)",
                key="TYPE",
            )
    settings = _settings_block(text)
    text = (
        text[: settings.end("entries")]
        + _route_line(settings.group("indent"), route, job_type)
        + text[settings.end("entries") :]
    )
    listed = _ROUTES.search(text)
    assert listed is not None  # template_routes found it
    item = f"{listed.group('indent')}  - {route}\n"
    return text[: listed.end("items")] + item + text[listed.end("items") :], resource_ids(job_type)


# ------------------------------------------------------------------------------------------------
# Files


def handler_source(job_type: str) -> str:
    return f'''"""{job_type}: TODO say what a {job_type} job does."""

from workerless import Job, job_handler


@job_handler("{job_type}")
def handler(job: Job) -> dict:
    # job.variables: the job's input. For an effect that must happen once however often the engine
    # retries the job, use job.workflow_key as its idempotency key (job.key is new per attempt).
    # Return the variables to complete the job with. Raise workerless.TerminalError for input that
    # can never succeed (failed, no retries), workerless.ThrowError for a business error the
    # workflow handles, anything else to fail with a retry.
    job.log(f"handling {job_type} job {{job.id}}")
    return {{"handled": True}}
'''


def test_source(job_type: str) -> str:
    return f'''"""The {job_type} handler, run through the wrapper's outcome mapping (no AWS, no engine)."""

from pathlib import Path

from workerless.testing import assert_completed, load_handler, run_handler

handler = load_handler(Path(__file__).resolve().parents[2] / "functions" / "{stem(job_type)}" / "app.py")


def test_a_{job_type.replace("-", "_")}_job_completes() -> None:
    outcome = run_handler(handler, {{"orderId": "7"}})
    assert_completed(outcome, handled=True)
'''


def event_json(job_type: str, *, region: str = "us-east-1", account: str = "123456789012") -> str:
    """An SQS event of one job of ``job_type``, in the shape events/sqs-charge-payment.json has."""
    from workerless._core.model import ActivatedJob, JobRef

    activated_at = 1789041600.0
    job = ActivatedJob(
        ref=JobRef("sheptra", "2251799813690001", job_type, attempt="r3"),
        variables={"orderId": "2481"},
        lease_expires_at=activated_at + 60,
        activated_at=activated_at,
        retries=3,
        instance_id="2251799813690000",
        element_id=camel(job_type),
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    body = job.to_message()
    event = {
        "Records": [
            {
                "messageId": "059f36b4-87a3-44ab-83d2-661975900001",
                "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a0001...",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1789041600150",
                    "SenderId": "AROAEXAMPLEPOLLERROLE:workerless-PollerFunction-1a2b3c4d5e6f",
                    "ApproximateFirstReceiveTimestamp": "1789041600190",
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{region}:{account}:workerless-{stem(job_type)}Queue-Q4H0Z6L3K2PA",
                "awsRegion": region,
            }
        ]
    }
    return json.dumps(event, indent=2) + "\n"


def planned_files(project: Path, job_type: str) -> dict[Path, str]:
    return {
        project / "functions" / stem(job_type) / "app.py": handler_source(job_type),
        project / "tests" / "unit" / f"test_handler_{job_type.replace('-', '_')}.py": test_source(job_type),
        project / "events" / f"sqs-{job_type}.json": event_json(job_type),
    }


def scaffold_handler(job_type: str, *, template: str | Path = "template.yaml") -> Scaffold:
    """Create the job type's files next to ``template`` and wire it into the template.

    Every check runs before anything is written: a malformed or reserved type, an existing
    ``functions/<route>/`` (or test or event file), existing logical IDs or route all refuse with a
    :class:`ScaffoldError` that names what exists.
    """
    validate_job_type(job_type)
    template_path = Path(template)
    try:
        text = template_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScaffoldError(f"cannot read template {str(template_path)!r}: {exc.strerror}", key="template") from None
    project = template_path.absolute().parent
    function_dir = project / "functions" / stem(job_type)
    if function_dir.exists():
        raise ScaffoldError(f"job type {job_type!r} already exists: {function_dir} is there", key="TYPE")
    files = planned_files(project, job_type)
    existing = [str(path) for path in files if path.exists()]
    if existing:
        raise ScaffoldError(f"job type {job_type!r}: {', '.join(existing)} already exists", key="TYPE")
    new_text, added = add_job_type(text, job_type)
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    template_path.write_text(new_text, encoding="utf-8")
    return Scaffold(job_type, list(files), added, template_path)
