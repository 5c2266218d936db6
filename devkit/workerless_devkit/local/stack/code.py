"""The code a created stack runs: each function's uploaded zip, and the runtime layer checked
against the runtime this process imported.

Local mode loads a function's handler from the directory its code zip is extracted to (not from the
source tree). The layer cannot be loaded the same way: every function runs in this one process,
where ``workerless`` is already imported from the installed package (and the shipped layer is built
for arm64). :func:`check_layer` holds the two together instead: every ``workerless/**.py`` of the
layer's zip must be byte-identical to the imported package's file, and each side must have the
same files, so what runs is what ships.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

from workerless_devkit.local.stack.bundle import BundleError

#: Where a Python layer's packages live in its zip (Lambda puts /opt/python on sys.path).
LAYER_PYTHON_DIR = "python"


class CodeMismatchError(BundleError):
    """The stack's layer does not ship the runtime this process runs: names the files that differ."""


def s3_location(code: Any, where: str) -> tuple[str, str]:
    """(bucket, key) of a resolved ``Code`` / ``Content`` property."""
    if (
        not isinstance(code, dict)
        or not isinstance(code.get("S3Bucket"), str)
        or not isinstance(code.get("S3Key"), str)
    ):
        raise BundleError(f"{where}: expected S3Bucket and S3Key (what sam package writes), got {code!r}")
    return code["S3Bucket"], code["S3Key"]


def fetch(s3: Any, bucket: str, key: str, where: str) -> bytes:
    """An artifact's bytes from the embedded S3."""
    try:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as exc:  # noqa: BLE001 - any failure here is the same problem, named
        raise BundleError(f"{where}: artifact s3://{bucket}/{key} cannot be read: {exc}") from None
    return body


def extract_code(data: bytes, target: Path, where: str) -> Path:
    """Extract a function's code zip into ``target`` (created); the directory."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise BundleError(f"{where}: its code artifact is not a zip file") from None
    with archive:
        for name in archive.namelist():
            path = PurePosixPath(name)
            if path.is_absolute() or ".." in path.parts:
                raise BundleError(f"{where}: its code zip has an entry outside its root: {name!r}")
        target.mkdir(parents=True, exist_ok=False)
        archive.extractall(target)
    return target


def check_layer(data: bytes, where: str, package_dir: Path | None = None) -> int:
    """Check a layer zip ships exactly the imported ``workerless`` package's ``.py`` files, byte for
    byte; how many files were compared. Raises :class:`CodeMismatchError` naming the differences."""
    if package_dir is None:
        import workerless

        package_dir = Path(workerless.__file__).parent
    prefix = f"{LAYER_PYTHON_DIR}/workerless/"
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise CodeMismatchError(f"{where}: the layer artifact is not a zip file") from None
    with archive:
        shipped = {
            name[len(LAYER_PYTHON_DIR) + 1 :]: archive.read(name)
            for name in archive.namelist()
            if name.startswith(prefix) and name.endswith(".py")
        }
    if not shipped:
        raise CodeMismatchError(f"{where}: the layer has no {prefix}*.py: it does not ship the workerless runtime")
    running = {
        path.relative_to(package_dir.parent).as_posix(): path
        for path in package_dir.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    differ = sorted(
        name for name, content in shipped.items() if name in running and running[name].read_bytes() != content
    )
    only_layer = sorted(set(shipped) - set(running))
    only_here = sorted(set(running) - set(shipped))
    if differ or only_layer or only_here:
        problems = []
        if differ:
            problems.append(f"differ: {', '.join(differ)}")
        if only_layer:
            problems.append(f"only in the layer: {', '.join(only_layer)}")
        if only_here:
            problems.append(f"only in the imported package: {', '.join(only_here)}")
        raise CodeMismatchError(
            f"{where}: the layer does not ship the workerless runtime this process imported from {package_dir} "
            f"({'; '.join(problems)}): rebuild it (make build) and the bundle, or install the runtime it ships"
        )
    return len(shipped)
