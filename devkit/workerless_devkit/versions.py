"""``workerless --version``: the installed distributions' versions, as pip sees them.

The devkit pins the runtime to its own version, so the two agree in any install pip made; the line
names both so that a mismatch (an editable checkout beside an older wheel) shows."""

from __future__ import annotations

from importlib import metadata

import workerless


def _installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def version_line() -> str:
    """``workerless 0.1.0`` when runtime and devkit agree, else both, each with where it came from."""
    runtime = _installed("workerless") or workerless.__version__
    devkit = _installed("workerless-devkit")
    if devkit is None or devkit == runtime:
        return f"workerless {runtime}"
    return f"workerless {runtime} (workerless-devkit {devkit}: the devkit expects workerless=={devkit})"
