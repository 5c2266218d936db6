"""The run's summary and its failure lines tell a failure the engine will retry (how many retries are
left, and when) from a final one (issue 27, 5)."""

from __future__ import annotations

import logging
import time

from workerless import job_handler
from workerless._core.model import Outcome
from workerless._core.report import outcome_fields
from workerless.testing import run_handler
from workerless_devkit.local.logs import ReadableFormatter
from workerless_devkit.local.summary import Summary


def test_a_retryable_failure_and_a_final_one_are_told_apart_in_the_table() -> None:
    summary = Summary()
    # The fields the pipeline emits with a reported failure (workerless._core.report.outcome_fields).
    summary.record_lifecycle("charge-payment", "failed", outcome_fields(Outcome.fail("card declined", retries=2)))
    summary.record_lifecycle("charge-payment", "failed", outcome_fields(Outcome.fail("gone", retries=0)))
    terminal = Outcome.fail("bad amount", retries=3, terminal=True)
    summary.record_lifecycle("send-receipt", "failed", outcome_fields(terminal))
    # A hand-back (the poller's fail_for_good) is a "failed" event without an outcome's fields: neither.
    summary.record_lifecycle("send-receipt", "failed", {"reason": "queue send refused"})

    assert summary.count("charge-payment", "failed") == 2
    assert summary.count("charge-payment", "failed_will_retry") == 1
    assert summary.count("charge-payment", "failed_final") == 1
    assert summary.count("send-receipt", "failed_final") == 1
    assert summary.count("send-receipt", "failed_will_retry") == 0
    header, _, *rows = summary.table().splitlines()
    assert "failed will retry" in header and "failed final" in header
    total = rows[-1].split()
    assert total[0] == "total"
    columns = ["job type", "activated", "completed", "failed", "thrown", "lease lost", "will retry", "final"]
    assert dict(zip(columns, [total[0], *map(int, total[1:])], strict=True))["will retry"] == 1


def test_no_failure_columns_when_nothing_failed() -> None:
    summary = Summary()
    summary.record_lifecycle("charge-payment", "completed", {})
    assert "will retry" not in summary.table()


def _failed_line(fields: dict[str, object], created: float) -> str:
    """The readable line local mode prints for the pipeline's "job failed" record with ``fields``."""
    record = logging.LogRecord("workerless", logging.INFO, __file__, 1, "job failed", None, None)
    record.created = created
    record.msecs = 0
    record.function_name, record.job_type, record.job_id = "chargepaymentFunction", "charge-payment", "7"
    record.lifecycle = "failed"
    for key, value in fields.items():
        setattr(record, key, value)
    return ReadableFormatter().format(record)


def test_a_retryable_failure_line_says_how_many_retries_are_left_and_when() -> None:
    # The fields a handler's failure reports: an exception with 3 retries left and a 5 s backoff.
    def handler(job: object) -> None:
        raise RuntimeError("card declined")

    outcome = run_handler(job_handler("charge-payment")(handler), {"orderId": "7"}, retries=3, backoff_seconds=5)
    fields = outcome_fields(outcome)
    assert fields == {"reason": "RuntimeError: card declined", "terminal": False, "retries": 2, "retry_in_seconds": 5}
    created = 1_800_000_000.0
    at = time.strftime("%H:%M:%S", time.localtime(created + 5))
    line = _failed_line(fields, created)
    assert f"job failed, will retry: 2 retries left, at {at} (in 5 s)" in line, line
    assert "reason=RuntimeError: card declined" in line
    one = _failed_line({**fields, "retries": 1}, created)
    assert "will retry: 1 retry left" in one, one


def test_a_final_failure_line_says_it_is_final_and_why() -> None:
    created = 1_800_000_000.0
    terminal = _failed_line(outcome_fields(Outcome.fail("bad amount", retries=3, terminal=True)), created)
    assert "job failed, final: terminal" in terminal and "will retry" not in terminal, terminal
    spent = _failed_line(outcome_fields(Outcome.fail("gone", retries=0)), created)
    assert "job failed, final: no retries left" in spent and "will retry" not in spent, spent
    # A hand-back (no outcome fields) is neither: the line stays as it was.
    handed_back = _failed_line({"reason": "queue send refused"}, created)
    assert handed_back.endswith("job failed  reason=queue send refused"), handed_back
