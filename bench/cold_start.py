"""Cold start: import time of each function's entry module in a fresh interpreter.

``python -X importtime -c "import app"`` with the function's directory as the working directory
(Lambda's task root) — the cumulative time of the ``app`` import, median of ``runs`` runs — beside
a bare ``import boto3`` measured the same way in the same run. The interpreter's own start-up
imports (encodings, site) are not counted for either.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = ("poller", "heartbeat", "deadletter", "charge-payment", "send-receipt", "generate-report")
_LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def import_ms(module: str, cwd: Path) -> tuple[float, list[tuple[float, str]]]:
    """Cumulative import time of ``module`` (ms) and its heaviest direct children."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERLESS_", "AWS_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "0"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    total = 0.0
    children: list[tuple[float, str]] = []
    pending: list[tuple[int, float, str]] = []
    for line in proc.stderr.splitlines():
        found = _LINE.match(line)
        if not found:
            continue
        cumulative, indent, name = int(found.group(2)) / 1000, len(found.group(3)), found.group(4)
        pending.append((indent, cumulative, name))
        if indent == 1 and name == module:
            total = cumulative
            # children of the top-level import are the lines at indent 3 just before it
            children = [(c, n) for i, c, n in pending if i == 3]
            pending = []
        elif indent == 1:
            pending = []
    children.sort(reverse=True)
    return total, children[:6]


#: What a first (cold) invocation imports lazily beyond the entry module, read from the code:
#: settings (pydantic), the runtime singletons, boto3 clients for SQS/DynamoDB, the engine adapter
#: (httpx, pydantic) and, for SQS-triggered functions, Powertools' batch utility.
_COMMON = (
    "workerless.settings",
    "workerless.runtime",
    "workerless.aws.clients",
    "boto3",
    "botocore.config",
    "botocore.exceptions",
    "workerless.aws.dynamo",
    "workerless.aws.sqs",
    "workerless.aws.secrets",
    "workerless.engines",
    "workerless.engines.sheptra",
)
_BATCH = ("aws_lambda_powertools.utilities.batch",)
COLD_PATH = {
    "poller": (*_COMMON, "workerless.poller", "workerless.ticket"),
    "heartbeat": (*_COMMON, *_BATCH, "workerless.heartbeat", "workerless.ticket"),
    "deadletter": (*_COMMON, *_BATCH, "workerless.deadletter"),
    "charge-payment": (*_COMMON, *_BATCH),
    "send-receipt": (*_COMMON, *_BATCH),
    "generate-report": (*_COMMON, *_BATCH),
}


def _startup_modules() -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True, timeout=60, check=True
    )
    return {m.group(4) for m in map(_LINE.match, proc.stderr.splitlines()) if m}


def cold_path_ms(function: str, startup: set[str]) -> float:
    """Entry module plus everything its first invocation imports: top-level import times summed."""
    return cold_path_detail(function, startup)[0]


def cold_path_detail(function: str, startup: set[str]) -> tuple[float, list[tuple[float, str]]]:
    """As :func:`cold_path_ms`, with the heaviest top-level imports (ms, module)."""
    statement = "import app; " + "; ".join(f"import {m}" for m in COLD_PATH[function])
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        cwd=ROOT / "functions" / function,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    total = 0.0
    top: list[tuple[float, str]] = []
    for line in proc.stderr.splitlines():
        found = _LINE.match(line)
        if found and len(found.group(3)) == 1 and found.group(4) not in startup:
            ms = int(found.group(2)) / 1000
            total += ms
            top.append((ms, found.group(4)))
    top.sort(reverse=True)
    return total, top[:6]


def cold_start(runs: int = 7) -> dict[str, Any]:
    """Median of ``runs`` for every function, each run paired with a bare ``import boto3`` measured
    right before it (interleaved, so that a busy machine slows both alike); ratio = median of the
    per-pair ratios."""
    # one throwaway round: bytecode caches (.pyc) written, file system caches warm, as in a Lambda image
    import_ms("boto3", ROOT)
    for function in FUNCTIONS:
        import_ms("app", ROOT / "functions" / function)
    startup = _startup_modules()
    out: dict[str, Any] = {}
    all_boto3: list[float] = []
    for function in FUNCTIONS:
        entry, boto3_runs, cold, children = [], [], [], []
        for _ in range(runs):
            boto3_runs.append(import_ms("boto3", ROOT)[0])
            ms, children_now = import_ms("app", ROOT / "functions" / function)
            entry.append(ms)
            children = children_now
            cold.append(cold_path_ms(function, startup))
        all_boto3.extend(boto3_runs)
        boto3_ms = statistics.median(boto3_runs)
        out[function] = {
            "import_ms": round(statistics.median(entry), 1),
            "boto3_ms": round(boto3_ms, 1),
            "ratio": round(statistics.median(e / b for e, b in zip(entry, boto3_runs, strict=True)), 2),
            "cold_path_import_ms": round(statistics.median(cold), 1),
            "cold_path_ratio": round(statistics.median(c / b for c, b in zip(cold, boto3_runs, strict=True)), 2),
            "heaviest_imports_ms": {name: round(ms, 1) for ms, name in children},
            "cold_path_heaviest_ms": {name: round(ms, 1) for ms, name in cold_path_detail(function, startup)[1]},
        }
    return out
