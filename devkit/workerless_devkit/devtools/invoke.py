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

import difflib
import json
import traceback
from pathlib import Path
from typing import Any

from workerless._core.model import Outcome
from workerless.errors import ConfigurationError, WorkerlessError


class HandlerLoadError(WorkerlessError):
    """``functions/<type>/app.py`` cannot run in Lambda: it does not import (a syntax error, an
    exception at import) or its ``handler`` is not a ``@job_handler``. ``detail`` is what to show:
    the syntax error's line, or the import's traceback from the app's own frames."""

    def __init__(self, message: str, *, app: Path, detail: str = "") -> None:
        super().__init__(message)
        self.app = app
        self.detail = detail


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
    """Run the handler of ``job_type``'s route (``functions_dir/<route>/app.py``, the route named by
    the type's letters and digits; a directory named as the type itself is taken first) on one
    made-up job of ``job_type``.

    Returns ``{"job": {...}, "outcome": {...}, "logs": [...]}``: the made-up job's id, type and
    retries, the outcome that would be reported, and the lines the handler sent with ``job.log``.
    """
    from workerless.testing import make_activated_job, run_handler

    from workerless_devkit.devtools.scaffold import stem

    app = Path(functions_dir) / job_type / "app.py"
    if not app.is_file():
        app = Path(functions_dir) / stem(job_type) / "app.py"
    if not app.is_file():
        raise ConfigurationError(_no_handler(job_type, Path(functions_dir), app), key="TYPE")
    handler = _load(app)
    processor = getattr(handler, "processor", None)
    if processor is None:
        raise HandlerLoadError(
            f"{app}: `handler` is not wrapped by @job_handler({job_type!r}): Lambda would call it with the SQS "
            "event, not a Job, and no job would be claimed, run or reported",
            app=app,
        )
    if processor.job_type != job_type:
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


def _no_handler(job_type: str, functions_dir: Path, app: Path) -> str:
    known = sorted(p.parent.name for p in functions_dir.glob("*/app.py"))
    close = difflib.get_close_matches(job_type, known, n=1, cutoff=0.75)
    if close:
        return f"no handler for job type {job_type!r} ({app} does not exist): did you mean {close[0]!r}?"
    listed = f" (routes here: {', '.join(known)})" if known else ""
    return (
        f"no handler for job type {job_type!r}: {app} does not exist{listed}; scaffold one with "
        f"`workerless new-handler {job_type}`"
    )


def _load(app: Path) -> Any:
    """The module's ``handler``; a module that does not import is a :class:`HandlerLoadError` that
    shows where (Lambda would fail the same way, at every cold start)."""
    from workerless.testing import load_handler

    try:
        return load_handler(app)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "?"
        pointer = ""
        if exc.text:
            pointer = f"\n    {exc.text.rstrip()}\n    {' ' * max(0, (exc.offset or 1) - 1)}^"
        raise HandlerLoadError(f"{app} {where}: SyntaxError: {exc.msg}", app=app, detail=pointer.lstrip("\n")) from None
    except AttributeError as exc:
        raise HandlerLoadError(f"{app} defines no `handler`", app=app) from exc
    except Exception as exc:  # noqa: BLE001 - whatever the module raises at import is the user's to see
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == app.resolve()]
        detail = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(exc))
        raise HandlerLoadError(
            f"{app} raised {type(exc).__name__} at import: {exc}", app=app, detail=detail.rstrip()
        ) from None
