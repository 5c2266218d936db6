"""The packaged template transformed as CloudFormation does it server-side, with others' implementations.

CloudFormation receives the packaged template and runs its transforms in the order declared:
``AWS::LanguageExtensions`` (Fn::ForEach, Fn::FindInMap with DefaultValue, Fn::Length...), then
``AWS::Serverless-2016-10-31``. Neither is the devkit's own expansion (local/extensions.py), whose
mistakes this must not share:

1. :func:`expand`: SAM CLI's implementation (``samcli.lib.cfn_language_extensions``, .venv-sam's
   Python in a subprocess), given the stack's parameter values and pseudo-parameters
   (AWS::StackName, Region, AccountId, Partition), as CloudFormation has them at create time.
   One correction, and only one: in its partial mode SAM CLI turns an ``Fn::Sub`` it cannot fully
   resolve (``${SomeQueue}``, ``${Bucket.Arn}``: resources that do not exist yet) into plain text,
   losing the reference; CloudFormation keeps such an ``Fn::Sub`` for the stack to resolve. The
   script keeps it too (``keep-sub``), and says how many it kept. ``plain`` runs SAM CLI unchanged.
2. :func:`translate`: samtranslator in-process and offline (its managed-policy lookup is an AWS
   call, so it is refused: workerless names every role's policies itself).

Each result is checked for what CloudFormation would refuse or the next stage could not read:
a ``Fn::ForEach`` left over, a ``${Resource}`` placeholder outside any ``Fn::Sub``, a function
whose code is not an S3 location, a ``Transform`` or ``AWS::Serverless::`` resource left after the
translation.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from workerless_devkit.rehearsal.errors import TransformError
from workerless_devkit.rehearsal.tools import SamCli, run

SERVERLESS = "AWS::Serverless-2016-10-31"
_PLACEHOLDER = re.compile(r"\$\{([^}!][^}]*)\}")

#: Run by .venv-sam's Python: argv = packaged template, JSON file of values, mode (keep-sub | plain).
EXPAND_SCRIPT = r"""
import json, sys
from samcli.yamlhelper import yaml_parse
from samcli.lib.cfn_language_extensions.sam_integration import expand_language_extensions
from samcli.lib.cfn_language_extensions.resolvers.fn_sub import FnSubResolver, PLACEHOLDER_PATTERN

template_path, values_path, mode = sys.argv[1:4]
kept = []
if mode == "keep-sub":
    plain = FnSubResolver.resolve

    def resolve(self, value):
        text, variables = self._parse_args(self.get_function_args(value))
        resolved = self._resolve_variable_map(variables)
        # A variable still an intrinsic (GetAtt, Ref of a resource) is the stack's to resolve.
        pending = {k: v for k, v in resolved.items() if isinstance(v, dict)}
        known = {k: v for k, v in resolved.items() if k not in pending}

        def unresolved(name):
            return not name.startswith("!") and (name in pending or self._resolve_variable(name, known) is None)

        if not any(unresolved(m.group(1)) for m in PLACEHOLDER_PATTERN.finditer(text)):
            return plain(self, value)

        def substitute(m):
            name = m.group(1)
            if name.startswith("!") or unresolved(name):
                return m.group(0)
            return self._value_to_string(self._resolve_variable(name, known)).replace("${", "${!")

        result = PLACEHOLDER_PATTERN.sub(substitute, text)
        kept.append(result)
        return {"Fn::Sub": [result, pending] if pending else result}

    FnSubResolver.resolve = resolve
elif mode != "plain":
    sys.exit(f"unknown mode {mode!r}")

with open(template_path, encoding="utf-8") as fh:
    source = yaml_parse(fh.read())
with open(values_path, encoding="utf-8") as fh:
    values = json.load(fh)
result = expand_language_extensions(source, parameter_values=values, enabled=True)
if not result.had_language_extensions:
    sys.exit("the template does not declare AWS::LanguageExtensions: nothing to expand")
json.dump({"expanded": result.expanded_template, "kept_subs": len(kept)}, sys.stdout)
"""


@dataclass(frozen=True, slots=True)
class Expanded:
    """The template after AWS::LanguageExtensions, and how many Fn::Sub SAM CLI would have flattened."""

    template: dict[str, Any]
    kept_subs: int


def pseudo_parameters(*, stack_name: str, region: str, account_id: str) -> dict[str, str]:
    """The pseudo-parameters CloudFormation knows when it transforms a new stack's template."""
    partition = "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"
    return {
        "AWS::StackName": stack_name,
        "AWS::Region": region,
        "AWS::AccountId": account_id,
        "AWS::Partition": partition,
    }


def expand(
    sam: SamCli,
    packaged: Path,
    values: Mapping[str, str],
    env: Mapping[str, str],
    *,
    work_dir: Path,
    mode: Literal["keep-sub", "plain"] = "keep-sub",
) -> Expanded:
    """AWS::LanguageExtensions by SAM CLI's implementation; ``values``: parameters and pseudo-parameters."""
    values_file = work_dir / f"expand-values-{mode}.json"
    values_file.write_text(json.dumps(dict(values)), encoding="utf-8")
    result = run(
        [str(sam.python), "-c", EXPAND_SCRIPT, str(packaged), str(values_file), mode],
        env=env,
        what="AWS::LanguageExtensions (SAM CLI's samcli.lib.cfn_language_extensions)",
    )
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise TransformError(f"SAM CLI's expansion printed no JSON ({exc}): {result.stdout[:200]!r}") from None
    expanded: dict[str, Any] = data["expanded"]
    return Expanded(template=expanded, kept_subs=int(data["kept_subs"]))


def check_expanded(template: Mapping[str, Any]) -> None:
    """What CloudFormation's AWS::Serverless step could not take from the expanded template."""
    resources: dict[str, Any] = dict(template.get("Resources") or {})
    for section in ("Resources", "Conditions", "Outputs"):
        left = [key for key in (template.get(section) or {}) if str(key).startswith("Fn::ForEach::")]
        if left:
            raise TransformError(f"{section}: {', '.join(left)} left after AWS::LanguageExtensions")
    for where, text in _strings_outside_sub(template, ""):
        for name in _PLACEHOLDER.findall(text):
            if name.split(".", 1)[0] in resources:
                raise TransformError(
                    f"{where}: ${{{name}}} is plain text after AWS::LanguageExtensions (its Fn::Sub is gone): "
                    "the resource reference would reach the stack as a literal"
                )
    for lid, resource in resources.items():
        kind, props = resource.get("Type"), resource.get("Properties") or {}
        key = {"AWS::Serverless::Function": "CodeUri", "AWS::Serverless::LayerVersion": "ContentUri"}.get(str(kind))
        if key is None or "InlineCode" in props or "ImageUri" in props:
            continue
        location = props.get(key)
        if not _is_s3_location(location):
            raise TransformError(
                f"{lid}.{key} is {json.dumps(location)} after AWS::LanguageExtensions, not an S3 location: "
                "sam package did not place this resource's code"
            )


def translate(expanded: Mapping[str, Any], parameters: Mapping[str, str], region: str) -> dict[str, Any]:
    """AWS::Serverless by samtranslator (in-process, offline); refuses a template it leaves incomplete."""
    from boto3.session import Session
    from samtranslator.model.exceptions import InvalidDocumentException
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    def managed_policy_map() -> dict[str, str]:
        raise TransformError("the SAM translation asked for IAM's managed-policy map (an AWS call)")

    translator = Translator(
        managed_policy_map=None, sam_parser=Parser(), plugins=[], boto_session=Session(region_name=region)
    )
    try:
        translated: dict[str, Any] = translator.translate(
            sam_template=copy.deepcopy(dict(expanded)),
            parameter_values=dict(parameters),
            get_managed_policy_map=managed_policy_map,
        )
    except InvalidDocumentException as exc:
        causes = "; ".join(str(cause) for cause in exc.causes)
        raise TransformError(f"AWS::Serverless (samtranslator) refused the expanded template: {causes}") from None
    finally:
        # The translator times itself into a Metrics whose publisher is a no-op; unpublished, it
        # logs "There are unpublished metrics" when collected.
        translator.metrics.publish()
    if "Transform" in translated:
        raise TransformError(f"Transform {translated['Transform']!r} left after AWS::Serverless")
    left = sorted(
        lid
        for lid, r in (translated.get("Resources") or {}).items()
        if str(r.get("Type")).startswith("AWS::Serverless")
    )
    if left:
        raise TransformError(f"AWS::Serverless left SAM resources untranslated: {', '.join(left)}")
    return translated


def _is_s3_location(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith("s3://") and len(value.split("/", 3)) == 4 and all(value.split("/", 3)[2:])
    return isinstance(value, dict) and bool(value.get("Bucket")) and bool(value.get("Key"))


def _strings_outside_sub(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings_outside_sub(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "Fn::Sub":
                yield from _strings_outside_sub(item, f"{where}.{key}" if where else str(key))
