"""The runtime's modules by import name (every .py under layers/workerless/workerless), for the tests
that check each of them: what they import, and that their docstring examples run."""

from __future__ import annotations

from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "layers" / "workerless" / "workerless"


def runtime_module_paths() -> dict[str, Path]:
    """Import name -> source file, in the files' order (a package is its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for path in sorted(RUNTIME.rglob("*.py")):
        parts = list(path.relative_to(RUNTIME.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def runtime_modules() -> list[str]:
    return list(runtime_module_paths())
