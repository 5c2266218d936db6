"""`workerless local` with nothing listening at the engine URL (issue 27, 5): it fails (exit 1), the
poll back-off grows, and the final line's count of failed polls agrees with the failures printed
before it (those printed while draining included)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]

pytestmark = pytest.mark.slow


def _closed_port() -> int:
    # A port that was free a moment ago and has nothing listening: connections are refused.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_dead_engine_fails_the_run_with_a_count_that_agrees_with_the_lines(tmp_path: Path) -> None:
    env_file = tmp_path / "down.env"
    env_file.write_text(f"SHEPTRA_API_URL=http://127.0.0.1:{_closed_port()}\nSHEPTRA_TOKEN_ENDPOINT=\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERLESS_", "SHEPTRA_"))}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "workerless_devkit.cli",
            "local",
            "--template",
            str(ROOT / "template.yaml"),
            "--env-file",
            str(env_file),
            "--until-idle",
            "2",
            "--schedule-seconds",
            "2",
            "--max-seconds",
            "120",
            "--log-format",
            "json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    failures = []
    for line in output.splitlines():
        if line.startswith("{") and "poll failed; backing off" in line:
            failures.append(json.loads(line))
    final = re.search(r"workerless: the engine never answered: (\d+) failed poll\(s\)", result.stderr)
    assert final is not None, result.stderr[-3000:]
    assert int(final.group(1)) == len(failures) > 0
    # The back-off grew: the gaps between one invocation's failed polls are not all one second.
    by_invocation: dict[str, list[str]] = {}
    for failure in failures:
        by_invocation.setdefault(failure["function_request_id"], []).append(failure["timestamp"])
    assert max(len(stamps) for stamps in by_invocation.values()) <= 5, by_invocation
