"""Which resources of the transformed template CloudFormation creates: its Conditions, evaluated.

A resource with a false ``Condition`` (the alarms without AlarmTopicArn) is not created on AWS
either: the rehearsal must not take its absence from moto's stack for a type moto skipped. The
condition functions CloudFormation allows are few (Fn::Equals, Fn::Not, Fn::And, Fn::Or,
Condition, Ref of a parameter or pseudo-parameter); anything else is a :class:`StackError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workerless_devkit.rehearsal.errors import StackError


def created_resources(template: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The template's resources whose Condition holds (all of them where there is none)."""
    evaluator = _Conditions(template, values)
    resources: Mapping[str, Any] = template.get("Resources") or {}
    return {
        lid: dict(resource)
        for lid, resource in resources.items()
        if "Condition" not in resource or evaluator.holds(str(resource["Condition"]))
    }


class _Conditions:
    def __init__(self, template: Mapping[str, Any], values: Mapping[str, str]) -> None:
        self._conditions: Mapping[str, Any] = template.get("Conditions") or {}
        declared: Mapping[str, Any] = template.get("Parameters") or {}
        self._values = {name: str(spec.get("Default", "")) for name, spec in declared.items() if "Default" in spec}
        self._values.update(values)
        self._memo: dict[str, bool] = {}

    def holds(self, name: str, seen: tuple[str, ...] = ()) -> bool:
        if name in seen:
            raise StackError(f"condition {name} refers to itself ({' -> '.join((*seen, name))})")
        if name not in self._memo:
            if name not in self._conditions:
                raise StackError(f"condition {name} is not declared in the transformed template")
            self._memo[name] = self._truth(self._conditions[name], (*seen, name))
        return self._memo[name]

    def _truth(self, node: Any, seen: tuple[str, ...]) -> bool:
        if isinstance(node, bool):
            return node
        if isinstance(node, dict) and len(node) == 1:
            (function, args), where = next(iter(node.items())), " -> ".join(seen)
            if function == "Condition":
                return self.holds(str(args), seen)
            if function == "Fn::Not" and isinstance(args, list) and len(args) == 1:
                return not self._truth(args[0], seen)
            if function == "Fn::And" and isinstance(args, list):
                return all(self._truth(a, seen) for a in args)
            if function == "Fn::Or" and isinstance(args, list):
                return any(self._truth(a, seen) for a in args)
            if function == "Fn::Equals" and isinstance(args, list) and len(args) == 2:
                return self._value(args[0], where) == self._value(args[1], where)
        raise StackError(f"condition {' -> '.join(seen)}: cannot evaluate {node!r}")

    def _value(self, node: Any, where: str) -> str:
        if isinstance(node, bool):
            return "true" if node else "false"
        if isinstance(node, str | int | float):
            return str(node)
        if isinstance(node, dict) and set(node) == {"Ref"} and str(node["Ref"]) in self._values:
            return self._values[str(node["Ref"])]
        raise StackError(f"condition {where}: cannot evaluate {node!r} (not a literal or a parameter's Ref)")
