"""The runtime's modules by import name (every .py under layers/workerless/workerless), for the tests
that check each of them: what they import, and that their docstring examples run."""

from __future__ import annotations

from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "layers" / "workerless" / "workerless"


def runtime_modules() -> list[str]:
    names = []
    for path in sorted(RUNTIME.rglob("*.py")):
        parts = list(path.relative_to(RUNTIME.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names
