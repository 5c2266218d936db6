"""Read a created stack back into local mode's model, through the same boto3 calls as on AWS.

Every value comes from the stack as the embedded AWS answers for it (Lambda's function
configuration and event source mappings, SQS's queue attributes, DynamoDB's table, Parameter
Store, IAM's roles and their policies, EventBridge's rules and targets), except what moto's
CloudFormation does not model; that is read from transformed.json, the template CloudFormation
would receive (never from the devkit's own reading of template.yaml), with the stack's own
physical names:

- a function's RecursiveLoop, LoggingConfig and Layers (moto keeps none of them);
- an event source mapping's MaximumBatchingWindowInSeconds when moto does not answer it;
- the table's TimeToLiveSpecification (moto's CloudFormation does not apply it: applied here with
  UpdateTimeToLive, so DescribeTimeToLive answers as on AWS);
- a schedule rule's targets when moto lists none.

Two answers of moto are corrected towards AWS: a function's environment values are strings (moto
returns a Number parameter's value as a number), and a role's inline policy created by the stack is
a JSON document (moto returns the Python text of the dict).
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workerless_devkit.local.iam.managed import managed_policy
from workerless_devkit.local.iam.policy import PolicyError, Statement, parse_statements
from workerless_devkit.local.iam.roles import FunctionRole
from workerless_devkit.local.stack.bundle import Bundle, BundleError
from workerless_devkit.local.stack.code import check_layer, extract_code, fetch, s3_location
from workerless_devkit.local.stack.create import CreatedStack
from workerless_devkit.local.template import (
    BucketSpec,
    FunctionSpec,
    LocalTemplate,
    ParameterSpec,
    QueueSpec,
    ScheduleEventSpec,
    SqsEventSpec,
    TableSpec,
    logging_config,
    rate_seconds,
    stack_resolver,
)

log = logging.getLogger("workerless_devkit.local")

QUEUE = "AWS::SQS::Queue"
TABLE = "AWS::DynamoDB::Table"
BUCKET = "AWS::S3::Bucket"
PARAMETER = "AWS::SSM::Parameter"
FUNCTION = "AWS::Lambda::Function"
MAPPING = "AWS::Lambda::EventSourceMapping"
RULE = "AWS::Events::Rule"
ROLE = "AWS::IAM::Role"
LOG_GROUP = "AWS::Logs::LogGroup"
LAYER = "AWS::Lambda::LayerVersion"


@dataclass(frozen=True, slots=True)
class StackView:
    """What a created stack runs, in local mode's model."""

    template: LocalTemplate
    #: Each function's role as created in IAM, by function logical id.
    roles: dict[str, FunctionRole]
    created: CreatedStack
    #: Each layer checked against the imported runtime: logical id -> .py files compared.
    layers: dict[str, int] = field(default_factory=dict)
    #: What was read from transformed.json because moto's CloudFormation does not keep it.
    from_template: tuple[str, ...] = ()


def read_stack(bundle: Bundle, created: CreatedStack, session: Any, code_root: Path) -> StackView:
    """The stack ``created`` as local mode's model; each function's code extracted under ``code_root``."""
    return _Reader(bundle, created, session, code_root).read()


class _Reader:
    def __init__(self, bundle: Bundle, created: CreatedStack, session: Any, code_root: Path) -> None:
        self.bundle = bundle
        self.created = created
        self.code_root = code_root
        self.transformed = bundle.transformed()
        self.resources: Mapping[str, Any] = self.transformed.get("Resources") or {}
        #: Where the stack is: every spec read carries it (its ARNs, its queue URLs).
        self.place = bundle.place
        self.resolve = stack_resolver(
            self.transformed,
            parameters=created.parameters,
            stack_name=created.stack_name,
            physical_ids=created.physical_ids(),
            place=self.place,
        )
        self.session = session
        self.s3 = session.client("s3")
        self.sqs = session.client("sqs")
        self.lam = session.client("lambda")
        self.iam = session.client("iam")
        self.notes: list[str] = []

    def props(self, logical_id: str) -> dict[str, Any]:
        props = (self.resources.get(logical_id) or {}).get("Properties") or {}
        return dict(props)

    def read(self) -> StackView:
        queues = [self.queue(r.logical_id, r.physical_id) for r in self.created.of_type(QUEUE)]
        by_arn = {q.arn: q.logical_id for q in queues}
        queues = [_with_dead_letter_id(q, by_arn) for q in queues]
        functions = [self.function(r.logical_id, r.physical_id, by_arn) for r in self.created.of_type(FUNCTION)]
        layers = self.check_layers()
        template = LocalTemplate(
            path=self.bundle.transformed_path,
            parameters=dict(self.created.parameters),
            functions=tuple(functions),
            queues=tuple(queues),
            tables=tuple(self.table(r.logical_id, r.physical_id) for r in self.created.of_type(TABLE)),
            buckets=tuple(self.bucket(r.logical_id, r.physical_id) for r in self.created.of_type(BUCKET)),
            ssm_parameters=tuple(self.parameter(r.logical_id, r.physical_id) for r in self.created.of_type(PARAMETER)),
            source="stack",
            place=self.place,
        )
        roles = {f.logical_id: self.role(f) for f in functions}
        return StackView(template, roles, self.created, layers, tuple(dict.fromkeys(self.notes)))

    # -- queues, table, bucket, parameters --------------------------------------------------------

    def queue(self, logical_id: str, url: str) -> QueueSpec:
        attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        redrive = json.loads(attributes["RedrivePolicy"]) if attributes.get("RedrivePolicy") else {}

        def number(name: str) -> int | None:
            return int(attributes[name]) if name in attributes else None

        return QueueSpec(
            logical_id=logical_id,
            name=url.rsplit("/", 1)[-1],
            visibility_timeout=number("VisibilityTimeout") or 0,
            delay_seconds=number("DelaySeconds") or 0,
            message_retention_seconds=number("MessageRetentionPeriod"),
            receive_wait_seconds=number("ReceiveMessageWaitTimeSeconds"),
            # The target's logical id is filled in once every queue is known (_with_dead_letter_id).
            dead_letter_queue_id=str(redrive["deadLetterTargetArn"]) if redrive else None,
            max_receive_count=int(redrive["maxReceiveCount"]) if redrive else None,
            fifo=attributes.get("FifoQueue") == "true",
            maximum_message_size=number("MaximumMessageSize") or 0,
            place=self.place,
        )

    def table(self, logical_id: str, name: str) -> TableSpec:
        dynamodb = self.session.client("dynamodb")
        table = dynamodb.describe_table(TableName=name)["Table"]
        ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        attribute = ttl.get("AttributeName") if ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING") else None
        declared = self.resolve(self.props(logical_id).get("TimeToLiveSpecification") or {}, f"{logical_id}.TTL")
        if attribute is None and declared.get("AttributeName") and str(declared.get("Enabled")).lower() == "true":
            # moto's CloudFormation does not apply it; CloudFormation does.
            attribute = str(declared["AttributeName"])
            dynamodb.update_time_to_live(
                TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": attribute}
            )
            self.notes.append(f"{TABLE} TimeToLiveSpecification")
        return TableSpec(
            logical_id=logical_id,
            name=name,
            key_schema=tuple(dict(k) for k in table["KeySchema"]),
            attribute_definitions=tuple(dict(a) for a in table["AttributeDefinitions"]),
            ttl_attribute=attribute,
            global_secondary_indexes=tuple(dict(i) for i in table.get("GlobalSecondaryIndexes") or []),
            place=self.place,
        )

    def bucket(self, logical_id: str, name: str) -> BucketSpec:
        self.s3.head_bucket(Bucket=name)  # it exists (an error names the bucket otherwise)
        return BucketSpec(logical_id, name)

    def parameter(self, logical_id: str, name: str) -> ParameterSpec:
        ssm = self.session.client("ssm")
        found = ssm.get_parameter(Name=name)["Parameter"]
        described = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [name]}]).get("Parameters")
        tier = str((described or [{}])[0].get("Tier") or "Standard")
        _check_resolved([str(found["Value"])], f"SSM parameter {logical_id} ({name})")
        return ParameterSpec(
            logical_id, name, str(found["Value"]), str(found.get("Type", "String")), tier, place=self.place
        )

    # -- functions --------------------------------------------------------------------------------

    def function(self, logical_id: str, name: str, queue_by_arn: Mapping[str, str]) -> FunctionSpec:
        config = self.lam.get_function_configuration(FunctionName=name)
        props = self.props(logical_id)

        def from_template(key: str, default: Any) -> Any:
            if key not in props:
                return default
            self.notes.append(f"{FUNCTION} {key}")
            return self.resolve(props[key], f"{logical_id}.{key}")

        variables = (config.get("Environment") or {}).get("Variables") or {}
        _check_resolved([_text(v) for v in variables.values()], f"{logical_id}'s environment")
        recursive = str(config.get("RecursiveLoop") or from_template("RecursiveLoop", "Terminate"))
        log_format, application_level, system_level = logging_config(
            config.get("LoggingConfig") or from_template("LoggingConfig", {}), logical_id
        )
        bucket, key = s3_location(self.resolve(props.get("Code"), f"{logical_id}.Code"), f"{logical_id}.Code")
        code_dir = extract_code(fetch(self.s3, bucket, key, logical_id), self.code_root / logical_id, logical_id)
        return FunctionSpec(
            logical_id=logical_id,
            function_name=name,
            code_dir=code_dir,
            handler=str(config["Handler"]),
            timeout=int(config["Timeout"]),
            memory_size=int(config["MemorySize"]),
            reserved_concurrency=_reserved(from_template("ReservedConcurrentExecutions", None), logical_id),
            environment={str(k): _text(v) for k, v in variables.items()},
            recursive_loop=recursive,
            log_format=log_format,
            application_log_level=application_level,
            system_log_level=system_level,
            sqs_events=tuple(self.sqs_events(logical_id, str(config["FunctionArn"]), queue_by_arn)),
            schedule_events=tuple(self.schedules(logical_id, str(config["FunctionArn"]))),
            role=str(config["Role"]),
            place=self.place,
        )

    def sqs_events(self, function_id: str, function_arn: str, queue_by_arn: Mapping[str, str]) -> list[SqsEventSpec]:
        by_uuid = {r.physical_id: r.logical_id for r in self.created.of_type(MAPPING)}
        events: list[SqsEventSpec] = []
        for page in self.lam.get_paginator("list_event_source_mappings").paginate():
            for mapping in page.get("EventSourceMappings") or []:
                if str(mapping.get("FunctionArn")) != function_arn:
                    continue
                source = str(mapping.get("EventSourceArn", ""))
                queue_id = queue_by_arn.get(source)
                mapping_id = by_uuid.get(str(mapping["UUID"]), str(mapping["UUID"]))
                if queue_id is None:
                    log.info("%s: event source %s (%s) is not emulated locally", function_id, mapping_id, source)
                    continue
                window = mapping.get("MaximumBatchingWindowInSeconds")
                if window is None:
                    declared = self.props(mapping_id).get("MaximumBatchingWindowInSeconds")
                    if declared is not None:
                        self.notes.append(f"{MAPPING} MaximumBatchingWindowInSeconds")
                    window = self.resolve(declared, f"{mapping_id}.MaximumBatchingWindowInSeconds") or 0
                concurrency = (mapping.get("ScalingConfig") or {}).get("MaximumConcurrency")
                events.append(
                    SqsEventSpec(
                        name=mapping_id.removeprefix(function_id) or mapping_id,
                        queue_id=queue_id,
                        batch_size=int(mapping.get("BatchSize") or 10),
                        batching_window_seconds=float(window),
                        maximum_concurrency=int(concurrency) if concurrency else None,
                        report_batch_item_failures="ReportBatchItemFailures"
                        in (mapping.get("FunctionResponseTypes") or []),
                        enabled=str(mapping.get("State", "Enabled")) in ("Enabled", "Enabling", "Creating"),
                    )
                )
        return sorted(events, key=lambda e: e.name)

    def schedules(self, function_id: str, function_arn: str) -> list[ScheduleEventSpec]:
        events = self.session.client("events")
        found: list[ScheduleEventSpec] = []
        for rule in self.created.of_type(RULE):
            described = events.describe_rule(Name=rule.physical_id)
            expression = str(described.get("ScheduleExpression") or "")
            if not expression:
                continue
            targets = events.list_targets_by_rule(Rule=rule.physical_id).get("Targets") or []
            if not targets:
                targets = self.resolve(self.props(rule.logical_id).get("Targets") or [], f"{rule.logical_id}.Targets")
                if targets:
                    self.notes.append(f"{RULE} Targets")
            for target in targets:
                if str(target.get("Arn")) != function_arn:
                    continue
                payload = target.get("Input")
                found.append(
                    ScheduleEventSpec(
                        name=rule.logical_id.removeprefix(function_id) or rule.logical_id,
                        expression=expression,
                        seconds=rate_seconds(expression),
                        enabled=str(described.get("State", "ENABLED")) == "ENABLED",
                        input=json.loads(payload) if isinstance(payload, str) else payload,
                    )
                )
        return sorted(found, key=lambda e: e.name)

    def check_layers(self) -> dict[str, int]:
        """Every layer a function of the stack names: its own LayerVersion's zip checked against the
        imported runtime (moto's functions keep no Layers: they are read from transformed.json)."""
        checked: dict[str, int] = {}
        for function in self.created.of_type(FUNCTION):
            for index, layer in enumerate(self.props(function.logical_id).get("Layers") or []):
                self.notes.append(f"{FUNCTION} Layers")
                target = layer.get("Ref") if isinstance(layer, dict) and set(layer) == {"Ref"} else None
                if target is None or (self.resources.get(target) or {}).get("Type") != LAYER:
                    log.warning(
                        "%s.Layers[%d]: %r is not a layer of this stack: its code is not checked against the "
                        "runtime this process runs",
                        function.logical_id,
                        index,
                        layer,
                    )
                    continue
                if target in checked:
                    continue
                bucket, key = s3_location(self.resolve(self.props(target).get("Content"), target), f"{target}.Content")
                checked[target] = check_layer(fetch(self.s3, bucket, key, target), f"layer {target}")
        return checked

    # -- roles ------------------------------------------------------------------------------------

    def role(self, function: FunctionSpec) -> FunctionRole:
        arn = function.role or ""
        role_name = arn.rsplit("/", 1)[-1]
        role_ids = {r.physical_id: r.logical_id for r in self.created.of_type(ROLE)}
        role_id = role_ids.get(role_name)
        if role_id is None:
            raise BundleError(
                f"{function.logical_id}: its role {arn!r} is not a role of stack {self.created.stack_name!r}: local "
                "mode holds a function only to a role the stack creates"
            )
        statements: list[Statement] = []
        for page in self.iam.get_paginator("list_role_policies").paginate(RoleName=role_name):
            for policy_name in page.get("PolicyNames") or []:
                document = self.iam.get_role_policy(RoleName=role_name, PolicyName=policy_name)["PolicyDocument"]
                statements += _statements(document, f"{role_id}/{policy_name}")
        for page in self.iam.get_paginator("list_attached_role_policies").paginate(RoleName=role_name):
            for attached in page.get("AttachedPolicies") or []:
                statements += self.managed(str(attached["PolicyArn"]), f"{role_id} attached")
        for statement in statements:
            _check_resolved(statement.resources + statement.not_resources, f"role {role_id} ({statement.source})")
        role = self.iam.get_role(RoleName=role_name)["Role"]
        boundary_arn = (role.get("PermissionsBoundary") or {}).get("PermissionsBoundaryArn")
        log_group = self.log_group(function)
        log_groups = {r.physical_id for r in self.created.of_type(LOG_GROUP)}
        return FunctionRole(
            function_id=function.logical_id,
            function_name=function.function_name,
            role_id=role_id,
            role_name=role_name,
            statements=tuple(statements),
            log_group=log_group,
            log_group_in_template=log_group in log_groups,
            boundary=None if boundary_arn is None else self.managed(str(boundary_arn), f"{role_id} boundary"),
            generated=function.logical_id in self.generated_roles(),
            place=self.place,
        )

    def managed(self, arn: str, where: str) -> tuple[Statement, ...]:
        try:
            policy = self.iam.get_policy(PolicyArn=arn)["Policy"]
            version = self.iam.get_policy_version(PolicyArn=arn, VersionId=policy["DefaultVersionId"])
            document: Any = version["PolicyVersion"]["Document"]
        except self.iam.exceptions.NoSuchEntityException:
            document = managed_policy(arn)  # an AWS managed policy moto does not hold: the bundled copy
            if document is None:
                raise BundleError(
                    f"{where}: managed policy {arn!r} is neither in IAM nor one local mode knows"
                ) from None
        return _statements(document, arn.rsplit("/", 1)[-1])

    def log_group(self, function: FunctionSpec) -> str:
        props = self.props(function.logical_id)
        config = self.resolve(props.get("LoggingConfig") or {}, f"{function.logical_id}.LoggingConfig")
        return str(config.get("LogGroup") or f"/aws/lambda/{function.function_name}")

    def generated_roles(self) -> set[str]:
        """Functions whose role SAM generated (no Role in expanded.json, before AWS::Serverless)."""
        if not self.bundle.expanded_path.is_file():
            return set()
        expanded = self.bundle.expanded()
        global_role = "Role" in ((expanded.get("Globals") or {}).get("Function") or {})
        return {
            lid
            for lid, r in (expanded.get("Resources") or {}).items()
            if r.get("Type") == "AWS::Serverless::Function"
            and not global_role
            and "Role" not in (r.get("Properties") or {})
        }


def _with_dead_letter_id(queue: QueueSpec, by_arn: Mapping[str, str]) -> QueueSpec:
    import dataclasses

    if queue.dead_letter_queue_id is None:
        return queue
    target = by_arn.get(queue.dead_letter_queue_id)
    if target is None:
        raise BundleError(
            f"{queue.logical_id}: its RedrivePolicy's deadLetterTargetArn {queue.dead_letter_queue_id!r} is not a "
            "queue of this stack"
        )
    return dataclasses.replace(queue, dead_letter_queue_id=target)


def _statements(document: Any, source: str) -> tuple[Statement, ...]:
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError:
            try:
                # moto returns an inline policy its CloudFormation created as the Python text of the dict.
                document = ast.literal_eval(document)
            except (ValueError, SyntaxError):
                raise BundleError(f"{source}: its policy document is neither JSON nor a mapping") from None
    try:
        return parse_statements(document, source)
    except PolicyError as exc:
        raise BundleError(str(exc)) from None


def _text(value: Any) -> str:
    """An environment value as Lambda gives it (a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_UNRESOLVED = re.compile(r"\$\{[A-Za-z0-9:.]+\}")


def _check_resolved(values: Any, where: str) -> None:
    """Refuse a created value that still holds a ``${Name}`` reference as text: CloudFormation
    resolves every one inside a Fn::Sub, so it can only come from a Fn::Sub an expansion dropped
    (SAM CLI 1.170's expand_language_extensions turns ``!Sub "${Res}..."`` into the plain string when
    Res is a resource; cfn-lint's AWS::LanguageExtensions transform keeps the Fn::Sub)."""
    for value in values:
        found = _UNRESOLVED.search(str(value))
        if found is not None:
            raise BundleError(
                f"{where} holds {found.group(0)} as text ({str(value)[:120]!r}): the bundle's template lost the "
                "Fn::Sub around it before CloudFormation saw it (expanded.json), so the deployed value would be wrong"
            )


def _reserved(value: Any, logical_id: str) -> int | None:
    """A function's ReservedConcurrentExecutions as its template declares it (None: none reserved)."""
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{logical_id}.ReservedConcurrentExecutions must be a number, got {value!r}") from None
