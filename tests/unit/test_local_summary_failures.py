"""The run's summary tells a failure the engine will retry from a final one (issue 27, 5)."""

from __future__ import annotations

from workerless.model import Outcome
from workerless.report import outcome_fields
from workerless_devkit.local.summary import Summary


def test_a_retryable_failure_and_a_final_one_are_told_apart_in_the_table() -> None:
    summary = Summary()
    # The fields the pipeline emits with a reported failure (workerless.report.outcome_fields).
    summary.record_lifecycle("charge-payment", "failed", outcome_fields(Outcome.fail("card declined", retries=2)))
    summary.record_lifecycle("charge-payment", "failed", outcome_fields(Outcome.fail("gone", retries=0)))
    terminal = Outcome.fail("bad amount", retries=3, terminal=True)
    summary.record_lifecycle("send-receipt", "failed", outcome_fields(terminal))
    # A hand-back (poller giveback) is a "failed" event without an outcome's fields: neither.
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
