"""Pure pieces of the pipeline: the record's decisions, tickets, messages, retry policy, settings,
and the Job a handler sees. No I/O."""

from __future__ import annotations

import json

import pytest
from workerless._core.job import LOG_FLUSH_LINES, Job
from workerless._core.model import ActivatedJob, JobRef, Outcome
from workerless._core.record import Decision, JobRecord, Status, decide
from workerless._core.retry import RetryPolicy
from workerless._core.settings import Settings, infer_engine
from workerless._heartbeat.ticket import Ticket, TicketEntry
from workerless.errors import (
    ConfigurationError,
    EngineUnavailableError,
    LeaseLostError,
    MessageFormatError,
    RateLimitedError,
)


def _job(**overrides: object) -> ActivatedJob:
    values: dict[str, object] = {
        "ref": JobRef("sheptra", "42", "charge-payment", attempt="r3"),
        "variables": {"orderId": "1"},
        "lease_expires_at": 1000.0,
        "activated_at": 940.0,
        "retries": 3,
    }
    values.update(overrides)
    return ActivatedJob(**values)  # type: ignore[arg-type]


# -- the record's state machine -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (None, Decision.RUN),
        (JobRecord("k", Status.STORED, outcome=Outcome.complete({})), Decision.REREPORT),
        (JobRecord("k", Status.REPORTED), Decision.DONE),
        (JobRecord("k", Status.LOST), Decision.SKIP),
        (JobRecord("k", Status.SKIPPED), Decision.SKIP),
        (JobRecord("k", Status.CLAIMED, claim_expires_at=200.0), Decision.RETRY_LATER),
        (JobRecord("k", Status.CLAIMED, claim_expires_at=50.0), Decision.RUN),
    ],
)
def test_decide(record: JobRecord | None, expected: Decision) -> None:
    assert decide(record, now=100.0) is expected


def test_records_in_pipeline_until_settled() -> None:
    assert JobRecord("k", Status.CLAIMED).in_pipeline
    assert JobRecord("k", Status.STORED).in_pipeline
    assert not JobRecord("k", Status.REPORTED).in_pipeline
    assert not JobRecord("k", Status.LOST).in_pipeline


# -- messages ----------------------------------------------------------------------------------------
def test_job_key_includes_attempt_only_when_the_engine_reuses_ids() -> None:
    assert JobRef("sheptra", "42", "t", attempt="r3").key == "sheptra#42#r3"
    assert JobRef("nodeflow", "task-9", "t").key == "nodeflow#task-9"


def test_the_job_record_key_leads_with_its_type_so_iam_can_hold_a_route_to_its_own() -> None:
    """job#<type>#<job key> (issue 26, 2.10): each handler role is limited by dynamodb:LeadingKeys to
    job#<its type>#*, which no other type's record and no state# item (the poller lock) matches;
    job.key, the handlers' idempotency key, is unchanged."""
    ref = JobRef("sheptra", "42", "charge-payment", attempt="r3")
    assert ref.record_key == "job#charge-payment#sheptra#42#r3"
    assert ref.key == "sheptra#42#r3"
    assert ActivatedJob(ref, {}, 0, 0).record_key == ref.record_key
    other = JobRef("sheptra", "42", "charge-payment-eu", attempt="r3").record_key
    assert not other.startswith("job#charge-payment#")


@pytest.mark.parametrize("job_type", ["a#b", "charge*", "a?", "x${y}"])
def test_a_job_type_that_would_widen_its_routes_key_pattern_is_refused(job_type: str) -> None:
    from workerless._core.settings import Route

    with pytest.raises(ValueError, match="may not hold"):
        Route(type=job_type, queue="q")


def test_message_round_trip_keeps_everything() -> None:
    job = _job(instance_id="p-1", element_id="Charge", traceparent="00-abc-def-01")
    assert ActivatedJob.from_message(job.to_message()) == job


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("not json", "body"),
        ("[]", "body"),
        (json.dumps({"v": 2}), "v"),
        (json.dumps({"v": 1}), "ref"),
        (json.dumps({"v": 1, "ref": {"engine": "s", "job_id": "", "job_type": "t"}}), "job_id"),
    ],
)
def test_malformed_messages_name_the_field(body: str, field: str) -> None:
    with pytest.raises(MessageFormatError) as caught:
        ActivatedJob.from_message(body)
    assert caught.value.field == field


def test_message_with_wrong_variables_type_is_refused() -> None:
    data = json.loads(_job().to_message())
    data["variables"] = ["a"]
    with pytest.raises(MessageFormatError, match="variables"):
        ActivatedJob.from_message(json.dumps(data))


def test_outcome_round_trip() -> None:
    outcome = Outcome.fail("boom", retries=2, backoff_seconds=30, stack="Traceback ...")
    assert Outcome.from_dict(outcome.to_dict()) == outcome


# -- tickets -------------------------------------------------------------------------------------------
def test_ticket_delay_is_a_third_of_the_shortest_remaining_lease() -> None:
    ref = JobRef("sheptra", "1", "t")
    ticket = Ticket("sheptra", (TicketEntry(ref, 1060.0), TicketEntry(ref, 1300.0)), first_seen=1000.0)
    assert ticket.delay_seconds(now=1000.0) == 20
    assert ticket.delay_seconds(now=1059.5) == 1, "never less than a second"
    long = Ticket("sheptra", (TicketEntry(ref, 100_000.0),), first_seen=0.0)
    assert long.delay_seconds(now=0.0) == 900, "SQS caps DelaySeconds at 900"


def test_ticket_round_trip_and_errors() -> None:
    ticket = Ticket("sheptra", (TicketEntry(JobRef("sheptra", "1", "t", "r3"), 5.0),), first_seen=1.0)
    assert Ticket.from_json(ticket.to_json()) == ticket
    with pytest.raises(MessageFormatError) as caught:
        Ticket.from_json(json.dumps({"v": 1, "engine": "s", "first_seen": 1, "jobs": [{"ref": {}}]}))
    assert caught.value.field == "jobs[0].lease_expires_at"


# -- retry policy -------------------------------------------------------------------------------------
def test_retry_honours_retry_after_and_stops_at_the_attempt_limit() -> None:
    waits: list[float] = []
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        raise RateLimitedError("slow down", engine="e", status=429, retry_after=2.0)

    with pytest.raises(RateLimitedError):
        RetryPolicy(attempts=3).call(flaky, deadline=1e9, sleep=waits.append, clock=lambda: 0.0)
    assert calls["n"] == 3
    assert waits == [2.0, 2.0]


def test_retry_never_waits_past_the_deadline() -> None:
    waits: list[float] = []

    def down() -> None:
        raise EngineUnavailableError("down", engine="e", retry_after=10.0)

    with pytest.raises(EngineUnavailableError):
        RetryPolicy(attempts=5).call(down, deadline=5.0, sleep=waits.append, clock=lambda: 0.0)
    assert waits == []


def test_final_errors_are_not_retried() -> None:
    calls = {"n": 0}

    def lost() -> None:
        calls["n"] += 1
        raise LeaseLostError("gone", engine="e", status=409)

    with pytest.raises(LeaseLostError):
        RetryPolicy(attempts=5).call(lost, deadline=1e9, sleep=lambda s: None)
    assert calls["n"] == 1


# -- settings ------------------------------------------------------------------------------------------
def test_settings_parse_routes_json() -> None:
    routes = [{"type": "a", "queue": "https://q/a", "max": 3}, {"type": "b", "queue": "https://q/b"}]
    settings = Settings.from_env({"WORKERLESS_ROUTES": json.dumps(routes), "WORKERLESS_LEASE_SECONDS": "30"})
    assert [r.type for r in settings.routes] == ["a", "b"]
    assert settings.route("a") is not None and settings.route("a").max_in_flight == 3  # type: ignore[union-attr]
    assert settings.lease_seconds == 30


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"WORKERLESS_ROUTES": "{not json"}, "WORKERLESS_ROUTES"),
        ({"WORKERLESS_ROUTES": json.dumps([{"type": "a"}])}, "WORKERLESS_ROUTES"),
        ({"WORKERLESS_LEASE_SECONDS": "soon"}, "WORKERLESS_LEASE_SECONDS"),
        ({"WORKERLESS_ENGINE": "zeebe"}, "WORKERLESS_ENGINE"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env(env)
    assert caught.value.key == key
    assert key in str(caught.value)


def test_routing_a_type_twice_is_refused() -> None:
    routes = [{"type": "a", "queue": "q1"}, {"type": "a", "queue": "q2"}]
    with pytest.raises(ConfigurationError, match="routed twice"):
        Settings.from_env({"WORKERLESS_ROUTES": json.dumps(routes)})


def test_engine_is_inferred_from_the_keys_present() -> None:
    assert infer_engine({"SHEPTRA_API_URL": "x"}) == "sheptra"
    assert infer_engine({"NF_URL": "x"}) == "nodeflow"
    assert infer_engine({"STAGENEXT_API_KEY": "x", "WORKERLESS_ENGINE": "stagenext"}) == "stagenext"
    with pytest.raises(ConfigurationError, match="several engines"):
        infer_engine({"NF_URL": "x", "SHEPTRA_API_URL": "y"})
    with pytest.raises(ConfigurationError, match="no engine keys"):
        infer_engine({})


# -- the Job a handler sees ---------------------------------------------------------------------------
def test_job_exposes_the_engine_fields_and_keys() -> None:
    job = Job(_job(instance_id="p-1", element_id="Charge", traceparent="00-a-b-01"))
    assert (job.id, job.type, job.retries, job.instance_id) == ("42", "charge-payment", 3, "p-1")
    assert job.key == "sheptra#42#r3"
    assert job.workflow_key == "p-1:Charge"
    assert job.traceparent == "00-a-b-01"


def test_lease_check_is_cached_between_calls() -> None:
    now = {"t": 0.0}
    answers = iter([False, True])
    calls = {"n": 0}

    def check() -> bool:
        calls["n"] += 1
        return next(answers)

    job = Job(_job(), lease_check=check, clock=lambda: now["t"])
    assert job.lease_lost() is False
    assert job.lease_lost() is False
    assert calls["n"] == 1, "a second call within 2 s does not ask the table again"
    now["t"] = 2.5
    assert job.lease_lost() is True
    now["t"] = 10.0
    assert job.lease_lost() is True
    assert calls["n"] == 2, "once lost, always lost"


def test_logs_are_batched_by_count_and_flushed_before_the_report() -> None:
    batches: list[list[dict[str, object]]] = []
    job = Job(_job(), log_sink=batches.append, clock=lambda: 0.0)
    for i in range(LOG_FLUSH_LINES + 3):
        job.log(f"line {i}")
    assert [len(b) for b in batches] == [LOG_FLUSH_LINES]
    job.flush_logs()
    assert [len(b) for b in batches] == [LOG_FLUSH_LINES, 3]
    assert batches[1][-1]["message"] == f"line {LOG_FLUSH_LINES + 2}"
