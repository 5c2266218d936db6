"""No secret reaches a log line or an exception message.

For every engine, the pipeline runs in local mode (template.yaml's functions, the example handlers)
against the emulator with every function's Powertools logger at DEBUG, while faults push it down
its error paths (401 re-authentication, 5xx retries, dropped connections, DynamoDB errors, a
crash after the store and its re-report, duplicate deliveries). A spy on the emulator's router
collects every credential that crossed the wire in either direction — client secrets, access
tokens, API keys, worker session tokens, StageNext ack tokens, node-flow lease tokens — and every
captured line (the library's log records as Lambda would print them, stdout, stderr, every stdlib
log record at DEBUG, exception text included) is searched for each of them.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from workerless.observability import logger
from workerless_devkit.chaos.plan import Fault, FaultPlan
from workerless_devkit.chaos.run import ENGINES, RunConfig, run
from workerless_devkit.emulators.http import Request, Response

#: Runs the topology for seconds to minutes: `make test` runs it, `make test-fast` does not.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[4]
SECRET_KEY = re.compile(r"token|secret|session|password|api[-_]?key|authorization", re.IGNORECASE)
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-worker-session")
MIN_LENGTH = 12  # shorter values could match innocently (and no credential here is that short)


def error_paths() -> FaultPlan:
    """Faults that push the pipeline down its error paths (a fresh plan per run)."""
    return FaultPlan(
        {
            Fault.ENGINE_401: 0.15,
            Fault.ENGINE_503: 0.1,
            Fault.ENGINE_500: 0.05,
            Fault.ENGINE_DROP: 0.05,
            Fault.CRASH_AFTER_STORE: 0.1,
            Fault.SQS_DUPLICATE: 0.2,
            Fault.DYNAMODB_ERROR: 0.02,
        },
        seed=5,
    )


class Spy:
    """Wraps every route of an emulator's router; keeps every credential value it sees."""

    def __init__(self) -> None:
        self.values: set[str] = set()

    def attach(self, emulator: Any) -> None:
        router = emulator.router
        router._routes = [(m, p, r, self._wrap(fn)) for m, p, r, fn in router._routes]
        for name in ("client_secret", "api_key"):
            value = getattr(emulator, name, None)
            if isinstance(value, str):
                self.values.add(value)

    def _collect(self, data: Any, under_secret_key: bool = False) -> None:
        if isinstance(data, dict):
            for key, value in data.items():
                self._collect(value, under_secret_key or bool(SECRET_KEY.search(str(key))))
        elif isinstance(data, list):
            for item in data:
                self._collect(item, under_secret_key)
        elif isinstance(data, str) and under_secret_key and len(data) >= MIN_LENGTH:
            self.values.add(data)

    def _json(self, raw: bytes) -> Any:
        try:
            return json.loads(raw.decode() or "null")
        except (UnicodeDecodeError, ValueError):
            return None

    def _wrap(self, fn: Any) -> Any:
        def spy(request: Request) -> Response:
            for header in CREDENTIAL_HEADERS:
                value = request.header(header)
                if value:
                    self.values.add(value.removeprefix("Bearer ").strip())
            self._collect(self._json(request.body))
            response: Response = fn(request)
            self._collect(self._json(response.body))
            return response

        return spy


class Lines(logging.Handler):
    """Every record of the library's Powertools logger, formatted as Lambda would print it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logger.registered_formatter)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.mark.parametrize("engine", ENGINES)
def test_no_credential_appears_in_any_log_line_or_exception(
    engine: str, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    spy = Spy()
    caplog.set_level(logging.DEBUG)
    level = logger.log_level
    logger.setLevel("DEBUG")
    captured = Lines()
    powertools = logging.getLogger(logger.service)
    powertools.addHandler(captured)
    try:
        result = run(
            RunConfig(
                engine=engine,
                jobs=6,
                plan=error_paths(),
                template=ROOT / "template.yaml",
                handler_timeout=4.0,
                long_reports=0,
                max_seconds=8,  # enough for every error path; recovery is test_chaos_*'s business
                # ... and on a busy machine, on until a job has completed (the run's subject is the
                # logs of a working pipeline); 240 s is where it gives up, not a time it must beat.
                at_least_completed=1,
                give_up_seconds=240,
                log_level="DEBUG",
                on_emulator=spy.attach,
            )
        )
    finally:
        powertools.removeHandler(captured)
        logger.setLevel(level)
    out, err = capfd.readouterr()
    lines = [*captured.lines, *out.splitlines(), *err.splitlines()]
    lines += [record.getMessage() for record in caplog.records]
    lines += [logging.Formatter().formatException(r.exc_info) for r in caplog.records if r.exc_info]

    assert result.figures.completed > 0, "jobs ran"
    assert result.figures.faults_injected > 0, "the error paths were exercised"
    assert any('"level":"DEBUG"' in line for line in captured.lines), "DEBUG logging was on"
    assert len(spy.values) >= 2, f"the spy saw the credentials in use: {len(spy.values)}"
    leaked = sorted({value[:6] + "…" for value in spy.values for line in lines if value in line})
    assert leaked == [], f"{len(leaked)} credential(s) appear in the logs (prefixes shown): {leaked}"
