"""Read a SAM template the way ``sam local`` would, for local mode.

:func:`load_template` parses template.yaml (CloudFormation short tags included), resolves the
Parameters (defaults, then overrides), merges ``Globals.Function`` into every
``AWS::Serverless::Function``, and resolves the intrinsic functions in what local mode needs: each
function's code, handler, timeout, memory, environment, RecursiveLoop and events; each queue's
attributes; each table's keys and TTL. Properties local mode does not use (Policies, Layers, alarms,
IAM) are never resolved, so an intrinsic there cannot fail a local run.

References resolve to what the same reference means in AWS: ``!Ref Queue`` is the queue URL,
``!GetAtt Queue.Arn`` its ARN, ``!Ref Table`` the table name, ``!Ref Function`` the function name.
Physical names are ``{stack}-{LogicalId}`` unless the template names the resource.

Example:
    >>> template = load_template("template.yaml", parameters={"TickSeconds": "2"})  # doctest: +SKIP
    >>> [f.logical_id for f in template.functions]                                  # doctest: +SKIP
    ['PollerFunction', 'HeartbeatFunction', ...]
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workerless.errors import ConfigurationError

from workerless_devkit.local.extensions import ExtensionError, expand_language_extensions

#: Where local mode runs template.yaml: moto's default account, in us-east-1. A rehearsal bundle's
#: stack runs where its bundle.json says (:class:`Place`).
REGION = "us-east-1"
ACCOUNT_ID = "123456789012"
STACK_NAME = "workerless-local"

QUEUE_TYPE = "AWS::SQS::Queue"
BUCKET_TYPE = "AWS::S3::Bucket"
PARAMETER_TYPE = "AWS::SSM::Parameter"
#: Parameter Store's rules for a parameter (Systems Manager's PutParameter and its quotas): a
#: Standard parameter's value is at most 4 KB (Advanced: 8 KB); a name at most 1011 characters of
#: a-zA-Z0-9_.- with / between the levels of a hierarchy (at most 15), not beginning with aws or ssm.
PARAMETER_VALUE_LIMITS = {"Standard": 4096, "Advanced": 8192}
PARAMETER_NAME_LIMIT = 1011
PARAMETER_MAX_LEVELS = 15
_PARAMETER_NAME = re.compile(r"^[A-Za-z0-9_.\-/]+$")
TABLE_TYPES = ("AWS::DynamoDB::Table", "AWS::Serverless::SimpleTable")
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")

#: Lambda's quota on one function's environment variables, all of them together ("4 KB", Lambda
#: quotas; cfn-lint does not check it): a deploy over it fails. Lambda measures their compact JSON
#: object (its refusal quotes the "String measured"), and so does local mode.
ENVIRONMENT_LIMIT_BYTES = 4096
#: CloudFormation names what a template leaves unnamed <stack>-<LogicalId>-<12 random characters>;
#: local names stop before the suffix, so each one in a value counts this much more.
GENERATED_NAME_SUFFIX_BYTES = 13

#: Intrinsic functions local mode evaluates (CloudFormation's long names).
SUPPORTED_INTRINSICS = (
    "Ref",
    "Fn::GetAtt",
    "Fn::Sub",
    "Fn::Join",
    "Fn::Select",
    "Fn::Split",
    "Fn::If",
    "Fn::Equals",
    "Fn::Not",
    "Fn::And",
    "Fn::Or",
    "Fn::FindInMap",
    "Fn::Base64",
    "Fn::ToJsonString",
    "Fn::Length",
    "Condition",
)
_NO_VALUE = object()


class TemplateError(ConfigurationError):
    """The template cannot be run locally: names the resource and what is wrong."""


@dataclass(frozen=True, slots=True)
class Place:
    """The account and region a stack runs in (partition ``aws``): every ARN, queue URL and pseudo
    parameter local mode makes for it names them. A value, handed down with what runs (the
    template and its specs); template.yaml runs in :data:`LOCAL_PLACE`.

    Example:
        >>> Place("us-west-2").queue_url("jobs")
        'https://sqs.us-west-2.amazonaws.com/123456789012/jobs'
    """

    region: str = REGION
    account_id: str = ACCOUNT_ID

    def queue_url(self, name: str) -> str:
        return f"https://sqs.{self.region}.amazonaws.com/{self.account_id}/{name}"

    def queue_arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account_id}:{name}"

    def parameter_arn(self, name: str) -> str:
        """An SSM parameter's (or a path's) ARN: ``arn:aws:ssm:<region>:<account>:parameter/<name
        without its leading slash>``, as IAM evaluates GetParameter(s)ByPath against it."""
        return f"arn:aws:ssm:{self.region}:{self.account_id}:parameter/{name.lstrip('/')}"

    def table_arn(self, name: str) -> str:
        return f"arn:aws:dynamodb:{self.region}:{self.account_id}:table/{name}"

    def log_group_arn(self, name: str) -> str:
        """A log group's ARN without the ``:*`` its CloudFormation ``Arn`` attribute carries."""
        return f"arn:aws:logs:{self.region}:{self.account_id}:log-group:{name}"

    def role_arn(self, name: str) -> str:
        return f"arn:aws:iam::{self.account_id}:role/{name}"

    def function_arn(self, name: str) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account_id}:function:{name}"

    def layer_arn(self, name: str, version: int = 1) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account_id}:layer:{name}:{version}"

    def secret_arn(self, name: str) -> str:
        """A secret's ARN without the random suffix Secrets Manager adds."""
        return f"arn:aws:secretsmanager:{self.region}:{self.account_id}:secret:{name}"

    def stack_id(self, stack_name: str) -> str:
        return f"arn:aws:cloudformation:{self.region}:{self.account_id}:stack/{stack_name}/local"

    def rule_arn(self, name: str) -> str:
        return f"arn:aws:events:{self.region}:{self.account_id}:rule/{name}"

    def pseudo_parameters(self) -> dict[str, str]:
        """AWS::Region, AWS::AccountId and AWS::Partition."""
        return {"AWS::Region": self.region, "AWS::AccountId": self.account_id, "AWS::Partition": "aws"}


#: Where template.yaml runs (us-east-1 of moto's default account).
LOCAL_PLACE = Place()


# --------------------------------------------------------------------------------------------------
# YAML with CloudFormation short tags


def parse_template_text(text: str, *, source: str = "template") -> dict[str, Any]:
    """Parse YAML or JSON template text; short tags become their long form (``!Ref X`` → ``{"Ref": "X"}``)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.constructor import SafeConstructor
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

    class _CfnConstructor(SafeConstructor):
        """A private subclass: registering the tags must not change every safe loader in the process."""

    def construct_tag(loader: SafeConstructor, suffix: str, node: Node) -> dict[str, Any]:
        value: Any
        if isinstance(node, ScalarNode):
            value = loader.construct_scalar(node)
        elif isinstance(node, SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        elif isinstance(node, MappingNode):
            value = loader.construct_mapping(node, deep=True)
        else:  # pragma: no cover - the three node kinds are all YAML has
            raise TemplateError(f"{source}: cannot read tag !{suffix}")
        if suffix == "Ref":
            return {"Ref": value}
        if suffix == "Condition":
            return {"Condition": value}
        if suffix == "GetAtt" and isinstance(value, str):
            # !GetAtt Resource.Attribute (the attribute may itself contain dots: Endpoint.Address)
            resource, _, attribute = value.partition(".")
            value = [resource, attribute]
        return {f"Fn::{suffix}": value}

    _CfnConstructor.add_multi_constructor("!", construct_tag)
    yaml = YAML(typ="safe", pure=True)
    yaml.Constructor = _CfnConstructor
    try:
        data = yaml.load(text)
    except YAMLError as exc:
        raise TemplateError(f"{source} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TemplateError(f"{source} is not a template (expected a mapping at the top level)")
    return data


# --------------------------------------------------------------------------------------------------
# What local mode runs


@dataclass(frozen=True, slots=True)
class SqsEventSpec:
    """An SQS event source of a function (one event source mapping)."""

    name: str
    queue_id: str
    batch_size: int = 10
    batching_window_seconds: float = 0.0
    maximum_concurrency: int | None = None
    report_batch_item_failures: bool = False
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class ScheduleEventSpec:
    """A Schedule / ScheduleV2 event: ``rate(...)`` gives ``seconds``; ``cron(...)`` gives None."""

    name: str
    expression: str
    seconds: float | None
    enabled: bool = True
    input: Any = None


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    logical_id: str
    function_name: str
    code_dir: Path
    handler: str
    timeout: int = 3
    memory_size: int = 128
    #: ReservedConcurrentExecutions (None: none reserved, the function draws on the account's
    #: unreserved concurrency); see :mod:`workerless_devkit.local.concurrency`.
    reserved_concurrency: int | None = None
    #: EventInvokeConfig MaximumEventAgeInSeconds: how long Lambda keeps retrying a throttled
    #: asynchronous (scheduled) event before dropping it (Lambda's default: 6 hours).
    maximum_event_age: int = 21600
    environment: dict[str, str] = field(default_factory=dict)
    recursive_loop: str = "Terminate"
    #: LoggingConfig: LogFormat (Text, JSON) and, with JSON only, Lambda's log-level filters (None:
    #: no filtering in Text; Lambda's default INFO in JSON for the application's lines).
    log_format: str = "Text"
    application_log_level: str | None = None
    system_log_level: str | None = None
    sqs_events: tuple[SqsEventSpec, ...] = ()
    schedule_events: tuple[ScheduleEventSpec, ...] = ()
    ignored_events: tuple[str, ...] = ()
    #: Its execution role's ARN (None: SAM generates one, which only a transformed template names).
    role: str | None = None
    place: Place = LOCAL_PLACE

    @property
    def arn(self) -> str:
        return self.place.function_arn(self.function_name)

    @property
    def allows_recursion(self) -> bool:
        return self.recursive_loop == "Allow"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    logical_id: str
    name: str
    visibility_timeout: int = 30
    delay_seconds: int = 0
    message_retention_seconds: int | None = None
    receive_wait_seconds: int | None = None
    dead_letter_queue_id: str | None = None
    max_receive_count: int | None = None
    fifo: bool = False
    #: SQS's default and maximum since 2025 when the template sets none (1 MiB).
    maximum_message_size: int = 1_048_576
    place: Place = LOCAL_PLACE

    @property
    def url(self) -> str:
        return self.place.queue_url(self.name)

    @property
    def arn(self) -> str:
        return self.place.queue_arn(self.name)


@dataclass(frozen=True, slots=True)
class TableSpec:
    logical_id: str
    name: str
    key_schema: tuple[dict[str, str], ...]
    attribute_definitions: tuple[dict[str, str], ...]
    ttl_attribute: str | None = None
    global_secondary_indexes: tuple[dict[str, Any], ...] = ()
    place: Place = LOCAL_PLACE

    @property
    def arn(self) -> str:
        return self.place.table_arn(self.name)


@dataclass(frozen=True, slots=True)
class BucketSpec:
    logical_id: str
    name: str

    @property
    def arn(self) -> str:
        return bucket_arn(self.name)


@dataclass(frozen=True, slots=True)
class ParameterSpec:
    """An ``AWS::SSM::Parameter`` (a String, e.g. a route): created in the embedded SSM before the
    functions run."""

    logical_id: str
    name: str
    value: str
    type: str = "String"
    tier: str = "Standard"
    place: Place = LOCAL_PLACE

    @property
    def arn(self) -> str:
        return self.place.parameter_arn(self.name)


@dataclass(frozen=True, slots=True)
class LocalTemplate:
    """The resolved template: what local mode creates and runs."""

    path: Path
    parameters: dict[str, Any]
    functions: tuple[FunctionSpec, ...]
    queues: tuple[QueueSpec, ...]
    tables: tuple[TableSpec, ...]
    #: Parameters with neither a default nor an override (resolved to "").
    unset_parameters: tuple[str, ...] = ()
    buckets: tuple[BucketSpec, ...] = ()
    #: Its SSM parameters (the routes').
    ssm_parameters: tuple[ParameterSpec, ...] = ()
    #: Where it was read from: ``"template"`` (the devkit's resolution of template.yaml) or
    #: ``"stack"`` (a stack created from a rehearsal bundle, :mod:`workerless_devkit.local.stack`).
    source: str = "template"
    #: The account and region it runs in: its ARNs', queue URLs' and functions' AWS_REGION.
    place: Place = LOCAL_PLACE
    #: Values that replaced the settings of its Mappings.Routes lines (:func:`apply_route_settings`).
    route_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def parameters_under(self, path: str) -> dict[str, str]:
        """{name: value} of the SSM parameters directly under ``path`` (what GetParametersByPath,
        not recursive, answers), in template order."""
        prefix = path.rstrip("/") + "/"
        return {
            p.name: p.value
            for p in self.ssm_parameters
            if p.name.startswith(prefix) and "/" not in p.name[len(prefix) :]
        }

    def function(self, logical_id: str) -> FunctionSpec:
        for spec in self.functions:
            if spec.logical_id == logical_id:
                return spec
        raise KeyError(logical_id)

    def queue(self, logical_id: str) -> QueueSpec:
        for spec in self.queues:
            if spec.logical_id == logical_id:
                return spec
        raise KeyError(logical_id)

    def environment(self) -> dict[str, str]:
        """The union of every function's environment (Globals already merged in).

        Local mode runs every function in one process, so one key must mean one thing: two functions
        setting the same key to different values is a :class:`TemplateError` naming the key and both
        functions (never the values: they may be sensitive).
        """
        union: dict[str, str] = {}
        owner: dict[str, str] = {}
        for spec in self.functions:
            for key, value in spec.environment.items():
                if key in union and union[key] != value:
                    raise TemplateError(
                        f"environment variable {key} is set differently by {owner[key]} and {spec.logical_id}; "
                        "local mode runs every function in one process, so each key must have one value"
                    )
                union.setdefault(key, value)
                owner.setdefault(key, spec.logical_id)
        return union


# The ARNs of :data:`LOCAL_PLACE` unless ``place`` is given (:class:`Place` has the same methods).


def queue_url(name: str, *, place: Place = LOCAL_PLACE) -> str:
    return place.queue_url(name)


def queue_arn(name: str, *, place: Place = LOCAL_PLACE) -> str:
    return place.queue_arn(name)


def parameter_arn(name: str, *, place: Place = LOCAL_PLACE) -> str:
    """An SSM parameter's (or a path's) ARN (:meth:`Place.parameter_arn`)."""
    return place.parameter_arn(name)


def bucket_arn(name: str) -> str:
    return f"arn:aws:s3:::{name}"


def table_arn(name: str, *, place: Place = LOCAL_PLACE) -> str:
    return place.table_arn(name)


def log_group_arn(name: str, *, place: Place = LOCAL_PLACE) -> str:
    """A log group's ARN without the ``:*`` its CloudFormation ``Arn`` attribute carries."""
    return place.log_group_arn(name)


def role_arn(name: str, *, place: Place = LOCAL_PLACE) -> str:
    return place.role_arn(name)


def load_template(
    path: str | Path,
    *,
    parameters: Mapping[str, str] | None = None,
    route_settings: Mapping[str, Mapping[str, Any]] | None = None,
    stack_name: str = STACK_NAME,
    place: Place = LOCAL_PLACE,
) -> LocalTemplate:
    """Read and resolve ``path`` for a stack in ``place``. Raises :class:`TemplateError` naming what
    cannot be run locally. ``route_settings``: see :func:`apply_route_settings`."""
    template_path = Path(path)
    try:
        text = template_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"cannot read template {str(template_path)!r}: {exc.strerror}") from None
    data = parse_template_text(text, source=str(template_path))
    if route_settings:
        data = apply_route_settings(data, route_settings, source=str(template_path))
    resolved = resolve_template(
        data,
        base_dir=template_path.parent,
        path=template_path,
        parameters=parameters,
        stack_name=stack_name,
        place=place,
    )
    return dataclasses.replace(resolved, route_settings={k: dict(v) for k, v in (route_settings or {}).items()})


#: A route's settings that are timings (its function's Timeout, its queue's VisibilityTimeout).
ROUTE_TIMING_KEYS = ("Timeout", "VisibilityTimeout")


def apply_route_settings(
    data: Mapping[str, Any], route_settings: Mapping[str, Mapping[str, Any]], *, source: str = "template"
) -> dict[str, Any]:
    """A copy of the parsed template ``data`` whose ``Mappings.Routes`` lines have ``route_settings``
    ({route: {setting: value}}) merged in: a test's or the demo's shorter timings for a route that
    sets its own (a route's settings live in its line, not in parameters). A departure from the
    template, like a parameter override; a route the template does not have is a TemplateError."""
    routes = (data.get("Mappings") or {}).get("Routes")
    if not isinstance(routes, dict):
        raise TemplateError(f"{source}: route settings given, but the template has no Mappings.Routes")
    unknown = sorted(set(route_settings) - set(routes))
    if unknown:
        raise TemplateError(f"{source}: route settings for {', '.join(unknown)}: Mappings.Routes has no such route")
    merged = {name: {**(line or {}), **dict(route_settings.get(name, {}))} for name, line in routes.items()}
    return {**data, "Mappings": {**data["Mappings"], "Routes": merged}}


def route_timing_settings(path: str | Path, *, timeout: int, visibility: int) -> dict[str, dict[str, int]]:
    """Route settings (:func:`apply_route_settings`) giving every route of ``path`` whose line sets
    its own Timeout or VisibilityTimeout these two instead: with the parameters HandlerTimeout and
    JobQueueVisibilityTimeout (the other routes'), every job queue of the template test-sized."""
    template_path = Path(path)
    data = parse_template_text(template_path.read_text(encoding="utf-8"), source=str(template_path))
    routes = (data.get("Mappings") or {}).get("Routes") or {}
    return {
        name: {"Timeout": timeout, "VisibilityTimeout": visibility}
        for name, line in routes.items()
        if isinstance(line, dict) and any(key in line for key in ROUTE_TIMING_KEYS)
    }


def resolve_template(
    data: Mapping[str, Any],
    *,
    base_dir: Path,
    path: Path | None = None,
    parameters: Mapping[str, str] | None = None,
    stack_name: str = STACK_NAME,
    place: Place = LOCAL_PLACE,
) -> LocalTemplate:
    """Resolve an already parsed template (``load_template`` without the file)."""
    return _Resolver(data, base_dir=base_dir, parameters=parameters or {}, stack_name=stack_name, place=place).build(
        path or base_dir / "template.yaml"
    )


def intrinsic_resolver(
    data: Mapping[str, Any],
    *,
    parameters: Mapping[str, str] | None = None,
    stack_name: str = STACK_NAME,
    place: Place = LOCAL_PLACE,
) -> Any:
    """A function ``(value, where) -> value`` evaluating the intrinsic functions in ``value`` against
    ``data`` (a parsed template, e.g. SAM's translation of one) with local mode's names and ARNs.

    ``where`` names the property in errors. Used to resolve IAM statements (workerless_devkit.local.iam).
    """
    return _Resolver(data, base_dir=Path("."), parameters=parameters or {}, stack_name=stack_name, place=place).resolve


def stack_resolver(
    data: Mapping[str, Any],
    *,
    parameters: Mapping[str, str],
    stack_name: str,
    physical_ids: Mapping[str, str],
    place: Place = LOCAL_PLACE,
) -> Any:
    """:func:`intrinsic_resolver` for a template a stack was created from (no language extensions
    left): a resource's name is its physical id in that stack (``physical_ids``: logical id ->
    physical id as ListStackResources gives it), not local mode's ``{stack}-{LogicalId}``."""
    return _Resolver(
        data,
        base_dir=Path("."),
        parameters=parameters,
        stack_name=stack_name,
        expand=False,
        physical_ids=physical_ids,
        place=place,
    ).resolve


# --------------------------------------------------------------------------------------------------
# Resolution


_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")
_RATE_UNIT_SECONDS = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400}


def rate_seconds(expression: str) -> float | None:
    """Seconds between runs of ``rate(N unit)``; None for ``cron(...)`` and anything else."""
    found = _RATE.match(expression.strip())
    if not found:
        return None
    return float(int(found.group(1)) * _RATE_UNIT_SECONDS[found.group(2)])


class _Resolver:
    def __init__(
        self,
        data: Mapping[str, Any],
        *,
        base_dir: Path,
        parameters: Mapping[str, str],
        stack_name: str,
        expand: bool = True,
        physical_ids: Mapping[str, str] | None = None,
        place: Place = LOCAL_PLACE,
    ):
        self.base_dir = base_dir
        self.stack_name = stack_name
        self.place = place
        self.physical_ids = dict(physical_ids or {})
        self.unset: list[str] = []
        self.params = self._parameters(data.get("Parameters") or {}, parameters)
        # CloudFormation expands AWS::LanguageExtensions (Fn::ForEach, ...) before anything else.
        if expand:
            try:
                data = expand_language_extensions(data, self.params, pseudo=place.pseudo_parameters())
            except ExtensionError as exc:
                raise TemplateError(str(exc)) from None
        self.data = data
        resources = data.get("Resources")
        if not isinstance(resources, dict) or not resources:
            raise TemplateError("the template has no Resources")
        self.resources: dict[str, Any] = resources
        for logical_id, resource in resources.items():
            if not isinstance(resource, dict) or not isinstance(resource.get("Type"), str):
                raise TemplateError(f"resource {logical_id} has no Type")
        self.mappings: dict[str, Any] = data.get("Mappings") or {}
        self.condition_defs: dict[str, Any] = data.get("Conditions") or {}
        self.condition_values: dict[str, bool] = {}

    # -- parameters and conditions --------------------------------------------------------------

    def _parameters(self, declared: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
        unknown = sorted(set(overrides) - set(declared))
        if unknown:
            raise TemplateError(f"parameter override for {', '.join(unknown)}: the template declares no such parameter")
        values: dict[str, Any] = {}
        for name, decl in declared.items():
            decl = decl if isinstance(decl, dict) else {}
            if name in overrides:
                value: Any = str(overrides[name])
                _check_override(name, value, decl)
            elif "Default" in decl:
                default = decl["Default"]
                value = _scalar_text(default) if not isinstance(default, list) else ",".join(map(str, default))
            else:
                self.unset.append(name)
                value = ""
            if str(decl.get("Type", "String")).startswith(("CommaDelimitedList", "List<")):
                value = [part.strip() for part in str(value).split(",")] if value != "" else []
            values[name] = value
        return values

    def condition(self, name: str, where: str) -> bool:
        if name not in self.condition_values:
            if name not in self.condition_defs:
                raise TemplateError(f"{where}: condition {name} is not defined in Conditions")
            self.condition_values[name] = False  # guards a condition that refers to itself
            self.condition_values[name] = bool(self.resolve(self.condition_defs[name], f"Conditions.{name}"))
        return self.condition_values[name]

    # -- references -----------------------------------------------------------------------------

    def physical_name(self, logical_id: str) -> str:
        physical = self.physical_ids.get(logical_id)
        if physical:
            # A created stack's: a queue's physical id is its URL, the rest are names.
            return physical.rsplit("/", 1)[-1] if physical.startswith("https://sqs.") else physical
        resource = self.resources[logical_id]
        props = resource.get("Properties") or {}
        rtype = resource["Type"]
        key = {
            QUEUE_TYPE: "QueueName",
            "AWS::DynamoDB::Table": "TableName",
            "AWS::Serverless::SimpleTable": "TableName",
            "AWS::Serverless::Function": "FunctionName",
            "AWS::Lambda::Function": "FunctionName",
            "AWS::Logs::LogGroup": "LogGroupName",
            "AWS::IAM::Role": "RoleName",
            BUCKET_TYPE: "BucketName",
            PARAMETER_TYPE: "Name",
        }.get(rtype)
        if key and props.get(key) is not None:
            return str(self.resolve(props[key], f"{logical_id}.{key}"))
        if rtype == QUEUE_TYPE and _truthy(props.get("FifoQueue")):
            return f"{self.stack_name}-{logical_id}.fifo"
        if rtype == BUCKET_TYPE:
            # CloudFormation names a bucket in lower case (S3 refuses upper case).
            return f"{self.stack_name}-{logical_id}".lower()
        return f"{self.stack_name}-{logical_id}"

    def ref(self, name: str, where: str) -> Any:
        place = self.place
        pseudo = {
            "AWS::Region": place.region,
            "AWS::AccountId": place.account_id,
            "AWS::StackName": self.stack_name,
            "AWS::StackId": place.stack_id(self.stack_name),
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NotificationARNs": [],
        }
        if name == "AWS::NoValue":
            return _NO_VALUE
        if name in pseudo:
            return pseudo[name]
        if name in self.params:
            return self.params[name]
        if name not in self.resources:
            raise TemplateError(f"{where}: !Ref {name} names neither a parameter nor a resource")
        rtype = self.resources[name]["Type"]
        physical = self.physical_name(name)
        if rtype == QUEUE_TYPE:
            return place.queue_url(physical)
        if rtype == "AWS::Serverless::LayerVersion":
            return place.layer_arn(physical)
        return physical

    def get_att(self, logical_id: str, attribute: str, where: str) -> Any:
        if logical_id not in self.resources:
            raise TemplateError(f"{where}: !GetAtt {logical_id}.{attribute} names no resource of the template")
        rtype = self.resources[logical_id]["Type"]
        physical = self.physical_name(logical_id)
        place = self.place
        table = place.table_arn(physical)
        function = place.function_arn(physical)
        known: dict[str, dict[str, Any]] = {
            # A log group's Arn attribute ends in ":*" (the group's streams), as CloudFormation's does.
            "AWS::Logs::LogGroup": {"Arn": f"{place.log_group_arn(physical)}:*"},
            "AWS::IAM::Role": {"Arn": place.role_arn(physical)},
            QUEUE_TYPE: {
                "Arn": place.queue_arn(physical),
                "QueueName": physical,
                "QueueUrl": place.queue_url(physical),
            },
            "AWS::DynamoDB::Table": {"Arn": table, "StreamArn": f"{table}/stream/local"},
            "AWS::Serverless::SimpleTable": {"Arn": table},
            BUCKET_TYPE: {"Arn": bucket_arn(physical), "DomainName": f"{physical}.s3.amazonaws.com"},
            "AWS::Serverless::Function": {"Arn": function},
            "AWS::Lambda::Function": {"Arn": function},
        }
        attributes = known.get(rtype, {})
        if attribute not in attributes:
            raise TemplateError(
                f"{where}: !GetAtt {logical_id}.{attribute} is not supported in local mode (resource type {rtype})"
            )
        return attributes[attribute]

    # -- intrinsic functions --------------------------------------------------------------------

    def resolve(self, value: Any, where: str) -> Any:
        """Evaluate every intrinsic function inside ``value``; ``where`` names the property for errors."""
        if isinstance(value, list):
            items = [self.resolve(item, where) for item in value]
            return [item for item in items if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref" or key.startswith("Fn::") or key == "Condition":
                return self._intrinsic(key, arg, where)
        resolved = {k: self.resolve(v, f"{where}.{k}") for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}

    def _intrinsic(self, name: str, arg: Any, where: str) -> Any:
        if name not in SUPPORTED_INTRINSICS:
            short = name.removeprefix("Fn::")
            raise TemplateError(
                f"{where}: intrinsic function {name} (!{short}) is not supported in local mode; "
                f"supported: {', '.join(SUPPORTED_INTRINSICS)}"
            )
        if name == "Ref":
            return self.ref(str(self.resolve(arg, where)), where)
        if name == "Condition":
            return self.condition(str(arg), where)
        if name == "Fn::GetAtt":
            parts = self.resolve(arg, where)
            if isinstance(parts, str):
                parts = parts.split(".", 1)
            if not isinstance(parts, list) or len(parts) != 2:
                raise TemplateError(f"{where}: !GetAtt needs Resource.Attribute")
            return self.get_att(str(parts[0]), str(parts[1]), where)
        if name == "Fn::Sub":
            return self._sub(arg, where)
        if name == "Fn::Join":
            args = self._args(name, arg, 2, where)
            items = self.resolve(args[1], where)
            if not isinstance(items, list):
                raise TemplateError(f"{where}: !Join needs a list of values")
            return str(args[0]).join(_scalar_text(item) for item in items)
        if name == "Fn::Select":
            args = self._args(name, arg, 2, where)
            index, items = int(self.resolve(args[0], where)), self.resolve(args[1], where)
            if not isinstance(items, list) or not 0 <= index < len(items):
                raise TemplateError(f"{where}: !Select index {index} is out of range")
            return items[index]
        if name == "Fn::Split":
            args = self._args(name, arg, 2, where)
            return str(self.resolve(args[1], where)).split(str(args[0]))
        if name == "Fn::If":
            args = self._args(name, arg, 3, where)
            chosen = args[1] if self.condition(str(args[0]), where) else args[2]
            return self.resolve(chosen, where)
        if name == "Fn::Equals":
            args = self._args(name, arg, 2, where)
            left, right = self.resolve(args[0], where), self.resolve(args[1], where)
            return _scalar_text(left) == _scalar_text(right)
        if name == "Fn::Not":
            args = self._args(name, arg, 1, where)
            return not bool(self.resolve(args[0], where))
        if name in ("Fn::And", "Fn::Or"):
            if not isinstance(arg, list) or not arg:
                raise TemplateError(f"{where}: {name} needs a list of conditions")
            results = [bool(self.resolve(item, where)) for item in arg]
            return all(results) if name == "Fn::And" else any(results)
        if name == "Fn::FindInMap":
            default = _NO_VALUE
            if isinstance(arg, list) and len(arg) == 4 and isinstance(arg[3], dict) and set(arg[3]) == {"DefaultValue"}:
                arg, default = arg[:3], arg[3]["DefaultValue"]
            args = [self.resolve(a, where) for a in self._args(name, arg, 3, where)]
            try:
                return self.mappings[_scalar_text(args[0])][_scalar_text(args[1])][_scalar_text(args[2])]
            except (KeyError, TypeError):
                if default is not _NO_VALUE:
                    return self.resolve(default, where)
                raise TemplateError(f"{where}: !FindInMap {args[0]}/{args[1]}/{args[2]} is not in Mappings") from None
        if name == "Fn::Length":
            items = self.resolve(arg, where)
            if not isinstance(items, list):
                raise TemplateError(f"{where}: !Length needs a list")
            return len(items)
        if name == "Fn::Base64":
            import base64

            return base64.b64encode(_scalar_text(self.resolve(arg, where)).encode()).decode()
        # Fn::ToJsonString (AWS::LanguageExtensions)
        return json.dumps(self.resolve(arg, where), separators=(",", ":"))

    @staticmethod
    def _args(name: str, arg: Any, count: int, where: str) -> list[Any]:
        if not isinstance(arg, list) or len(arg) != count:
            raise TemplateError(f"{where}: {name} takes a list of {count} arguments")
        return arg

    def _sub(self, arg: Any, where: str) -> str:
        variables: dict[str, Any] = {}
        if isinstance(arg, list):
            if len(arg) != 2 or not isinstance(arg[1], dict):
                raise TemplateError(f"{where}: !Sub takes a string or [string, {{variables}}]")
            text = arg[0]
            variables = {k: self.resolve(v, f"{where}.{k}") for k, v in arg[1].items()}
        else:
            text = arg
        if not isinstance(text, str):
            raise TemplateError(f"{where}: !Sub needs a string")

        def replace(found: re.Match[str]) -> str:
            inner = found.group(1)
            if inner.startswith("!"):
                return "${" + inner[1:] + "}"  # ${!Literal} is the escape for a literal ${Literal}
            name = inner.strip()
            if name in variables:
                return _scalar_text(variables[name])
            if "." in name and not name.startswith("AWS::"):
                resource, attribute = name.split(".", 1)
                if resource in self.resources:
                    return _scalar_text(self.get_att(resource, attribute, where))
            return _scalar_text(self.ref(name, where))

        return _SUB_VARIABLE.sub(replace, text)

    # -- resources ------------------------------------------------------------------------------

    def included(self, logical_id: str) -> bool:
        condition = self.resources[logical_id].get("Condition")
        return condition is None or self.condition(str(condition), logical_id)

    def build(self, path: Path) -> LocalTemplate:
        globals_function = ((self.data.get("Globals") or {}).get("Function")) or {}
        if not isinstance(globals_function, dict):
            raise TemplateError("Globals.Function must be a mapping")
        queues = [
            self._queue(lid, r.get("Properties") or {})
            for lid, r in self.resources.items()
            if r["Type"] == QUEUE_TYPE and self.included(lid)
        ]
        tables = [
            self._table(lid, r) for lid, r in self.resources.items() if r["Type"] in TABLE_TYPES and self.included(lid)
        ]
        buckets = [
            BucketSpec(lid, self.physical_name(lid))
            for lid, r in self.resources.items()
            if r["Type"] == BUCKET_TYPE and self.included(lid)
        ]
        ssm_parameters = [
            self._ssm_parameter(lid, r.get("Properties") or {})
            for lid, r in self.resources.items()
            if r["Type"] == PARAMETER_TYPE and self.included(lid)
        ]
        names = [p.name for p in ssm_parameters]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise TemplateError(f"two SSM parameters of the template are named {duplicate!r}")
        arn_to_queue = {q.arn: q.logical_id for q in queues}
        mappings = self._event_source_mappings(arn_to_queue)
        functions = []
        for lid, resource in self.resources.items():
            if resource["Type"] not in FUNCTION_TYPES or not self.included(lid):
                continue
            props = resource.get("Properties") or {}
            if resource["Type"] == "AWS::Serverless::Function":
                props = _merge_globals(globals_function, props)
            spec = self._function(lid, props, arn_to_queue)
            extra = [event for target, event in mappings if target in (spec.function_name, spec.arn)]
            if extra:
                spec = dataclasses.replace(spec, sqs_events=(*spec.sqs_events, *extra))
            functions.append(spec)
        known = {name for f in functions for name in (f.function_name, f.arn)}
        for target, event in mappings:
            if target not in known:
                raise TemplateError(f"{event.name}.FunctionName: {target!r} is not a function of this template")
        return LocalTemplate(
            path=path,
            parameters=dict(self.params),
            functions=tuple(functions),
            queues=tuple(queues),
            tables=tuple(tables),
            unset_parameters=tuple(self.unset),
            buckets=tuple(buckets),
            ssm_parameters=tuple(ssm_parameters),
            place=self.place,
        )

    def _ssm_parameter(self, lid: str, props: Mapping[str, Any]) -> ParameterSpec:
        """Refuse what CloudFormation (Parameter Store) would: a name or value outside its rules."""
        if "Name" not in props:
            # CloudFormation would generate a name; nothing in local mode could find it by path.
            raise TemplateError(f"{lid}: an SSM parameter needs a Name in local mode")
        name = _scalar_text(self.resolve(props["Name"], f"{lid}.Name"))
        value = _scalar_text(self.resolve(props.get("Value", ""), f"{lid}.Value"))
        kind = _scalar_text(self.resolve(props.get("Type", ""), f"{lid}.Type"))
        tier = _scalar_text(self.resolve(props.get("Tier", "Standard"), f"{lid}.Tier"))
        if kind not in ("String", "StringList"):
            raise TemplateError(
                f"{lid}.Type must be String or StringList (CloudFormation creates no SecureString), got {kind!r}"
            )
        if tier not in PARAMETER_VALUE_LIMITS:
            # Intelligent-Tiering picks Advanced only past 4 KB (a charge): local mode plans for Standard.
            raise TemplateError(f"{lid}.Tier must be Standard or Advanced in local mode, got {tier!r}")
        check_parameter_name(name, where=f"{lid}.Name")
        limit = PARAMETER_VALUE_LIMITS[tier]
        # Deployed, each generated name in it (a queue's URL) has CloudFormation's suffix as well.
        generated = len(re.findall(re.escape(f"{self.stack_name}-"), value, flags=re.IGNORECASE))
        size = len(value.encode("utf-8")) + generated * GENERATED_NAME_SUFFIX_BYTES
        if not value or size > limit:
            raise TemplateError(
                f"{lid}.Value would be {size} bytes deployed (stack {self.stack_name!r}); a {tier} parameter's "
                f"value is 1 to {limit} bytes (Parameter Store)"
            )
        return ParameterSpec(lid, name, value, kind, tier, place=self.place)

    def _check_environment_size(self, lid: str, environment: Mapping[str, str]) -> None:
        """Refuse what Lambda would: a function whose variables are over 4 KB once deployed."""
        text = json.dumps(environment, separators=(",", ":"), ensure_ascii=False)
        generated = len(re.findall(re.escape(f"{self.stack_name}-"), text, flags=re.IGNORECASE))
        size = len(text.encode("utf-8")) + generated * GENERATED_NAME_SUFFIX_BYTES
        if size > ENVIRONMENT_LIMIT_BYTES:
            largest = max(environment, key=lambda key: len(environment[key]))
            raise TemplateError(
                f"{lid}: its environment variables would be {size} bytes deployed (stack {self.stack_name!r}), "
                f"over Lambda's {ENVIRONMENT_LIMIT_BYTES}-byte limit; the largest is {largest} "
                f"({len(environment[largest])} bytes here)"
            )

    def _event_source_mappings(self, arn_to_queue: Mapping[str, str]) -> list[tuple[str, SqsEventSpec]]:
        """The template's own AWS::Lambda::EventSourceMapping resources: (function name or ARN, event)."""
        found: list[tuple[str, SqsEventSpec]] = []
        for lid, resource in self.resources.items():
            if resource["Type"] != "AWS::Lambda::EventSourceMapping" or not self.included(lid):
                continue
            props = self.resolve(resource.get("Properties") or {}, f"{lid}.Properties")
            source = str(props.get("EventSourceArn", ""))
            queue_id = arn_to_queue.get(source)
            if queue_id is None:
                raise TemplateError(f"{lid}.EventSourceArn: {source!r} is not a queue of this template")
            scaling = props.get("ScalingConfig") or {}
            concurrency = scaling.get("MaximumConcurrency")
            event = SqsEventSpec(
                name=lid,
                queue_id=queue_id,
                batch_size=_int(props.get("BatchSize", 10), f"{lid}.BatchSize"),
                batching_window_seconds=float(props.get("MaximumBatchingWindowInSeconds", 0) or 0),
                maximum_concurrency=_int(concurrency, f"{lid}.ScalingConfig") if concurrency else None,
                report_batch_item_failures="ReportBatchItemFailures" in (props.get("FunctionResponseTypes") or []),
                enabled=_truthy(props.get("Enabled", True)),
            )
            found.append((str(props.get("FunctionName", "")), event))
        return found

    def _queue(self, lid: str, props: Mapping[str, Any]) -> QueueSpec:
        def number(key: str, default: int | None) -> int | None:
            if key not in props:
                return default
            return _int(self.resolve(props[key], f"{lid}.{key}"), f"{lid}.{key}")

        dlq_id: str | None = None
        max_receive: int | None = None
        if "RedrivePolicy" in props:
            policy = self.resolve(props["RedrivePolicy"], f"{lid}.RedrivePolicy")
            if isinstance(policy, str):
                policy = json.loads(policy)
            if not isinstance(policy, dict):
                raise TemplateError(f"{lid}.RedrivePolicy must be a mapping")
            target = str(policy.get("deadLetterTargetArn", ""))
            dlq_id = next(
                (
                    q
                    for q, r in self.resources.items()
                    if r["Type"] == QUEUE_TYPE and self.place.queue_arn(self.physical_name(q)) == target
                ),
                None,
            )
            if dlq_id is None:
                raise TemplateError(f"{lid}.RedrivePolicy: deadLetterTargetArn is not a queue of this template")
            max_receive = _int(policy.get("maxReceiveCount", 10), f"{lid}.RedrivePolicy.maxReceiveCount")
        return QueueSpec(
            logical_id=lid,
            name=self.physical_name(lid),
            visibility_timeout=number("VisibilityTimeout", 30) or 0,
            delay_seconds=number("DelaySeconds", 0) or 0,
            message_retention_seconds=number("MessageRetentionPeriod", None),
            receive_wait_seconds=number("ReceiveMessageWaitTimeSeconds", None),
            maximum_message_size=number("MaximumMessageSize", 1_048_576) or 0,
            dead_letter_queue_id=dlq_id,
            max_receive_count=max_receive,
            fifo=_truthy(self.resolve(props.get("FifoQueue", False), f"{lid}.FifoQueue")),
            place=self.place,
        )

    def _table(self, lid: str, resource: Mapping[str, Any]) -> TableSpec:
        props = resource.get("Properties") or {}
        if resource["Type"] == "AWS::Serverless::SimpleTable":
            primary = self.resolve(props.get("PrimaryKey") or {"Name": "id", "Type": "String"}, f"{lid}.PrimaryKey")
            kind = {"String": "S", "Number": "N", "Binary": "B"}.get(str(primary.get("Type")), "S")
            return TableSpec(
                logical_id=lid,
                name=self.physical_name(lid),
                key_schema=({"AttributeName": str(primary["Name"]), "KeyType": "HASH"},),
                attribute_definitions=({"AttributeName": str(primary["Name"]), "AttributeType": kind},),
                place=self.place,
            )
        key_schema = self.resolve(props.get("KeySchema"), f"{lid}.KeySchema")
        attributes = self.resolve(props.get("AttributeDefinitions"), f"{lid}.AttributeDefinitions")
        if not isinstance(key_schema, list) or not key_schema or not isinstance(attributes, list):
            raise TemplateError(f"{lid}: a table needs KeySchema and AttributeDefinitions")
        ttl = self.resolve(props.get("TimeToLiveSpecification") or {}, f"{lid}.TimeToLiveSpecification")
        ttl_attribute = str(ttl["AttributeName"]) if ttl.get("AttributeName") and _truthy(ttl.get("Enabled")) else None
        indexes = self.resolve(props.get("GlobalSecondaryIndexes") or [], f"{lid}.GlobalSecondaryIndexes")
        return TableSpec(
            logical_id=lid,
            name=self.physical_name(lid),
            key_schema=tuple({str(k): str(v) for k, v in item.items()} for item in key_schema),
            attribute_definitions=tuple({str(k): str(v) for k, v in item.items()} for item in attributes),
            ttl_attribute=ttl_attribute,
            global_secondary_indexes=tuple(indexes),
            place=self.place,
        )

    def _function(self, lid: str, props: Mapping[str, Any], arn_to_queue: Mapping[str, str]) -> FunctionSpec:
        def prop(key: str, default: Any = None) -> Any:
            if key not in props:
                return default
            value = self.resolve(props[key], f"{lid}.{key}")
            # !If [cond, x, !Ref AWS::NoValue]: the property is absent.
            return default if value is _NO_VALUE else value

        code_uri = prop("CodeUri")
        handler = prop("Handler")
        if not isinstance(code_uri, str) or not code_uri:
            raise TemplateError(f"{lid}: CodeUri must be a local directory (inline or S3 code cannot run locally)")
        if not isinstance(handler, str) or "." not in handler:
            raise TemplateError(f"{lid}: Handler must be module.function, got {handler!r}")
        env_block = prop("Environment") or {}
        variables = env_block.get("Variables") or {} if isinstance(env_block, dict) else {}
        environment = {str(k): _scalar_text(v) for k, v in variables.items()}
        self._check_environment_size(lid, environment)
        recursive = str(prop("RecursiveLoop", "Terminate"))
        if recursive not in ("Allow", "Terminate"):
            raise TemplateError(f"{lid}.RecursiveLoop must be Allow or Terminate, got {recursive!r}")
        log_format, application_level, system_level = logging_config(prop("LoggingConfig") or {}, lid)
        sqs_events: list[SqsEventSpec] = []
        schedules: list[ScheduleEventSpec] = []
        ignored: list[str] = []
        events = props.get("Events") or {}
        for event_name, event in events.items():
            where = f"{lid}.Events.{event_name}"
            if not isinstance(event, dict):
                raise TemplateError(f"{where} must be a mapping")
            etype = event.get("Type")
            eprops = self.resolve(event.get("Properties") or {}, f"{where}.Properties")
            if etype == "SQS":
                queue = eprops.get("Queue")
                queue_id = arn_to_queue.get(str(queue))
                if queue_id is None:
                    raise TemplateError(f"{where}: Queue {queue!r} is not a queue of this template")
                scaling = eprops.get("ScalingConfig") or {}
                concurrency = scaling.get("MaximumConcurrency")
                sqs_events.append(
                    SqsEventSpec(
                        name=event_name,
                        queue_id=queue_id,
                        batch_size=_int(eprops.get("BatchSize", 10), f"{where}.BatchSize"),
                        batching_window_seconds=float(eprops.get("MaximumBatchingWindowInSeconds", 0) or 0),
                        maximum_concurrency=_int(concurrency, f"{where}.ScalingConfig") if concurrency else None,
                        report_batch_item_failures="ReportBatchItemFailures"
                        in (eprops.get("FunctionResponseTypes") or []),
                        enabled=_truthy(eprops.get("Enabled", True)),
                    )
                )
            elif etype in ("Schedule", "ScheduleV2"):
                expression = str(eprops.get("Schedule") or eprops.get("ScheduleExpression") or "")
                if not expression:
                    raise TemplateError(f"{where}: a schedule needs a Schedule expression")
                enabled = _truthy(eprops.get("Enabled", True)) and str(eprops.get("State", "ENABLED")) == "ENABLED"
                payload = eprops.get("Input")
                schedules.append(
                    ScheduleEventSpec(
                        name=event_name,
                        expression=expression,
                        seconds=rate_seconds(expression),
                        enabled=enabled,
                        input=json.loads(payload) if isinstance(payload, str) else payload,
                    )
                )
            else:
                ignored.append(f"{event_name} ({etype})")
        role = prop("Role")
        reserved = prop("ReservedConcurrentExecutions")
        invoke_config = prop("EventInvokeConfig") or {}
        if not isinstance(invoke_config, dict):
            raise TemplateError(f"{lid}.EventInvokeConfig must be a mapping")
        return FunctionSpec(
            role=None if role is None else str(role),
            reserved_concurrency=None if reserved is None else _int(reserved, f"{lid}.ReservedConcurrentExecutions"),
            maximum_event_age=_int(
                invoke_config.get("MaximumEventAgeInSeconds", 21600),
                f"{lid}.EventInvokeConfig.MaximumEventAgeInSeconds",
            ),
            logical_id=lid,
            function_name=self.physical_name(lid),
            code_dir=(self.base_dir / code_uri).resolve(),
            handler=handler,
            timeout=_int(prop("Timeout", 3), f"{lid}.Timeout"),
            memory_size=_int(prop("MemorySize", 128), f"{lid}.MemorySize"),
            environment=environment,
            recursive_loop=recursive,
            log_format=log_format,
            application_log_level=application_level,
            system_log_level=system_level,
            sqs_events=tuple(sqs_events),
            schedule_events=tuple(schedules),
            ignored_events=tuple(ignored),
            place=self.place,
        )


#: Lambda's LoggingConfig values (Lambda API reference, LoggingConfig).
APPLICATION_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
SYSTEM_LOG_LEVELS = ("DEBUG", "INFO", "WARN")
_LOGGING_KEYS = frozenset({"LogFormat", "ApplicationLogLevel", "SystemLogLevel", "LogGroup"})


def logging_config(config: Any, lid: str) -> tuple[str, str | None, str | None]:
    """A function's LoggingConfig checked as Lambda checks it: its format, application and system
    levels. Lambda filters by level only in the JSON format and refuses a level with Text."""
    where = f"{lid}.LoggingConfig"
    if not isinstance(config, dict):
        raise TemplateError(f"{where} must be a mapping")
    unknown = sorted(set(config) - _LOGGING_KEYS)
    if unknown:
        raise TemplateError(
            f"{where}: unknown key(s) {', '.join(unknown)} (Lambda knows {', '.join(sorted(_LOGGING_KEYS))})"
        )
    log_format = str(config.get("LogFormat", "Text"))
    if log_format not in ("Text", "JSON"):
        raise TemplateError(f"{where}.LogFormat must be Text or JSON, got {log_format!r}")
    levels: list[str | None] = []
    for key, allowed in (("ApplicationLogLevel", APPLICATION_LOG_LEVELS), ("SystemLogLevel", SYSTEM_LOG_LEVELS)):
        value = config.get(key)
        if value is None:
            levels.append(None)
            continue
        if str(value) not in allowed:
            raise TemplateError(f"{where}.{key} must be one of {', '.join(allowed)}, got {value!r}")
        if log_format != "JSON":
            raise TemplateError(f"{where}.{key} needs LogFormat JSON (Lambda filters log levels only in JSON)")
        levels.append(str(value))
    return log_format, levels[0], levels[1]


def check_parameter_name(name: str, *, where: str) -> None:
    """Raise TemplateError for a name Parameter Store refuses (PutParameter's naming constraints)."""
    levels = [part for part in name.split("/") if part]
    problem = None
    if not _PARAMETER_NAME.fullmatch(name):
        problem = "only a-zA-Z0-9_.- and / between levels are allowed"
    elif len(name) > PARAMETER_NAME_LIMIT:
        problem = f"it is {len(name)} characters, over {PARAMETER_NAME_LIMIT}"
    elif "/" in name and not name.startswith("/"):
        problem = "a name in a hierarchy begins with /"
    elif "//" in name or name.endswith("/") or not levels:
        problem = "a level of the hierarchy is empty"
    elif len(levels) > PARAMETER_MAX_LEVELS:
        problem = f"it has {len(levels)} levels, over {PARAMETER_MAX_LEVELS}"
    elif levels[0].lower().startswith(("aws", "ssm")):
        problem = "a name cannot begin with aws or ssm"
    if problem is not None:
        raise TemplateError(f"{where}: SSM parameter name {name!r} is not valid: {problem}")


def _check_override(name: str, value: str, decl: Mapping[str, Any]) -> None:
    """The checks CloudFormation applies to a parameter value (AllowedValues, pattern, range)."""
    allowed = decl.get("AllowedValues")
    if isinstance(allowed, list) and value not in [_scalar_text(a) for a in allowed]:
        raise TemplateError(f"parameter {name}: {value!r} is not one of {', '.join(_scalar_text(a) for a in allowed)}")
    pattern = decl.get("AllowedPattern")
    if isinstance(pattern, str) and re.fullmatch(pattern, value) is None:
        hint = decl.get("ConstraintDescription") or f"it must match {pattern}"
        raise TemplateError(f"parameter {name}: the value does not match its AllowedPattern ({hint})")
    if str(decl.get("Type", "String")) == "Number":
        try:
            number = float(value)
        except ValueError:
            raise TemplateError(f"parameter {name}: {value!r} is not a number") from None
        low, high = decl.get("MinValue"), decl.get("MaxValue")
        if (low is not None and number < float(low)) or (high is not None and number > float(high)):
            raise TemplateError(
                f"parameter {name}: {value} is outside {low if low is not None else '-inf'}.."
                f"{high if high is not None else 'inf'}"
            )


def _merge_globals(globals_value: Any, own: Any) -> Any:
    """SAM's Globals rule: maps merge (the function's keys win), lists append, scalars: the function's."""
    if _is_intrinsic(globals_value) or _is_intrinsic(own):
        return own  # SAM treats an intrinsic function as a scalar: the function's own value wins
    if isinstance(globals_value, dict) and isinstance(own, dict):
        merged = dict(globals_value)
        for key, value in own.items():
            merged[key] = _merge_globals(globals_value[key], value) if key in globals_value else value
        return merged
    if isinstance(globals_value, list) and isinstance(own, list):
        return [*globals_value, *own]
    return own


def _is_intrinsic(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    (key,) = value
    return key in ("Ref", "Condition") or str(key).startswith("Fn::")


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def _int(value: Any, where: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise TemplateError(f"{where} must be a whole number, got {value!r}") from None
