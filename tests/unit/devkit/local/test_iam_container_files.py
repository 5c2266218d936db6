"""Local mode's IAM check tells a call made while building the per-container engine adapter from
one a function's own code made by the files on the stack (devkit/.../local/iam/enforce.py): a
moved runtime module the list still names at its old path would classify nothing as "container"."""

from __future__ import annotations

from pathlib import Path

from workerless_devkit.local.iam import enforce


def test_the_container_files_and_dirs_exist_in_the_runtime() -> None:
    for name in enforce._CONTAINER_FILES:
        assert Path(name).is_file(), f"local IAM's container file {name} is not in the runtime"
    for name in enforce._CONTAINER_DIRS:
        assert Path(name).is_dir(), f"local IAM's container directory {name} is not in the runtime"
