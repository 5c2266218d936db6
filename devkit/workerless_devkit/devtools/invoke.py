"""``workerless invoke TYPE --variables JSON``: run one handler on one made-up job, no engine, no AWS.

The handler (``functions/<type>/app.py``) runs through the handler-testing kit
(:func:`workerless.testing.run_handler`), i.e. the wrapper's own outcome mapping: a dict completes,
``TerminalError`` fails with no retries, ``ThrowError`` throws, anything else fails with
``retries - 1``. What comes back is the report the wrapper would store and send to the engine.

Example:
    >>> report = invoke_handler("charge-payment", {"orderId": "7", "amount": 5})  # doctest: +SKIP
    >>> report["outcome"]["kind"]                                                   # doctest: +SKIP
    'complete'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workerless.errors import ConfigurationError
from workerless.model import Outcome


def parse_variables(text: str | None) -> dict[str, Any]:
    """``--variables``: a JSON object, or ``@FILE`` holding one. None is ``{}``."""
    if text is None:
        return {}
    source = "--variables"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read variables file {source!r}: {exc.strerror}", key="variables"
            ) from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"{source} is not valid JSON: {exc}", key="variables") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{source} must be a JSON object, got {type(value).__name__}", key="variables")
    return value


def outcome_dict(outcome: Outcome) -> dict[str, Any]:
    """The outcome as the engine would be told it (only the fields that kind of outcome uses)."""
    if outcome.kind == "complete":
        return {"kind": "complete", "variables": outcome.variables or {}}
    if outcome.kind == "throw":
        return {
            "kind": "throw",
            "error_code": outcome.error_code,
            "message": outcome.message,
            "variables": outcome.variables or {},
        }
    return {
        "kind": "fail",
        "message": outcome.message,
        "retries": outcome.retries,
        "backoff_seconds": outcome.backoff_seconds,
        "terminal": outcome.terminal,
    }


def invoke_handler(
    job_type: str,
    variables: dict[str, Any],
    *,
    functions_dir: str | Path = "functions",
    retries: int = 3,
) -> dict[str, Any]:
    """Run ``functions_dir/<job_type>/app.py``'s handler on one made-up job of ``job_type``.

    Returns ``{"job": {...}, "outcome": {...}, "logs": [...]}``: the made-up job's id, type and
    retries, the outcome that would be reported, and the lines the handler sent with ``job.log``.
    """
    from workerless.testing import load_handler, make_activated_job, run_handler

    app = Path(functions_dir) / job_type / "app.py"
    if not app.is_file():
        raise ConfigurationError(
            f"no handler for job type {job_type!r}: {app} does not exist (scaffold one with `workerless new-handler "
            f"{job_type}`)",
            key="TYPE",
        )
    handler = load_handler(app)
    processor = getattr(handler, "processor", None)
    if processor is not None and processor.job_type != job_type:
        raise ConfigurationError(
            f"{app} handles job type {processor.job_type!r}, not {job_type!r} (check its @job_handler)", key="TYPE"
        )
    job = make_activated_job(job_type, variables, engine="local", retries=retries)
    logs: list[dict[str, Any]] = []
    outcome = run_handler(handler, job, logs=logs)
    return {
        "job": {"id": job.ref.job_id, "type": job_type, "retries": retries},
        "outcome": outcome_dict(outcome),
        "logs": [str(line.get("message", "")) for line in logs],
    }
