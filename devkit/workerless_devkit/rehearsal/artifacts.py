"""Every code location of the created stack resolves to an uploaded artifact that holds what runs.

From the transformed template (what CloudFormation creates), each ``S3Bucket``/``S3Key`` pair is
downloaded from moto's S3 into the bundle (``artifacts/<bucket>/<key>``). Then:

- each function's zip holds its handler's module at the zip's root (Handler ``app.handler`` ->
  ``app.py``), and moto's Lambda holds the same bytes (its CodeSha256 is the artifact's): the
  function was created from that upload, not from something else of the same name;
- the layer's zip holds the runtime package under ``python/workerless/``, with bytecode for the
  runtime's Python beside every module (``__pycache__/<module>.cpython-312.pyc``: Lambda's /opt is
  read-only, a layer without it compiles on every cold start), and nothing of the devkit.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from workerless_devkit.rehearsal.errors import ArtifactError
from workerless_devkit.rehearsal.stack import CreatedStack

#: What the devkit depends on and the runtime must not ship (tests/functional/project/test_layer_artifact.py).
DEVKIT_ONLY = ("workerless_devkit", "moto", "cryptography", "jwt", "ruamel", "samtranslator")
RUNTIME_PACKAGE = "workerless"


@dataclass(frozen=True, slots=True)
class Artifact:
    bucket: str
    key: str
    path: Path
    #: The logical IDs of the resources whose code it is.
    used_by: tuple[str, ...]


def download(template: Mapping[str, Any], s3: Any, artifacts_dir: Path) -> dict[tuple[str, str], Artifact]:
    """Every S3 object the template references, saved as ``artifacts_dir/<bucket>/<key>``."""
    users: dict[tuple[str, str], list[str]] = {}
    for lid, resource in (template.get("Resources") or {}).items():
        for bucket, key in _s3_locations(resource.get("Properties") or {}):
            users.setdefault((bucket, key), []).append(lid)
    from botocore.exceptions import ClientError

    saved: dict[tuple[str, str], Artifact] = {}
    for (bucket, key), used_by in sorted(users.items()):
        target = artifacts_dir / bucket / key
        if ".." in PurePosixPath(key).parts or not target.resolve().is_relative_to(artifacts_dir.resolve()):
            raise ArtifactError(f"{', '.join(used_by)}: S3 key {key!r} would leave the bundle's artifacts directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as exc:
            raise ArtifactError(f"{', '.join(used_by)}: s3://{bucket}/{key} was not uploaded ({exc})") from None
        target.write_bytes(body)
        saved[(bucket, key)] = Artifact(bucket=bucket, key=key, path=target, used_by=tuple(used_by))
    return saved


def check_functions(
    template: Mapping[str, Any], artifacts: Mapping[tuple[str, str], Artifact], stack: CreatedStack, lambda_client: Any
) -> dict[str, str]:
    """Each function's artifact holds its handler module and is what moto's Lambda runs; lid -> module."""
    modules: dict[str, str] = {}
    for lid, resource in sorted((template.get("Resources") or {}).items()):
        if resource.get("Type") != "AWS::Lambda::Function":
            continue
        props = resource.get("Properties") or {}
        code = props.get("Code") or {}
        artifact = artifacts.get((str(code.get("S3Bucket")), str(code.get("S3Key"))))
        if artifact is None:
            raise ArtifactError(f"{lid}: Code is {code!r}, not an uploaded S3 object")
        handler = str(props.get("Handler", ""))
        if not re.fullmatch(r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", handler):
            raise ArtifactError(f"{lid}: Handler {handler!r} is not module.function")
        module = handler.rsplit(".", 1)[0].replace(".", "/") + ".py"
        names = _names(artifact.path, lid)
        if module not in names:
            raise ArtifactError(
                f"{lid}: its artifact s3://{artifact.bucket}/{artifact.key} has no {module} at its root "
                f"(Handler {handler}); it holds {sorted(names)[:10]}"
            )
        configuration = lambda_client.get_function_configuration(FunctionName=stack.physical_id(lid))
        digest = base64.b64encode(hashlib.sha256(artifact.path.read_bytes()).digest()).decode()
        if configuration.get("CodeSha256") != digest:
            raise ArtifactError(
                f"{lid}: the function's CodeSha256 {configuration.get('CodeSha256')} is not its artifact's {digest}"
            )
        modules[lid] = module
    if not modules:
        raise ArtifactError("the transformed template creates no AWS::Lambda::Function")
    return modules


def check_layers(template: Mapping[str, Any], artifacts: Mapping[tuple[str, str], Artifact]) -> dict[str, int]:
    """Each layer holds the runtime package with bytecode for its runtime; lid -> modules checked."""
    checked: dict[str, int] = {}
    for lid, resource in sorted((template.get("Resources") or {}).items()):
        if resource.get("Type") != "AWS::Lambda::LayerVersion":
            continue
        props = resource.get("Properties") or {}
        content = props.get("Content") or {}
        artifact = artifacts.get((str(content.get("S3Bucket")), str(content.get("S3Key"))))
        if artifact is None:
            raise ArtifactError(f"{lid}: Content is {content!r}, not an uploaded S3 object")
        runtimes = [str(r) for r in props.get("CompatibleRuntimes") or []]
        tags = {_cache_tag(lid, r) for r in runtimes}
        if len(tags) != 1:
            raise ArtifactError(f"{lid}: CompatibleRuntimes {runtimes!r} name no one Python runtime")
        tag = tags.pop()
        names = _names(artifact.path, lid)
        sources = sorted(n for n in names if n.startswith(f"python/{RUNTIME_PACKAGE}/") and n.endswith(".py"))
        if f"python/{RUNTIME_PACKAGE}/__init__.py" not in names:
            raise ArtifactError(f"{lid}: its artifact has no python/{RUNTIME_PACKAGE}/__init__.py (the runtime)")
        missing = [
            s for s in sources if f"{s.rsplit('/', 1)[0]}/__pycache__/{s.rsplit('/', 1)[1][:-3]}.{tag}.pyc" not in names
        ]
        if missing:
            raise ArtifactError(
                f"{lid}: {len(missing)} of {len(sources)} runtime modules have no {tag} bytecode, e.g. {missing[:3]}"
            )
        shipped = {
            PurePosixPath(n).parts[1] for n in names if n.startswith("python/") and len(PurePosixPath(n).parts) > 2
        }
        devkit = sorted(shipped & set(DEVKIT_ONLY))
        if devkit:
            raise ArtifactError(f"{lid}: the layer ships what only the devkit needs: {', '.join(devkit)}")
        checked[lid] = len(sources)
    if not checked:
        raise ArtifactError("the transformed template creates no AWS::Lambda::LayerVersion")
    return checked


def _cache_tag(lid: str, runtime: str) -> str:
    found = re.fullmatch(r"python(\d)\.(\d+)", runtime)
    if not found:
        raise ArtifactError(f"{lid}: runtime {runtime!r} is not a Python runtime")
    return f"cpython-{found.group(1)}{found.group(2)}"


def _names(path: Path, lid: str) -> set[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            return set(archive.namelist())
    except zipfile.BadZipFile:
        raise ArtifactError(f"{lid}: its artifact {path.name} is not a zip file") from None


def _s3_locations(value: Any) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        if isinstance(value.get("S3Bucket"), str) and isinstance(value.get("S3Key"), str):
            yield value["S3Bucket"], value["S3Key"]
        for item in value.values():
            yield from _s3_locations(item)
    elif isinstance(value, list):
        for item in value:
            yield from _s3_locations(item)
