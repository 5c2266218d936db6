"""Cold start: import time of each function's entry module in a fresh interpreter.

``python -X importtime -c "import app"`` with the function's directory as the working directory
(Lambda's task root) — the cumulative time of the ``app`` import, median of ``runs`` runs — beside
a bare ``import boto3`` measured the same way in the same run. The interpreter's own start-up
imports (encodings, site) are not counted for either.

The *cold path* (:func:`layer_cold_path`: the entry module and every module its first invocation
imports) runs as Lambda would run it: the layer ``make build`` ships (built here by its own Makefile
target, with only the bytecode the build compiles, for CPython 3.12), under a CPython 3.12 with
nothing on ``sys.path`` but the function's code, the layer, the standard library and the runtime's
boto3 (tests/functional/layer_probe.py lays it out, as the layer test does), ``-B`` so that no run
leaves bytecode for the next, each run a fresh interpreter; beside a bare ``import boto3`` from the
same runtime directory, in the same run.
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
#: Each function's code directory under functions/: a route's is its route name in template.yaml's
#: Mappings.Routes (letters and digits, b019e92), not its job type.
FUNCTION_DIRS = {"charge-payment": "chargepayment", "send-receipt": "sendreceipt", "generate-report": "generatereport"}


def function_dir(function: str) -> Path:
    """functions/<dir> of a function named as in the results (a route's job type, or the poller's name)."""
    return ROOT / "functions" / FUNCTION_DIRS.get(function, function)


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
#: (httpx, pydantic) and, for SQS-triggered functions, the batch loop (workerless._core.batch).
_COMMON = (
    "workerless._core.settings",
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
_BATCH = ("workerless._core.batch",)
COLD_PATH = {
    # The routes' Parameter Store read (its ssm client is built at the call, not at import).
    "poller": (
        *_COMMON,
        "workerless._poller.routes",
        "workerless.aws.parameters",
        "workerless._poller.poller",
        "workerless._heartbeat.ticket",
    ),
    "heartbeat": (*_COMMON, *_BATCH, "workerless._heartbeat.heartbeat", "workerless._heartbeat.ticket"),
    "deadletter": (*_COMMON, *_BATCH, "workerless._deadletter.deadletter"),
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
        cwd=function_dir(function),
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


def _build_layer(work: Path) -> tuple[str, Path, Path]:
    """The shipped layer (its Makefile target), runnable on this machine; the runtime's boto3.

    Returns (python3.12, layer python/ directory, runtime packages directory)."""
    import shutil
    import tempfile

    from tests.functional.project.test_layer_artifact import (
        LAYER_SOURCE,
        _make_env,
        _run,
        _runtime_packages,
        _swap_native_modules,
    )

    python312 = _run(["make", "-s", "--no-print-directory", "print-python312"], cwd=LAYER_SOURCE, env=_make_env())
    python312_path = python312.stdout.strip().splitlines()[-1]
    artifacts = work / "artifacts"
    _run(
        [
            "make",
            "--no-print-directory",
            "build-WorkerlessLayer",
            f"ARTIFACTS_DIR={artifacts}",
            f"PYTHON={sys.executable}",
            f"PYTHON312={python312_path}",
        ],
        cwd=LAYER_SOURCE,
        env=_make_env(),
    )
    runnable = work / "runnable" / "python"
    shutil.copytree(artifacts / "python", runnable)
    _swap_native_modules(python312_path, artifacts / "python", runnable, Path(tempfile.mkdtemp(dir=work)))
    return python312_path, runnable, _runtime_packages(python312_path)


def _probe_seconds(python312: str, task: Path, layer: Path, runtime: Path, modules: tuple[str, ...]) -> float:
    """Wall seconds of ``import app`` plus ``modules`` in a fresh CPython 3.12 laid out as Lambda."""
    import json

    probe = ROOT / "tests" / "functional" / "layer_probe.py"
    args = {"mode": "import", "task": str(task), "layer": str(layer), "runtime": str(runtime)}
    args |= {"modules": list(modules), "clients": []}
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "AWS_REGION": "us-east-1", "LAMBDA_TASK_ROOT": str(task)}
    proc = subprocess.run(
        [python312, "-I", "-S", "-B", str(probe), json.dumps(args)],
        cwd=task,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return float(json.loads(proc.stdout)["all_seconds"])


def layer_cold_path(runs: int = 5) -> dict[str, Any]:
    """Cold path per function from the built layer (see the module docstring): median of ``runs``,
    each beside a bare ``import boto3`` from the runtime's directory; ratio = median of the pairs'."""
    import shutil
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="workerless-bench-layer-"))
    try:
        python312, layer, runtime = _build_layer(work)
        bare = work / "bare-boto3"
        bare.mkdir()
        (bare / "app.py").write_text("import boto3\n", encoding="utf-8")
        out: dict[str, Any] = {}
        for function in FUNCTIONS:
            task = work / "task" / function
            shutil.copytree(function_dir(function), task)
            cold, base = [], []
            _probe_seconds(python312, task, layer, runtime, COLD_PATH[function])  # file-system caches warm
            for _ in range(runs):
                base.append(_probe_seconds(python312, bare, layer, runtime, ()))
                cold.append(_probe_seconds(python312, task, layer, runtime, COLD_PATH[function]))
            out[function] = {
                "cold_path_ms": round(1000 * statistics.median(cold), 1),
                "cold_path_boto3_ms": round(1000 * statistics.median(base), 1),
                "cold_path_ratio": round(statistics.median(c / b for c, b in zip(cold, base, strict=True)), 2),
                "python": "3.12",
            }
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cold_start(runs: int = 7) -> dict[str, Any]:
    """Median of ``runs`` for every function, each run paired with a bare ``import boto3`` measured
    right before it (interleaved, so that a busy machine slows both alike); ratio = median of the
    per-pair ratios."""
    # one throwaway round: bytecode caches (.pyc) written, file system caches warm, as in a Lambda image
    import_ms("boto3", ROOT)
    for function in FUNCTIONS:
        import_ms("app", function_dir(function))
    startup = _startup_modules()
    out: dict[str, Any] = {}
    all_boto3: list[float] = []
    for function in FUNCTIONS:
        entry, boto3_runs, cold, children = [], [], [], []
        for _ in range(runs):
            boto3_runs.append(import_ms("boto3", ROOT)[0])
            ms, children_now = import_ms("app", function_dir(function))
            entry.append(ms)
            children = children_now
            cold.append(cold_path_ms(function, startup))
        all_boto3.extend(boto3_runs)
        boto3_ms = statistics.median(boto3_runs)
        out[function] = {
            "import_ms": round(statistics.median(entry), 1),
            "boto3_ms": round(boto3_ms, 1),
            "ratio": round(statistics.median(e / b for e, b in zip(entry, boto3_runs, strict=True)), 2),
            # the same cold path in this interpreter with its own bytecode caches (for the heaviest list)
            "cold_path_import_ms": round(statistics.median(cold), 1),
            "cold_path_dev_ratio": round(statistics.median(c / b for c, b in zip(cold, boto3_runs, strict=True)), 2),
            "heaviest_imports_ms": {name: round(ms, 1) for ms, name in children},
            "cold_path_heaviest_ms": {name: round(ms, 1) for ms, name in cold_path_detail(function, startup)[1]},
        }
    try:
        layer = layer_cold_path(runs=max(3, runs - 2))
    except Exception as exc:  # noqa: BLE001 - no CPython 3.12 or no package index: say so, measure the rest
        for function in out:
            out[function].update({"cold_path_ms": None, "cold_path_ratio": None, "cold_path_error": str(exc)[:300]})
        return out
    for function, figures in layer.items():
        out[function].update(figures)
    return out
