"""A first `make demo` (issue 27, 5): pip's output quiet, no "new release of pip" banner, in this
repository's Makefile and in the one `workerless init` writes. Read from what make would run
(`make -n`, every recipe forced), not from the Makefile's text."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from workerless_devkit.devtools.init import init_application

ROOT = Path(__file__).resolve().parents[3]


def _dry_run(directory: Path, *targets: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "MAKE"))}
    result = subprocess.run(
        ["make", "-n", "-B", *targets], cwd=directory, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout.splitlines()


def _check_pip_lines(lines: list[str], makefile_text: str) -> None:
    installs = [line for line in lines if "pip install" in line]
    assert len(installs) >= 3, lines
    for line in installs:
        assert " -q " in f" {line} ", f"pip prints its whole log on a first make: {line}"
        assert "--progress-bar on" not in line, line
    assert "export PIP_DISABLE_PIP_VERSION_CHECK := 1" in makefile_text


@pytest.mark.skipif(shutil.which("make") is None, reason="make is what runs these recipes")
def test_this_repositorys_first_make_demo_installs_quietly() -> None:
    _check_pip_lines(_dry_run(ROOT, "venv", "sam-venv"), (ROOT / "Makefile").read_text(encoding="utf-8"))


@pytest.mark.skipif(shutil.which("make") is None, reason="make is what runs these recipes")
def test_an_initialised_applications_first_make_demo_installs_quietly(tmp_path: Path) -> None:
    app = init_application(tmp_path / "myapp").directory
    lines = _dry_run(app, "venv", "sam-venv")
    _check_pip_lines(lines, (app / "Makefile").read_text(encoding="utf-8"))
    # One line per install says what is happening and that it happens once (as this repository's do).
    announced = [line for line in lines if line.startswith("echo ") and "first run only" in line]
    assert len(announced) == 2, lines
