"""Build what local mode runs (:mod:`workerless_devkit.local.resources`) from a resolved template.

:class:`TemplateBuilder` merges ``Globals.Function`` into every ``AWS::Serverless::Function`` (SAM's
rule), and resolves (:mod:`workerless_devkit.local.intrinsics`) only what local mode needs: each
function's code, handler, timeout, memory, environment, logging, RecursiveLoop and events; each
queue's attributes; each table's keys and TTL; the SSM parameters; the buckets. Properties local
mode does not use (Policies, Layers, alarms, IAM) are never resolved, so an intrinsic there cannot
fail a local run. Lambda's and Parameter Store's quotas that cfn-lint does not check are checked here.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workerless_devkit.local.intrinsics import (
    NO_VALUE,
    Resolver,
    as_int,
    is_intrinsic,
    rate_seconds,
    scalar_text,
    truthy,
)
from workerless_devkit.local.resources import (
    BUCKET_TYPE,
    FUNCTION_TYPES,
    PARAMETER_TYPE,
    QUEUE_TYPE,
    TABLE_TYPES,
    BucketSpec,
    FunctionSpec,
    LocalTemplate,
    ParameterSpec,
    QueueSpec,
    ScheduleEventSpec,
    SqsEventSpec,
    TableSpec,
    TemplateError,
)

#: Parameter Store's rules for a parameter (Systems Manager's PutParameter and its quotas): a
#: Standard parameter's value is at most 4 KB (Advanced: 8 KB); a name at most 1011 characters of
#: a-zA-Z0-9_.- with / between the levels of a hierarchy (at most 15), not beginning with aws or ssm.
PARAMETER_VALUE_LIMITS = {"Standard": 4096, "Advanced": 8192}
PARAMETER_NAME_LIMIT = 1011
PARAMETER_MAX_LEVELS = 15
_PARAMETER_NAME = re.compile(r"^[A-Za-z0-9_.\-/]+$")

#: Lambda's quota on one function's environment variables, all of them together ("4 KB", Lambda
#: quotas; cfn-lint does not check it): a deploy over it fails. Lambda measures their compact JSON
#: object (its refusal quotes the "String measured"), and so does local mode.
ENVIRONMENT_LIMIT_BYTES = 4096
#: CloudFormation names what a template leaves unnamed <stack>-<LogicalId>-<12 random characters>;
#: local names stop before the suffix, so each one in a value counts this much more.
GENERATED_NAME_SUFFIX_BYTES = 13


class TemplateBuilder(Resolver):
    """A :class:`~workerless_devkit.local.intrinsics.Resolver` that builds a :class:`LocalTemplate`."""

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
        name = scalar_text(self.resolve(props["Name"], f"{lid}.Name"))
        value = scalar_text(self.resolve(props.get("Value", ""), f"{lid}.Value"))
        kind = scalar_text(self.resolve(props.get("Type", ""), f"{lid}.Type"))
        tier = scalar_text(self.resolve(props.get("Tier", "Standard"), f"{lid}.Tier"))
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
                batch_size=as_int(props.get("BatchSize", 10), f"{lid}.BatchSize"),
                batching_window_seconds=float(props.get("MaximumBatchingWindowInSeconds", 0) or 0),
                maximum_concurrency=as_int(concurrency, f"{lid}.ScalingConfig") if concurrency else None,
                report_batch_item_failures="ReportBatchItemFailures" in (props.get("FunctionResponseTypes") or []),
                enabled=truthy(props.get("Enabled", True)),
            )
            found.append((str(props.get("FunctionName", "")), event))
        return found

    def _queue(self, lid: str, props: Mapping[str, Any]) -> QueueSpec:
        def number(key: str, default: int | None) -> int | None:
            if key not in props:
                return default
            return as_int(self.resolve(props[key], f"{lid}.{key}"), f"{lid}.{key}")

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
            max_receive = as_int(policy.get("maxReceiveCount", 10), f"{lid}.RedrivePolicy.maxReceiveCount")
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
            fifo=truthy(self.resolve(props.get("FifoQueue", False), f"{lid}.FifoQueue")),
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
        ttl_attribute = str(ttl["AttributeName"]) if ttl.get("AttributeName") and truthy(ttl.get("Enabled")) else None
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
            return default if value is NO_VALUE else value

        code_uri = prop("CodeUri")
        handler = prop("Handler")
        if not isinstance(code_uri, str) or not code_uri:
            raise TemplateError(f"{lid}: CodeUri must be a local directory (inline or S3 code cannot run locally)")
        if not isinstance(handler, str) or "." not in handler:
            raise TemplateError(f"{lid}: Handler must be module.function, got {handler!r}")
        env_block = prop("Environment") or {}
        variables = env_block.get("Variables") or {} if isinstance(env_block, dict) else {}
        environment = {str(k): scalar_text(v) for k, v in variables.items()}
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
                        batch_size=as_int(eprops.get("BatchSize", 10), f"{where}.BatchSize"),
                        batching_window_seconds=float(eprops.get("MaximumBatchingWindowInSeconds", 0) or 0),
                        maximum_concurrency=as_int(concurrency, f"{where}.ScalingConfig") if concurrency else None,
                        report_batch_item_failures="ReportBatchItemFailures"
                        in (eprops.get("FunctionResponseTypes") or []),
                        enabled=truthy(eprops.get("Enabled", True)),
                    )
                )
            elif etype in ("Schedule", "ScheduleV2"):
                expression = str(eprops.get("Schedule") or eprops.get("ScheduleExpression") or "")
                if not expression:
                    raise TemplateError(f"{where}: a schedule needs a Schedule expression")
                enabled = truthy(eprops.get("Enabled", True)) and str(eprops.get("State", "ENABLED")) == "ENABLED"
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
            reserved_concurrency=None if reserved is None else as_int(reserved, f"{lid}.ReservedConcurrentExecutions"),
            maximum_event_age=as_int(
                invoke_config.get("MaximumEventAgeInSeconds", 21600),
                f"{lid}.EventInvokeConfig.MaximumEventAgeInSeconds",
            ),
            logical_id=lid,
            function_name=self.physical_name(lid),
            code_dir=(self.base_dir / code_uri).resolve(),
            handler=handler,
            timeout=as_int(prop("Timeout", 3), f"{lid}.Timeout"),
            memory_size=as_int(prop("MemorySize", 128), f"{lid}.MemorySize"),
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


def _merge_globals(globals_value: Any, own: Any) -> Any:
    """SAM's Globals rule: maps merge (the function's keys win), lists append, scalars: the function's."""
    if is_intrinsic(globals_value) or is_intrinsic(own):
        return own  # SAM treats an intrinsic function as a scalar: the function's own value wins
    if isinstance(globals_value, dict) and isinstance(own, dict):
        merged = dict(globals_value)
        for key, value in own.items():
            merged[key] = _merge_globals(globals_value[key], value) if key in globals_value else value
        return merged
    if isinstance(globals_value, list) and isinstance(own, list):
        return [*globals_value, *own]
    return own
