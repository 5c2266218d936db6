"""What local mode runs: a template's resources as local mode resolves them (the resource models).

:class:`LocalTemplate` holds the functions (:class:`FunctionSpec`, with their SQS and Schedule events),
queues, tables, buckets and SSM parameters of a template or of a created stack; :class:`Place` is
the account and region they run in, from which every ARN and queue URL is made. Reading a template
into these: :mod:`workerless_devkit.local.template`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workerless.errors import ConfigurationError

#: Where local mode runs template.yaml: moto's default account, in us-east-1. A rehearsal bundle's
#: stack runs where its bundle.json says (:class:`Place`).
REGION = "us-east-1"
ACCOUNT_ID = "123456789012"
STACK_NAME = "workerless-local"

#: The resource types local mode runs.
QUEUE_TYPE = "AWS::SQS::Queue"
BUCKET_TYPE = "AWS::S3::Bucket"
PARAMETER_TYPE = "AWS::SSM::Parameter"
TABLE_TYPES = ("AWS::DynamoDB::Table", "AWS::Serverless::SimpleTable")
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")


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
