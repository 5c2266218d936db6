"""CloudFormation's intrinsic functions, parameters and conditions, evaluated as a stack would.

:class:`Resolver` resolves the Parameters (defaults, then overrides, checked as CloudFormation
checks them), expands ``AWS::LanguageExtensions`` and evaluates the intrinsic functions
(:data:`SUPPORTED_INTRINSICS`) against a parsed template: ``!Ref Queue`` is the queue URL,
``!GetAtt Queue.Arn`` its ARN, ``!Ref Table`` the table name, ``!Ref Function`` the function name;
physical names are ``{stack}-{LogicalId}`` unless the template names the resource (or, for a
created stack, its physical ids). Turning the resolved resources into what local mode runs:
:mod:`workerless_devkit.local.builder`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workerless_devkit.local.extensions import ExtensionError, expand_language_extensions
from workerless_devkit.local.resources import (
    BUCKET_TYPE,
    LOCAL_PLACE,
    PARAMETER_TYPE,
    QUEUE_TYPE,
    Place,
    TemplateError,
    bucket_arn,
)

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
NO_VALUE = object()

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


class Resolver:
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
                value = scalar_text(default) if not isinstance(default, list) else ",".join(map(str, default))
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
        if rtype == QUEUE_TYPE and truthy(props.get("FifoQueue")):
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
            return NO_VALUE
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
            return [item for item in items if item is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref" or key.startswith("Fn::") or key == "Condition":
                return self._intrinsic(key, arg, where)
        resolved = {k: self.resolve(v, f"{where}.{k}") for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

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
            return str(args[0]).join(scalar_text(item) for item in items)
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
            return scalar_text(left) == scalar_text(right)
        if name == "Fn::Not":
            args = self._args(name, arg, 1, where)
            return not bool(self.resolve(args[0], where))
        if name in ("Fn::And", "Fn::Or"):
            if not isinstance(arg, list) or not arg:
                raise TemplateError(f"{where}: {name} needs a list of conditions")
            results = [bool(self.resolve(item, where)) for item in arg]
            return all(results) if name == "Fn::And" else any(results)
        if name == "Fn::FindInMap":
            default = NO_VALUE
            if isinstance(arg, list) and len(arg) == 4 and isinstance(arg[3], dict) and set(arg[3]) == {"DefaultValue"}:
                arg, default = arg[:3], arg[3]["DefaultValue"]
            args = [self.resolve(a, where) for a in self._args(name, arg, 3, where)]
            try:
                return self.mappings[scalar_text(args[0])][scalar_text(args[1])][scalar_text(args[2])]
            except (KeyError, TypeError):
                if default is not NO_VALUE:
                    return self.resolve(default, where)
                raise TemplateError(f"{where}: !FindInMap {args[0]}/{args[1]}/{args[2]} is not in Mappings") from None
        if name == "Fn::Length":
            items = self.resolve(arg, where)
            if not isinstance(items, list):
                raise TemplateError(f"{where}: !Length needs a list")
            return len(items)
        if name == "Fn::Base64":
            import base64

            return base64.b64encode(scalar_text(self.resolve(arg, where)).encode()).decode()
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
                return scalar_text(variables[name])
            if "." in name and not name.startswith("AWS::"):
                resource, attribute = name.split(".", 1)
                if resource in self.resources:
                    return scalar_text(self.get_att(resource, attribute, where))
            return scalar_text(self.ref(name, where))

        return _SUB_VARIABLE.sub(replace, text)


def _check_override(name: str, value: str, decl: Mapping[str, Any]) -> None:
    """The checks CloudFormation applies to a parameter value (AllowedValues, pattern, range)."""
    allowed = decl.get("AllowedValues")
    if isinstance(allowed, list) and value not in [scalar_text(a) for a in allowed]:
        raise TemplateError(f"parameter {name}: {value!r} is not one of {', '.join(scalar_text(a) for a in allowed)}")
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


def is_intrinsic(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    (key,) = value
    return key in ("Ref", "Condition") or str(key).startswith("Fn::")


def scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def as_int(value: Any, where: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise TemplateError(f"{where} must be a whole number, got {value!r}") from None
