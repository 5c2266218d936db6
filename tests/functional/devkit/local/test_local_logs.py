"""`workerless local`'s log lines: each names the function that wrote it (one process runs them all),
the template's LogLevel takes effect, and a terminal gets one readable line per record."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from workerless import observability
from workerless_devkit.local.logs import ReadableFormatter

ROOT = Path(__file__).resolve().parents[4]
TEMPLATE = ROOT / "template.yaml"
FAST = {"TickSeconds": "1", "LeaseSeconds": "30"}

pytestmark = pytest.mark.slow


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def json_lines(self) -> list[dict[str, Any]]:
        formatter = observability.JsonFormatter(service="workerless")
        return [json.loads(formatter.format(r)) for r in self.records]


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    library = logging.getLogger(observability.logger.name)
    library.addHandler(handler)
    yield handler
    library.removeHandler(handler)


def _names(topology: Any) -> dict[str, str]:
    return {spec.logical_id: spec.function_name for spec in topology.template.functions}


def test_each_line_names_its_function_at_the_templates_log_level(
    sheptra_emulator: Any, workerless_local: Any, records: Records
) -> None:
    # GIVEN a job that completes and one that fails for good
    done = sheptra_emulator.create_job("charge-payment", {"orderId": "1", "amount": 5})
    declined = sheptra_emulator.create_job("charge-payment", {"orderId": "2", "amount": 0})
    # WHEN local mode runs them with LogLevel=DEBUG (the template's parameter)
    topology = workerless_local(
        sheptra_emulator.env_file, TEMPLATE, parameters={**FAST, "LogLevel": "DEBUG"}, schedule_seconds=1
    )
    settled = topology.run_until(
        lambda: (
            {sheptra_emulator.job_state(j)["state"] for j in (done, declined)} <= {"completed", "failed"}
            and any(r.__dict__.get("lifecycle") == "failed" for r in records.records)
        ),
        max_seconds=120,  # a bound to give up at, not a speed target
    )
    assert settled
    names = _names(topology)
    lines = records.json_lines()
    steps = {(line.get("lifecycle"), line.get("function_name")) for line in lines if line.get("lifecycle")}
    # THEN the poller's steps name the poller, the handler's the handler (not whichever started last)
    assert ("activated", names["PollerFunction"]) in steps
    assert ("completed", names["chargepaymentFunction"]) in steps
    assert ("failed", names["chargepaymentFunction"]) in steps
    assert not [s for s in steps if s[0] in ("completed", "failed") and s[1] != names["chargepaymentFunction"]]
    assert not [s for s in steps if s[0] == "activated" and s[1] != names["PollerFunction"]]
    # ... and DEBUG took effect: the steps before an outcome are DEBUG lines
    assert any(line.get("lifecycle") == "started" and line["level"] == "DEBUG" for line in lines)


def test_a_warning_log_level_keeps_the_info_lines_out(
    sheptra_emulator: Any, workerless_local: Any, records: Records
) -> None:
    job = sheptra_emulator.create_job("send-receipt", {"orderId": "3"})
    topology = workerless_local(
        sheptra_emulator.env_file, TEMPLATE, parameters={**FAST, "LogLevel": "WARNING"}, schedule_seconds=1
    )
    assert topology.run_until(lambda: sheptra_emulator.job_state(job)["state"] == "completed", max_seconds=120)
    topology.stop()
    assert not [r for r in records.records if r.levelno < logging.WARNING]
    # The runtime's logger is back at its level when the topology stops.
    assert observability.logger.log_level == logging.getLogger(observability.logger.name).level


def test_the_readable_format_is_used_while_the_topology_runs_and_restored_after(
    sheptra_emulator: Any, workerless_local: Any
) -> None:
    handler = observability.logger.registered_handler
    before = handler.formatter
    topology = workerless_local(sheptra_emulator.env_file, TEMPLATE, parameters=FAST, log_format="readable")
    assert isinstance(handler.formatter, ReadableFormatter)
    topology.stop()
    assert handler.formatter is before


def test_a_readable_line_has_the_time_function_job_message_and_reason() -> None:
    record = logging.LogRecord("workerless", logging.ERROR, __file__, 1, "job failed", None, None)
    record.__dict__.update(
        function_id="chargepaymentFunction", job_type="charge-payment", job_id="42", error="amount must be positive"
    )
    line = ReadableFormatter().format(record)
    assert line[12:] == " chargepaymentFunction  charge-payment 42  ERROR job failed  error=amount must be positive"
