"""The claim check's limits, pointers and cost line (workerless._core.claimcheck, bench/cost.py)."""

from __future__ import annotations

import pytest
from workerless._core.claimcheck import (
    DYNAMODB_ITEM_BYTES,
    OUTCOME_INLINE_BYTES,
    SQS_MARGIN_BYTES,
    PayloadRef,
    message_threshold,
)
from workerless._core.model import ActivatedJob, JobRef
from workerless.errors import MessageFormatError
from workerless_devkit.local.limits import DYNAMODB_MAX_ITEM_BYTES, item_size

from bench import cost


def test_the_message_threshold_is_the_queues_limit_less_the_margin() -> None:
    assert message_threshold(1_048_576) == 1_048_576 - SQS_MARGIN_BYTES
    assert message_threshold(262_144) == 262_144 - SQS_MARGIN_BYTES


def test_a_record_at_the_inline_limit_with_every_other_attribute_at_its_largest_fits_dynamodb() -> None:
    """The margin covers the record's other attributes, measured as local mode measures an item (AWS's
    rule: names and values): a 1 KB job key, a 1,024-character receipt handle, long notes."""
    assert DYNAMODB_ITEM_BYTES == DYNAMODB_MAX_ITEM_BYTES
    worst = {
        "pk": {"S": "k" * 1024},
        "status": {"S": "reported"},
        "owner": {"S": "o" * 100},
        "claim_expires_at": {"N": "1767225600.123456"},
        "job_type": {"S": "t" * 256},
        "claimed_at": {"N": "1767225600.123456"},
        "stored_at": {"N": "1767225600.123456"},
        "reported_at": {"N": "1767225600.123456"},
        "report_owed_at": {"N": "1767225600.123456"},
        "begun_at": {"N": "1767225600.123456"},
        "released_at": {"N": "1767225600.123456"},
        "expires_at": {"N": "1767830400"},
        "lease": {"S": "l" * 16},
        "receipt": {"S": "r" * 1024},
        "report_note": {"S": "n" * 512},
        "lost_reason": {"S": "n" * 512},
        "deliveries": {"N": "1000"},
        "outcome": {"B": b"x" * (OUTCOME_INLINE_BYTES - len("outcome"))},
    }
    assert item_size(worst) <= DYNAMODB_MAX_ITEM_BYTES


def test_a_pointer_round_trips_through_the_job_message_and_refuses_a_bad_one() -> None:
    job = ActivatedJob(JobRef("sheptra", "j1", "charge-payment", "r3"), {"big": "x"}, 10.0, 1.0, retries=3)
    ref = PayloadRef("bucket", "jobs/charge-payment/abc", 12, "00" * 32)
    parsed = ActivatedJob.from_message(job.to_message(payload=ref))
    assert parsed.payload == ref and parsed.variables == {}
    assert parsed.with_variables({"big": "x"}) == job
    with pytest.raises(MessageFormatError, match="payload"):
        PayloadRef.from_dict({"bucket": "b", "key": "k", "bytes": -1, "sha256": "x"})


def test_jobs_under_the_limits_cost_nothing_extra() -> None:
    priced = cost.claim_check_per_job(900_000, max_message_bytes=1_048_576, expiry_days=7, result_bytes=300_000)
    assert priced == {"value": 0.0, "parts": {"s3_put": 0.0, "s3_get": 0.0, "s3_storage": 0.0}, "objects": 0}


def test_an_offloaded_job_costs_its_put_get_and_storage_until_the_lifecycle_expiry() -> None:
    """A 2 MB job: one PUT ($0.005 / 1,000), one GET ($0.0004 / 1,000) and 2 MB stored for 7.5 days
    (the lifecycle's 7, rounded up to midnight) at $0.023 a GB-month; a 900 KB result adds the same."""
    one = cost.claim_check_per_job(2_000_000, max_message_bytes=1_048_576, expiry_days=7)
    months = 7.5 / (730 / 24)
    assert one["objects"] == 1
    assert one["parts"]["s3_put"] == pytest.approx(5e-6)
    assert one["parts"]["s3_get"] == pytest.approx(4e-7)
    assert one["parts"]["s3_storage"] == pytest.approx(0.002 * months * 0.023)
    both = cost.claim_check_per_job(2_000_000, max_message_bytes=1_048_576, expiry_days=7, result_bytes=900_000, gets=2)
    assert both["objects"] == 2
    assert both["parts"]["s3_get"] == pytest.approx(4 * 4e-7)
    assert both["value"] == pytest.approx(sum(both["parts"].values()))
