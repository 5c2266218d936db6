"""Each function's execution role as AWS will see it: SAM's translation of the template, resolved.

The SAM translator (aws-sam-translator, in-process, offline) turns template.yaml into the
CloudFormation template that is deployed; from it, for every function:

- a function with ``Role:`` gets that role's inline ``Policies``, its ``ManagedPolicyArns`` and the
  ``AWS::IAM::Policy`` / ``RolePolicy`` / ``ManagedPolicy`` resources attached to it;
- a function without one gets the role SAM generates: its ``Policies`` (SAM policy templates
  expanded by the translator) plus the AWS managed policies SAM attaches (bundled in
  :mod:`workerless_devkit.local.iam.managed`: no IAM call);
- a ``PermissionsBoundary`` caps what the role allows.

Intrinsics in the statements are then resolved by local mode's own resolver, so every resource is
the concrete ARN local mode creates (``arn:aws:sqs:<region>:<account>:<queue>``, of the template's
:class:`~workerless_devkit.local.template.Place`,
``arn:aws:dynamodb:...:table/<table>``, a log group's ``Arn`` ending in ``:*``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workerless_devkit.local.extensions import ExtensionError, expand_language_extensions
from workerless_devkit.local.iam.managed import MANAGED_POLICIES, managed_policy
from workerless_devkit.local.iam.policy import Context, Decision, PolicyError, Statement, evaluate, parse_statements
from workerless_devkit.local.template import (
    LOCAL_PLACE,
    STACK_NAME,
    LocalTemplate,
    Place,
    TemplateError,
    apply_route_settings,
    intrinsic_resolver,
    parse_template_text,
)

_ROLE = "AWS::IAM::Role"
_ATTACHED = ("AWS::IAM::Policy", "AWS::IAM::RolePolicy", "AWS::IAM::ManagedPolicy")


@dataclass(frozen=True, slots=True)
class FunctionRole:
    """What one function may do: its role's statements, resolved to local mode's ARNs."""

    function_id: str
    function_name: str
    role_id: str
    role_name: str
    statements: tuple[Statement, ...]
    #: The function's log group (LoggingConfig.LogGroup, else /aws/lambda/<function name>).
    log_group: str
    #: Whether the template creates that log group (else Lambda must create it: logs:CreateLogGroup).
    log_group_in_template: bool = False
    boundary: tuple[Statement, ...] | None = None
    generated: bool = False
    #: The account (and region) the role is in.
    place: Place = LOCAL_PLACE

    @property
    def principal(self) -> str:
        """The caller AWS names in an AccessDenied message: the function's role session."""
        return f"arn:aws:sts::{self.place.account_id}:assumed-role/{self.role_name}/{self.function_name}"

    def decide(self, action: str, resource: str | None, context: Context | None = None) -> Decision:
        """The role's decision on ``action`` on ``resource`` (with the request's condition keys,
        ``context``), its permissions boundary included."""
        decision = evaluate(self.statements, action, resource, context)
        if self.boundary is None or decision.explicit_deny:
            return decision
        capped = evaluate(self.boundary, action, resource, context)
        if capped.explicit_deny or not capped.allowed:
            return Decision(allowed=False, explicit_deny=capped.explicit_deny, statement=capped.statement)
        return decision


def render_roles(
    template: LocalTemplate,
    *,
    parameters: Mapping[str, str] | None = None,
    stack_name: str = STACK_NAME,
) -> dict[str, FunctionRole]:
    """Every function's role, by function logical id. ``parameters`` override the template's values.

    Raises :class:`TemplateError` when SAM would not translate the template, a role is not a
    resource of the template (local mode cannot read an existing role's policies), a managed policy
    is not one local mode knows, or a policy document is one IAM would reject.
    """
    source = parse_template_text(template.path.read_text(encoding="utf-8"), source=str(template.path))
    if template.route_settings:  # what the template was resolved with
        source = apply_route_settings(source, template.route_settings, source=str(template.path))
    # The values the template was resolved with (parameters without a value stay unset), then ``parameters``.
    values = {
        k: ",".join(map(str, v)) if isinstance(v, list) else str(v)
        for k, v in template.parameters.items()
        if k not in template.unset_parameters
    }
    values.update(parameters or {})
    # CloudFormation expands AWS::LanguageExtensions (Fn::ForEach, ...) before the SAM transform.
    try:
        source = expand_language_extensions(source, values, pseudo=template.place.pseudo_parameters())
    except ExtensionError as exc:
        raise TemplateError(str(exc)) from None
    translated = translate(source, values, region=template.place.region)
    resolve = intrinsic_resolver(translated, parameters=values, stack_name=stack_name, place=template.place)
    resources: dict[str, Any] = translated.get("Resources") or {}
    log_groups = {
        str(resolve({"Ref": lid}, lid)): lid for lid, r in resources.items() if r.get("Type") == "AWS::Logs::LogGroup"
    }
    role_ids = {
        str(resolve({"Fn::GetAtt": [lid, "Arn"]}, lid)): lid for lid, r in resources.items() if r.get("Type") == _ROLE
    }
    roles: dict[str, FunctionRole] = {}
    for spec in template.functions:
        function = resources.get(spec.logical_id) or {}
        props = function.get("Properties") or {}
        where = f"{spec.logical_id}.Role"
        role_arn = resolve(props.get("Role"), where)
        role_id = role_ids.get(str(role_arn))
        if role_id is None:
            raise TemplateError(
                f"{where} is {role_arn!r}, not a role of this template: local mode cannot read the policies of a "
                "role it does not create, so it cannot hold the function to them"
            )
        logging_config = resolve(props.get("LoggingConfig") or {}, f"{spec.logical_id}.LoggingConfig")
        log_group = str(logging_config.get("LogGroup") or f"/aws/lambda/{spec.function_name}")
        role_props = resources[role_id].get("Properties") or {}
        boundary_arn = role_props.get("PermissionsBoundary")
        roles[spec.logical_id] = FunctionRole(
            function_id=spec.logical_id,
            function_name=spec.function_name,
            role_id=role_id,
            role_name=str(resolve({"Ref": role_id}, role_id))[:64],
            statements=_role_statements(role_id, resources, resolve),
            log_group=log_group,
            log_group_in_template=log_group in log_groups,
            boundary=None
            if boundary_arn is None
            else _managed_statements(boundary_arn, f"{role_id}.PermissionsBoundary", resources, resolve),
            generated=spec.logical_id in _generated_roles(source),
            place=template.place,
        )
    return roles


def translate(
    source: Mapping[str, Any], parameters: Mapping[str, str], *, region: str = LOCAL_PLACE.region
) -> dict[str, Any]:
    """SAM's translation of ``source`` (a parsed template) for a stack in ``region``, offline: local
    code locations become S3 URIs (the translator accepts only those) and managed policies are never
    looked up."""
    resources = source.get("Resources") or {}
    serverless = any(str((r or {}).get("Type", "")).startswith("AWS::Serverless::") for r in resources.values())
    if not serverless:
        return copy.deepcopy(dict(source))  # plain CloudFormation: nothing to translate
    from boto3.session import Session
    from samtranslator.model.exceptions import InvalidDocumentException
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    template = copy.deepcopy(dict(source))
    # Local mode runs SAM resources whether or not the template declares the transform (sam deploy
    # would not); the translator needs it declared.
    transform = template.get("Transform")
    transforms = transform if isinstance(transform, list) else [transform] if transform else []
    if "AWS::Serverless-2016-10-31" not in transforms:
        template["Transform"] = (
            [*transforms, "AWS::Serverless-2016-10-31"] if transforms else "AWS::Serverless-2016-10-31"
        )
    globals_function = (template.get("Globals") or {}).get("Function")
    global_runtime = isinstance(globals_function, dict) and "Runtime" in globals_function
    for resource in (template.get("Resources") or {}).values():
        if not isinstance(resource, dict):
            continue
        props = resource.setdefault("Properties", {})
        if resource.get("Type") == "AWS::Serverless::Function" and "InlineCode" not in props:
            props["CodeUri"] = "s3://workerless-local/function.zip"
            if "Runtime" not in props and not global_runtime:
                # Local mode runs a function without one (sam deploy would refuse it); it does not
                # change the role, which is all this translation is for.
                props["Runtime"] = "python3.12"
        elif resource.get("Type") == "AWS::Serverless::LayerVersion":
            props["ContentUri"] = "s3://workerless-local/layer.zip"
    if isinstance(globals_function, dict) and "CodeUri" in globals_function:
        globals_function["CodeUri"] = "s3://workerless-local/function.zip"

    def managed_policy_map() -> dict[str, str]:
        # SAM asks for this only to turn a managed policy *name* in Policies into its ARN; the
        # bundled ones are all local mode can evaluate (any other name fails below, by name).
        return {name: f"arn:aws:iam::aws:policy/service-role/{name}" for name in MANAGED_POLICIES}

    try:
        translated: dict[str, Any] = Translator(
            managed_policy_map=None,
            sam_parser=Parser(),
            plugins=[],
            boto_session=Session(region_name=region),
        ).translate(sam_template=template, parameter_values=dict(parameters), get_managed_policy_map=managed_policy_map)
    except InvalidDocumentException as exc:
        causes = "; ".join(str(cause) for cause in exc.causes)
        raise TemplateError(f"SAM cannot translate the template: {causes}") from None
    return translated


def _generated_roles(source: Mapping[str, Any]) -> set[str]:
    """The SAM functions without a Role (their own or from Globals): SAM generates theirs."""
    global_role = "Role" in ((source.get("Globals") or {}).get("Function") or {})
    return {
        lid
        for lid, r in (source.get("Resources") or {}).items()
        if r.get("Type") == "AWS::Serverless::Function"
        and not global_role
        and "Role" not in (r.get("Properties") or {})
    }


def _role_statements(role_id: str, resources: Mapping[str, Any], resolve: Any) -> tuple[Statement, ...]:
    props = resources[role_id].get("Properties") or {}
    statements: list[Statement] = []
    for index, policy in enumerate(resolve(props.get("Policies") or [], f"{role_id}.Policies")):
        name = policy.get("PolicyName", index) if isinstance(policy, dict) else index
        document = policy.get("PolicyDocument") if isinstance(policy, dict) else None
        statements += _parse(document, f"{role_id}/{name}")
    for index, arn in enumerate(props.get("ManagedPolicyArns") or []):
        statements += _managed_statements(arn, f"{role_id}.ManagedPolicyArns[{index}]", resources, resolve)
    role_name = resolve({"Ref": role_id}, role_id)
    for lid, resource in resources.items():
        if resource.get("Type") not in _ATTACHED:
            continue
        attached = resource.get("Properties") or {}
        if resource.get("Type") == "AWS::IAM::RolePolicy":
            names = [resolve(attached.get("RoleName"), f"{lid}.RoleName")]
        else:
            names = resolve(attached.get("Roles") or [], f"{lid}.Roles")
        if role_name in names:
            statements += _parse(resolve(attached.get("PolicyDocument"), f"{lid}.PolicyDocument"), lid)
    return tuple(statements)


def _managed_statements(arn: Any, where: str, resources: Mapping[str, Any], resolve: Any) -> tuple[Statement, ...]:
    if (
        isinstance(arn, dict)
        and set(arn) == {"Ref"}
        and (resources.get(arn["Ref"]) or {}).get("Type") == ("AWS::IAM::ManagedPolicy")
    ):
        lid = arn["Ref"]  # a customer managed policy of this template (its Ref is its ARN)
        return _parse(resolve((resources[lid].get("Properties") or {}).get("PolicyDocument"), lid), lid)
    value = str(resolve(arn, where))
    document = managed_policy(value)
    if document is None:
        raise TemplateError(
            f"{where}: managed policy {value!r} is not one local mode knows (it bundles "
            f"{', '.join(sorted(MANAGED_POLICIES))}); write its statements into the role's Policies"
        )
    return _parse(document, value.rsplit("/", 1)[-1])


def _parse(document: Any, source: str) -> tuple[Statement, ...]:
    try:
        return parse_statements(document, source)
    except PolicyError as exc:
        raise TemplateError(str(exc)) from None


def secret_parameter(template: LocalTemplate, variable: str = "WORKERLESS_SECRET_ARN") -> str | None:
    """The template parameter the functions' ``variable`` is ``!Ref`` of (Globals or a function), else None."""
    source = parse_template_text(template.path.read_text(encoding="utf-8"), source=str(template.path))
    if template.route_settings:  # what the template was resolved with
        source = apply_route_settings(source, template.route_settings, source=str(template.path))
    declared = source.get("Parameters") or {}
    blocks = [(source.get("Globals") or {}).get("Function") or {}]
    blocks += [(r.get("Properties") or {}) for r in (source.get("Resources") or {}).values() if isinstance(r, dict)]
    for props in blocks:
        value = (((props.get("Environment") or {}).get("Variables")) or {}).get(variable)
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in declared:
            return str(value["Ref"])
    return None
