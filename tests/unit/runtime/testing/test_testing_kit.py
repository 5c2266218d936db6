"""workerless.testing's handler kit: make_job, run_handler and the assertions, with no I/O."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from workerless import Job, TerminalError, ThrowError, job_handler
from workerless._core.model import Outcome
from workerless.testing import (
    FakeEngine,
    assert_completed,
    assert_failed,
    assert_thrown,
    load_handler,
    make_activated_job,
    make_job,
    run_handler,
)


@job_handler("charge-payment", backoff_seconds=7)
def charge(job: Job) -> dict[str, Any]:
    amount = job.variables.get("amount")
    job.log(f"charging {amount}")
    if amount == "declined":
        raise ThrowError("CARD_DECLINED", "card declined", variables={"declined": True})
    if not isinstance(amount, int) or amount <= 0:
        raise TerminalError(f"amount must be positive, got {amount!r}")
    if amount == 13:
        raise RuntimeError("gateway down")
    return {"paymentOk": True, "amount": amount}


def test_fake_engine_is_still_importable_from_workerless_testing() -> None:
    assert FakeEngine().name == "fake"


def test_make_job_builds_what_a_handler_receives() -> None:
    job = make_job(
        "send-receipt",
        {"orderId": "7"},
        job_id="j-1",
        retries=2,
        instance_id="wf-9",
        element_id="SendReceipt",
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    assert (job.id, job.type, job.variables, job.retries) == ("j-1", "send-receipt", {"orderId": "7"}, 2)
    assert job.workflow_key == "wf-9:SendReceipt"
    assert job.key == "test#j-1"
    assert job.lambda_context.get_remaining_time_in_millis() > 50_000
    assert job.lease_lost() is False


def test_make_job_lease_lost_can_change_between_checks() -> None:
    answers = iter([False, True])
    job = make_job("t", lease_lost=lambda: next(answers))
    assert [job.lease_lost(), job.lease_lost()] == [False, True]


def test_a_returned_dict_completes_with_those_variables_and_logs_reach_the_task_log() -> None:
    logs: list[dict[str, Any]] = []
    outcome = run_handler(charge, {"amount": 5}, logs=logs)
    assert outcome == Outcome.complete({"paymentOk": True, "amount": 5})
    assert assert_completed(outcome, paymentOk=True) == {"paymentOk": True, "amount": 5}
    assert [line["message"] for line in logs] == ["charging 5"]


def test_terminal_error_fails_with_no_retries() -> None:
    outcome = run_handler(charge, {"amount": 0})
    assert_failed(outcome, message="must be positive", retries=0, terminal=True)


def test_any_other_exception_fails_with_retries_minus_one_and_the_decorators_backoff() -> None:
    outcome = run_handler(charge, {"amount": 13}, retries=3)
    assert_failed(outcome, message="RuntimeError: gateway down", retries=2, terminal=False, backoff_seconds=7)
    assert outcome.stack is not None and "gateway down" in outcome.stack


def test_backoff_can_be_overridden_per_run() -> None:
    assert run_handler(charge, {"amount": 13}, backoff_seconds=1).backoff_seconds == 1


def test_throw_error_throws_the_business_error() -> None:
    outcome = run_handler(charge, {"amount": "declined"})
    assert_thrown(outcome, "CARD_DECLINED", message="declined", variables={"declined": True})


def test_a_non_dict_return_fails_naming_the_type() -> None:
    """The same mapping as the wrapper: workerless._handler.execution.run_job, not a copy of it."""

    def returns_a_list(job: Job) -> Any:
        return [1, 2]

    outcome = run_handler(returns_a_list, {}, job_type="any")
    assert_failed(outcome, message="handler returned list", retries=2)


def test_none_completes_with_no_variables() -> None:
    assert_completed(run_handler(lambda job: None, job_type="noop"), {})


def test_a_job_from_make_job_carries_its_lease_verdict_into_the_run() -> None:
    def stops_when_lost(job: Job) -> dict[str, Any]:
        if job.lease_lost():
            raise RuntimeError("lease lost; stopping")
        return {}

    assert_failed(run_handler(stops_when_lost, make_job("long", lease_lost=True)), message="lease lost")
    assert_completed(run_handler(stops_when_lost, make_job("long")))
    assert_failed(run_handler(stops_when_lost, make_job("long"), lease_lost=True), message="lease lost")


def test_an_activated_job_runs_as_is() -> None:
    activated = make_activated_job("charge-payment", {"amount": 2}, retries=None)
    assert_completed(run_handler(charge, activated), amount=2)
    assert run_handler(charge, make_activated_job("charge-payment", {"amount": 13}, retries=None)).retries is None


def test_a_job_of_another_type_is_refused_like_the_wrapper_does() -> None:
    with pytest.raises(ValueError, match="'send-receipt' given to the 'charge-payment' handler"):
        run_handler(charge, make_job("send-receipt", {}))
    with pytest.raises(ValueError, match="give job_type"):
        run_handler(lambda job: {}, {"a": 1})


@pytest.mark.parametrize(
    ("check", "outcome", "says"),
    [
        (lambda o: assert_completed(o), Outcome.fail("boom", retries=1), "expected the job to complete, but it failed"),
        (lambda o: assert_completed(o, {"a": 1}), Outcome.complete({"a": 2}), "with {'a': 1}, got {'a': 2}"),
        (lambda o: assert_completed(o, a=1), Outcome.complete({"b": 1}), "{'a': '<missing>'}"),
        (lambda o: assert_failed(o), Outcome.complete({}), "expected the job to fail, but it completed"),
        (lambda o: assert_failed(o, terminal=True), Outcome.fail("x", retries=2), "expected terminal=True"),
        (lambda o: assert_failed(o, retries=0), Outcome.fail("x", retries=2), "expected 0 retries left"),
        (lambda o: assert_thrown(o, "A"), Outcome.throw("B", "m"), "expected error code 'A', but it threw 'B'"),
        (lambda o: assert_thrown(o), Outcome.complete({}), "expected a thrown business error"),
    ],
)
def test_assertions_say_what_the_outcome_was(check: Any, outcome: Outcome, says: str) -> None:
    with pytest.raises(AssertionError) as raised:
        check(outcome)
    assert says in str(raised.value)


def test_load_handler_finds_a_relative_path_from_the_test_file_in_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a working directory that is not the project's root
    monkeypatch.chdir(tmp_path)
    # WHEN a test loads a function by its path from the root THEN it is found from this file upward
    handler = load_handler("functions/chargepayment/app.py")
    assert_completed(run_handler(handler, {"orderId": "7", "amount": 12.5}), paymentOk=True)
    # ... and a path found nowhere says where it looked
    with pytest.raises(FileNotFoundError, match=r"'functions/nope/app.py': not found from .* nor from .*tests/unit"):
        load_handler("functions/nope/app.py")
