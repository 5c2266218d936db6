"""A rehearsal bundle: what a deploy would hand CloudFormation, written to one directory.

The deploy rehearsal writes it (``sam build`` + ``sam package`` on loopback, then the two
transforms CloudFormation runs server-side); local mode creates the stack from it
(:mod:`workerless_devkit.local.stack`). The contract::

    <dir>/bundle.json        {"stack_name", "region", "account_id", "sam_cli_version", "artifact_bucket",
                              "parameters": {name: value}}
    <dir>/packaged.yaml      what sam package wrote
    <dir>/expanded.json      after AWS::LanguageExtensions (SAM CLI's implementation)
    <dir>/transformed.json   after AWS::Serverless: what CloudFormation creates (no Transform left)
    <dir>/artifacts/<bucket>/<key>   every S3 object transformed.json references
    <dir>/stack.json         the stack the rehearsal created (not read here)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workerless_devkit.local.template import Place, TemplateError

BUNDLE_FILE = "bundle.json"
TRANSFORMED_FILE = "transformed.json"
EXPANDED_FILE = "expanded.json"
ARTIFACTS_DIR = "artifacts"
#: A region of the aws partition (us-west-2, eu-central-1, ap-southeast-3 ...) and an account id.
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+$")
_ACCOUNT = re.compile(r"^[0-9]{12}$")
#: Regions of other partitions (aws-cn, aws-us-gov, the isolated ones): their ARNs begin arn:<partition>.
_OTHER_PARTITIONS = ("cn-", "us-gov-", "us-iso")


class BundleError(TemplateError):
    """A rehearsal bundle local mode cannot run: names the file and what is wrong."""


@dataclass(frozen=True, slots=True)
class Bundle:
    """A rehearsal bundle directory, its bundle.json read and checked."""

    path: Path
    stack_name: str
    region: str
    account_id: str
    artifact_bucket: str
    parameters: dict[str, str] = field(default_factory=dict)
    sam_cli_version: str = ""

    @property
    def place(self) -> Place:
        """The account and region its stack is created and run in."""
        return Place(self.region, self.account_id)

    @property
    def transformed_path(self) -> Path:
        return self.path / TRANSFORMED_FILE

    @property
    def expanded_path(self) -> Path:
        return self.path / EXPANDED_FILE

    def transformed(self) -> dict[str, Any]:
        """transformed.json: the template CloudFormation would receive."""
        return _read_json(self.transformed_path)

    def expanded(self) -> dict[str, Any]:
        """expanded.json: the packaged template after AWS::LanguageExtensions, before AWS::Serverless."""
        return _read_json(self.expanded_path)

    def artifacts(self) -> dict[tuple[str, str], Path]:
        """Every artifact file: (bucket, key) -> its path."""
        root = self.path / ARTIFACTS_DIR
        found: dict[tuple[str, str], Path] = {}
        if not root.is_dir():
            return found
        for bucket in sorted(p for p in root.iterdir() if p.is_dir()):
            for file in sorted(p for p in bucket.rglob("*") if p.is_file()):
                found[(bucket.name, file.relative_to(bucket).as_posix())] = file
        return found


def load_bundle(path: str | Path) -> Bundle:
    """Read ``path``'s bundle.json and check the files local mode needs are there."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise BundleError(f"rehearsal bundle {str(root)!r} is not a directory")
    data = _read_json(root / BUNDLE_FILE)
    where = str(root / BUNDLE_FILE)
    values: dict[str, str] = {}
    for key in ("stack_name", "region", "account_id", "artifact_bucket"):
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise BundleError(f"{where}: {key} must be a non-empty string, got {value!r}")
        values[key] = value
    parameters = data.get("parameters") or {}
    if not isinstance(parameters, Mapping) or not all(isinstance(k, str) for k in parameters):
        raise BundleError(f"{where}: parameters must be a mapping of parameter name to value")
    # The stack runs where the bundle says (its ARNs, queue URLs, the functions' AWS_REGION, the IAM
    # check): any region of the aws partition, any account.
    if not _REGION.fullmatch(values["region"]):
        raise BundleError(f"{where}: region {values['region']!r} is not an AWS region name")
    if values["region"].startswith(_OTHER_PARTITIONS):
        raise BundleError(
            f"{where}: region {values['region']} is not in the aws partition: local mode makes arn:aws: ARNs only"
        )
    if not _ACCOUNT.fullmatch(values["account_id"]):
        raise BundleError(f"{where}: account_id {values['account_id']!r} is not a 12-digit AWS account id")
    for name in (TRANSFORMED_FILE,):
        if not (root / name).is_file():
            raise BundleError(f"rehearsal bundle {str(root)!r} has no {name}")
    return Bundle(
        path=root,
        stack_name=values["stack_name"],
        region=values["region"],
        account_id=values["account_id"],
        artifact_bucket=values["artifact_bucket"],
        parameters={str(k): _text(v) for k, v in parameters.items()},
        sam_cli_version=str(data.get("sam_cli_version") or ""),
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BundleError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise BundleError(f"{str(path)!r} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BundleError(f"{str(path)!r}: expected a JSON object at the top level")
    return data


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
