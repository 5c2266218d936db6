"""The rehearsal bundle: what a rehearsed stack is, on disk, for local mode to run.

The format is a contract with local mode's reader; change it only together with the reader::

    <out>/bundle.json        {"stack_name", "region", "account_id", "sam_cli_version",
                              "artifact_bucket", "parameters": {name: value}}
                             (parameters: every parameter the template declares, with the value the
                             stack was created with: given, else the template's Default, as text)
    <out>/packaged.yaml      what `sam package` wrote
    <out>/expanded.json      after AWS::LanguageExtensions (SAM CLI's implementation)
    <out>/transformed.json   after AWS::Serverless: what CloudFormation creates (no Transform key)
    <out>/artifacts/<bucket>/<key>   every S3 object transformed.json references
    <out>/stack.json         {"resources": [{"logical_id", "type", "physical_id"}], "skipped_types": [...]}
                             (also "stack_name", "region", "stack_id", "skipped": {logical id: type})

Besides the contract, ``<out>/rehearsal.json`` is the run's report, and ``<out>/others/<stack>/``
holds the bundle (same format) of each further stack rehearsed side by side. ``rehearsal.json``
has the lint findings, the `sam deploy` attempt and what each check covered; no reader should
depend on it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The file names are the reader's (local mode's), the bundle's one contract; re-exported for the writer's users.
from workerless_devkit.local.stack.bundle import ARTIFACTS_DIR as ARTIFACTS_DIR
from workerless_devkit.local.stack.bundle import BUNDLE_FILE as BUNDLE_FILE
from workerless_devkit.local.stack.bundle import EXPANDED_FILE as EXPANDED_FILE
from workerless_devkit.local.stack.bundle import TRANSFORMED_FILE as TRANSFORMED_FILE
from workerless_devkit.rehearsal.errors import RehearsalError
from workerless_devkit.rehearsal.stack import CreatedStack

PACKAGED_FILE = "packaged.yaml"
STACK_FILE = "stack.json"
REPORT_FILE = "rehearsal.json"
#: Where run.py puts the bundles of the stacks after the first.
OTHERS_DIR = "others"
_BUNDLE_ENTRIES = {
    BUNDLE_FILE,
    PACKAGED_FILE,
    EXPANDED_FILE,
    TRANSFORMED_FILE,
    STACK_FILE,
    ARTIFACTS_DIR,
    REPORT_FILE,
    OTHERS_DIR,
}


@dataclass(frozen=True, slots=True)
class BundleHeader:
    """bundle.json."""

    stack_name: str
    region: str
    account_id: str
    sam_cli_version: str
    artifact_bucket: str
    parameters: Mapping[str, str]

    def as_json(self) -> dict[str, Any]:
        return {
            "stack_name": self.stack_name,
            "region": self.region,
            "account_id": self.account_id,
            "sam_cli_version": self.sam_cli_version,
            "artifact_bucket": self.artifact_bucket,
            "parameters": dict(self.parameters),
        }


def prepare(out: Path) -> Path:
    """An empty bundle directory at ``out`` (a previous bundle there is replaced, nothing else is)."""
    if out.exists():
        # Only what a bundle (or a rehearsal stopped half-way) holds; never someone's other files.
        strangers = sorted(p.name for p in out.iterdir() if p.name not in _BUNDLE_ENTRIES)
        if strangers:
            raise RehearsalError(
                f"{out} holds {', '.join(strangers[:5])}: not a rehearsal bundle; choose another output directory"
            )
        shutil.rmtree(out)
    (out / ARTIFACTS_DIR).mkdir(parents=True)
    return out


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def write_bundle(
    out: Path,
    header: BundleHeader,
    *,
    expanded: Mapping[str, Any],
    transformed: Mapping[str, Any],
    stack: CreatedStack,
    report: Mapping[str, Any],
) -> None:
    """Writes the bundle's JSON files; packaged.yaml and artifacts/ are written by their steps."""
    write_json(out / BUNDLE_FILE, header.as_json())
    write_json(out / EXPANDED_FILE, expanded)
    write_json(out / TRANSFORMED_FILE, transformed)
    write_json(out / STACK_FILE, stack.as_json())
    write_json(out / REPORT_FILE, report)
