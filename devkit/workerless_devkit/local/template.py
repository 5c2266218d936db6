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

Its parts: :mod:`~workerless_devkit.local.resources` (what it reads into: the resource models and
:class:`Place`), :mod:`~workerless_devkit.local.intrinsics` (parameters, conditions, intrinsic
functions), :mod:`~workerless_devkit.local.builder` (the resources local mode runs, and the quotas
cfn-lint does not check); this module reads the file and re-exports what callers use.

Example:
    >>> template = load_template("template.yaml", parameters={"TickSeconds": "2"})  # doctest: +SKIP
    >>> [f.logical_id for f in template.functions]                                  # doctest: +SKIP
    ['PollerFunction', 'HeartbeatFunction', ...]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workerless_devkit.local.builder import TemplateBuilder, check_parameter_name, logging_config
from workerless_devkit.local.intrinsics import SUPPORTED_INTRINSICS, Resolver, rate_seconds
from workerless_devkit.local.resources import (
    ACCOUNT_ID,
    LOCAL_PLACE,
    REGION,
    STACK_NAME,
    BucketSpec,
    FunctionSpec,
    LocalTemplate,
    ParameterSpec,
    Place,
    QueueSpec,
    ScheduleEventSpec,
    SqsEventSpec,
    TableSpec,
    TemplateError,
)

#: What callers import from here: reading a template, and (re-exported) what it reads into.
__all__ = [
    "ACCOUNT_ID",
    "LOCAL_PLACE",
    "REGION",
    "STACK_NAME",
    "SUPPORTED_INTRINSICS",
    "BucketSpec",
    "FunctionSpec",
    "LocalTemplate",
    "ParameterSpec",
    "Place",
    "QueueSpec",
    "ScheduleEventSpec",
    "SqsEventSpec",
    "TableSpec",
    "TemplateError",
    "apply_route_settings",
    "check_parameter_name",
    "intrinsic_resolver",
    "load_template",
    "logging_config",
    "parse_template_text",
    "rate_seconds",
    "resolve_template",
    "route_timing_settings",
    "stack_resolver",
]

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
    return TemplateBuilder(
        data, base_dir=base_dir, parameters=parameters or {}, stack_name=stack_name, place=place
    ).build(path or base_dir / "template.yaml")


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
    return Resolver(data, base_dir=Path("."), parameters=parameters or {}, stack_name=stack_name, place=place).resolve


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
    return Resolver(
        data,
        base_dir=Path("."),
        parameters=parameters,
        stack_name=stack_name,
        expand=False,
        physical_ids=physical_ids,
        place=place,
    ).resolve
