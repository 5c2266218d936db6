"""CloudFormation's ``AWS::LanguageExtensions`` transform, as local mode runs it before anything else.

CloudFormation expands the transform before the SAM transform, and SAM CLI (>= 1.160, with
``language_extensions``) does the same locally. :func:`expand_language_extensions` does what they
do to a parsed template: every ``Fn::ForEach`` in Resources, Conditions and Outputs (nested loops
included) is replicated for each item of its collection, ``${Id}`` and ``&{Id}`` (the item without
its non-alphanumeric characters) are replaced in every key and string of the fragment and
``{"Ref": Id}`` by the item; then ``Fn::FindInMap`` with ``DefaultValue`` and ``Fn::Length`` are
evaluated. ``Fn::ToJsonString`` is left to the resolver (it needs resolved references).

It is at least as strict as the tools a deployment goes through: a ``Fn::ForEach`` where SAM CLI
does not expand one (deeper than the top of a resource's Properties, or in another section), a
collection that is neither a list nor a ``Ref`` to a list parameter, an output key without the
identifier, two items producing the same key, or the transform's functions without the transform
declared: each is a :class:`TemplateError` naming the construct and where it is.

Example:
    >>> expanded = expand_language_extensions(
    ...     {"Transform": ["AWS::LanguageExtensions"], "Resources": {"Fn::ForEach::Q": ["T", ["a-b", "c"],
    ...         {"&{T}Queue": {"Type": "AWS::SQS::Queue"}}]}}, {})
    >>> sorted(expanded["Resources"])
    ['abQueue', 'cQueue']
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from workerless.errors import ConfigurationError

TRANSFORM = "AWS::LanguageExtensions"
FOREACH_PREFIX = "Fn::ForEach::"
#: Where CloudFormation accepts Fn::ForEach.
FOREACH_SECTIONS = ("Resources", "Conditions", "Outputs")
#: The transform's functions (besides Fn::ToJsonString, which the resolver evaluates).
_EXTENSION_FUNCTIONS = ("Fn::Length",)


class ExtensionError(ConfigurationError):
    """The template's language extensions cannot be expanded (names the construct and where)."""


def uses_language_extensions(data: Mapping[str, Any]) -> bool:
    transform = data.get("Transform")
    transforms = transform if isinstance(transform, list) else [transform]
    return TRANSFORM in transforms


def expand_language_extensions(
    data: Mapping[str, Any], parameters: Mapping[str, Any], *, pseudo: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The template as CloudFormation sees it after ``AWS::LanguageExtensions`` (a new dict).

    ``parameters``: the template's parameter values (a list parameter as a list or as "a,b" text).
    ``pseudo``: AWS::Region, AWS::AccountId and AWS::Partition where the stack runs (default: local
    mode's, us-east-1 of account 123456789012).
    Without the transform declared, the template is returned as it is, unless it uses the
    transform's constructs (then CloudFormation would refuse it, and so does this).
    """
    template = copy.deepcopy(dict(data))
    if not uses_language_extensions(template):
        found = _first_extension_use(template)
        if found:
            raise ExtensionError(f"{found} needs `Transform: {TRANSFORM}` (CloudFormation refuses it without)")
        return template
    for section, value in template.items():
        if section not in FOREACH_SECTIONS:
            where = _first_foreach(value, section)
            if where:
                raise ExtensionError(
                    f"{where}: Fn::ForEach is not allowed in {section} "
                    f"(CloudFormation accepts it only in {', '.join(FOREACH_SECTIONS)})"
                )
    if pseudo is None:
        from workerless_devkit.local.template import LOCAL_PLACE

        pseudo = LOCAL_PLACE.pseudo_parameters()
    expander = _Expander(template.get("Mappings") or {}, dict(template.get("Parameters") or {}), parameters, pseudo)
    for section in FOREACH_SECTIONS:
        if isinstance(template.get(section), dict):
            if section == "Resources":
                template[section] = expander.resources(template[section])
            else:
                template[section] = expander.mapping(template[section], section, {}, depth_allowed=True)
            template[section] = expander.functions(template[section], section)
    transform = template["Transform"]
    rest = [t for t in (transform if isinstance(transform, list) else [transform]) if t != TRANSFORM]
    if rest:
        template["Transform"] = rest if len(rest) > 1 else rest[0]
    else:
        del template["Transform"]
    return template


class _Expander:
    def __init__(
        self,
        mappings: Mapping[str, Any],
        declared: Mapping[str, Any],
        values: Mapping[str, Any],
        pseudo: Mapping[str, str],
    ):
        self.mappings = mappings
        self.declared = declared
        self.values = values
        self.pseudo = pseudo

    # -- Fn::ForEach ----------------------------------------------------------------------------

    def resources(self, section: Mapping[str, Any]) -> dict[str, Any]:
        """Resources: loops at the top (nested loops in their bodies), and at the top of Properties."""
        top = self.mapping(section, "Resources", {}, depth_allowed=True)
        result: dict[str, Any] = {}
        for logical_id, resource in top.items():
            if isinstance(resource, dict) and isinstance(resource.get("Properties"), dict):
                resource = dict(resource)
                where = f"Resources.{logical_id}.Properties"
                resource["Properties"] = self.mapping(resource["Properties"], where, {}, depth_allowed=False)
            if isinstance(resource, dict):
                found = _first_foreach({k: v for k, v in resource.items() if k != "Properties"}, logical_id)
                found = found or _first_foreach_below(resource.get("Properties"), f"Resources.{logical_id}.Properties")
                if found:
                    raise ExtensionError(
                        f"{found}: SAM CLI expands Fn::ForEach only at the top of Resources, of a loop's "
                        "body, or of a resource's Properties (sam build would fail on this one)"
                    )
            result[logical_id] = resource
        return result

    def mapping(
        self, value: Mapping[str, Any], where: str, bound: dict[str, str], *, depth_allowed: bool
    ) -> dict[str, Any]:
        """Expand the loops that are keys of ``value`` (and of the bodies they produce)."""
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not key.startswith(FOREACH_PREFIX):
                if key in result:
                    raise ExtensionError(f"{where}: {key} is produced twice")
                result[key] = item
                continue
            for out_key, out_value in self.loop(key, item, where, bound).items():
                if out_key in result:
                    raise ExtensionError(f"{where}.{key}: produces {out_key}, which already exists")
                result[out_key] = out_value
        return result

    def loop(self, key: str, spec: Any, where: str, bound: dict[str, str]) -> dict[str, Any]:
        name = f"{where}.{key}"
        if not isinstance(spec, list) or len(spec) != 3 or not isinstance(spec[2], dict):
            raise ExtensionError(f"{name}: Fn::ForEach takes [identifier, collection, {{output key: value}}]")
        identifier, collection, fragment = spec
        if not isinstance(identifier, str) or not re.fullmatch(r"[A-Za-z0-9]+", identifier):
            raise ExtensionError(f"{name}: the identifier must be alphanumeric, got {identifier!r}")
        if identifier in self.declared or identifier in bound:
            raise ExtensionError(
                f"{name}: identifier {identifier} is already a parameter or an outer loop's identifier"
            )
        items = self.collection(collection, name)
        for out_key in fragment:
            if not out_key.startswith(FOREACH_PREFIX) and not (
                f"${{{identifier}}}" in out_key or f"&{{{identifier}}}" in out_key
            ):
                raise ExtensionError(
                    f"{name}: output key {out_key!r} must contain ${{{identifier}}} or &{{{identifier}}}"
                )
        result: dict[str, Any] = {}
        for item in items:
            body = _substitute(copy.deepcopy(fragment), identifier, item)
            for out_key, out_value in self.mapping(body, name, {**bound, identifier: item}, depth_allowed=True).items():
                if out_key in result:
                    raise ExtensionError(f"{name}: two items of the collection produce {out_key}")
                result[out_key] = out_value
        return result

    def collection(self, value: Any, where: str) -> list[str]:
        if isinstance(value, dict) and set(value) == {"Ref"} and isinstance(value["Ref"], str):
            parameter = value["Ref"]
            kind = str((self.declared.get(parameter) or {}).get("Type", ""))
            if parameter not in self.declared or not kind.startswith(("CommaDelimitedList", "List<")):
                raise ExtensionError(
                    f"{where}: the collection is !Ref {parameter}, not a list parameter of the template"
                )
            raw = self.values.get(parameter, "")
            value = [p.strip() for p in raw.split(",")] if isinstance(raw, str) and raw else list(raw or [])
        if not isinstance(value, list):
            raise ExtensionError(f"{where}: the collection must be a list or a !Ref to a CommaDelimitedList parameter")
        if not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value):
            raise ExtensionError(f"{where}: every item of the collection must be a string")
        return [_text(v) for v in value]

    # -- Fn::FindInMap DefaultValue, Fn::Length -------------------------------------------------

    def functions(self, value: Any, where: str) -> Any:
        if isinstance(value, list):
            return [self.functions(v, where) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Fn::FindInMap" and isinstance(arg, list) and len(arg) == 4:
                return self.find_in_map(arg, where)
            if key == "Fn::Length":
                return self.length(arg, where)
            # A logical ID a loop computed (Ref / GetAtt of !Sub "&{Id}Queue"): the transform
            # resolves the Fn::Sub, which has nothing left to substitute.
            if key == "Ref" and _literal_sub(arg) is not None:
                return {"Ref": _literal_sub(arg)}
            if key == "Fn::GetAtt" and isinstance(arg, list) and arg and _literal_sub(arg[0]) is not None:
                return {"Fn::GetAtt": [_literal_sub(arg[0]), *(self.functions(a, where) for a in arg[1:])]}
        return {k: self.functions(v, f"{where}.{k}") for k, v in value.items()}

    def find_in_map(self, args: list[Any], where: str) -> Any:
        options = args[3]
        if not isinstance(options, dict) or set(options) != {"DefaultValue"}:
            raise ExtensionError(f"{where}: the fourth argument of Fn::FindInMap must be {{DefaultValue: ...}}")
        keys = [self.key(self.functions(a, where), where) for a in args[:3]]
        found = self.mappings.get(keys[0])
        found = found.get(keys[1]) if isinstance(found, dict) else None
        found = found.get(keys[2]) if isinstance(found, dict) else None
        return copy.deepcopy(found) if found is not None else self.functions(options["DefaultValue"], where)

    def key(self, value: Any, where: str) -> str:
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in self.declared:
            value = self.values.get(value["Ref"], (self.declared[value["Ref"]] or {}).get("Default"))
        if isinstance(value, dict) and set(value) == {"Ref"} and str(value["Ref"]).startswith("AWS::"):
            value = self.pseudo.get(value["Ref"])
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ExtensionError(
                f"{where}: a Fn::FindInMap key must be a string, a parameter or another Fn::FindInMap, got {value!r}"
            )
        return _text(value)

    def length(self, arg: Any, where: str) -> int:
        arg = self.functions(arg, where)
        if isinstance(arg, dict) and set(arg) == {"Ref"} and arg["Ref"] in self.declared:
            return len(self.collection(arg, where))
        if not isinstance(arg, list):
            raise ExtensionError(f"{where}: Fn::Length takes a list or a !Ref to a list parameter")
        return len(arg)


def _literal_sub(value: Any) -> str | None:
    """The text of ``{"Fn::Sub": "text"}`` when it has no ${...} left, else None."""
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        text = value["Fn::Sub"]
        return None if "${" in text else text
    return None


def _substitute(value: Any, identifier: str, item: str) -> Any:
    if isinstance(value, str):
        return value.replace(f"${{{identifier}}}", item).replace(
            f"&{{{identifier}}}", re.sub(r"[^A-Za-z0-9]", "", item)
        )
    if isinstance(value, list):
        return [_substitute(v, identifier, item) for v in value]
    if isinstance(value, dict):
        if set(value) == {"Ref"} and value["Ref"] == identifier:
            return item
        return {_substitute(k, identifier, item): _substitute(v, identifier, item) for k, v in value.items()}
    return value


def _find(value: Any, where: str, hit: Callable[[Any, Any, str], str | None], key: Any = None) -> str | None:
    """The first place, depth first in document order, where ``hit(key, value, where)`` names one:
    each node is asked before its children (``key`` is the node's key in its parent mapping, None
    for a list item or the start)."""
    found = hit(key, value, where)
    if found:
        return found
    if isinstance(value, dict):
        children: Iterable[tuple[Any, Any, str]] = ((k, v, f"{where}.{k}") for k, v in value.items())
    elif isinstance(value, list):
        children = ((None, v, f"{where}[{i}]") for i, v in enumerate(value))
    else:
        return None
    for child_key, child, path in children:
        found = _find(child, path, hit, child_key)
        if found:
            return found
    return None


def _foreach_key(key: Any, value: Any, where: str) -> str | None:
    return where if isinstance(key, str) and key.startswith(FOREACH_PREFIX) else None


def _extension_call(key: Any, value: Any, where: str) -> str | None:
    if not (isinstance(value, dict) and len(value) == 1):
        return None
    ((name, arg),) = value.items()
    if name in _EXTENSION_FUNCTIONS or name == "Fn::ToJsonString":
        return f"{where}: {name}"
    if name == "Fn::FindInMap" and isinstance(arg, list) and len(arg) == 4:
        return f"{where}: Fn::FindInMap with DefaultValue"
    return None


def _first_foreach(value: Any, where: str) -> str | None:
    return _find(value, where, _foreach_key)


def _first_foreach_below(properties: Any, where: str) -> str | None:
    """A loop inside one of ``properties``' values (a loop as a property itself is allowed)."""
    if not isinstance(properties, dict):
        return None
    for key, item in properties.items():
        found = _first_foreach(item, f"{where}.{key}")
        if found:
            return found
    return None


def _first_extension_use(template: Mapping[str, Any]) -> str | None:
    return (
        _first_foreach(template, "template")
        or _find(template.get("Resources"), "Resources", _extension_call)
        or _find(template.get("Outputs"), "Outputs", _extension_call)
    )


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
