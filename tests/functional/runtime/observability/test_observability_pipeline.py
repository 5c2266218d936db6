"""What a user sees of one job in Lambda: its log lines (with the job's correlation keys and the engine's
trace id), its EMF metrics, and engine errors by status. The real entry points and example handler on
moto's SQS and DynamoDB with an in-memory engine whose jobs carry a W3C traceparent."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from workerless import entrypoints, observability, runtime
from workerless._core.model import ActivatedJob, Demand
from workerless.testing import FakeEngine

from tests.functional.aws import Aws, FakeContext

ROOT = Path(__file__).resolve().parents[4]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


class TracedEngine(FakeEngine):
    """A FakeEngine whose jobs come with the engine span's traceparent, as Sheptra's do."""

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        return [dataclasses.replace(job, traceparent=TRACEPARENT) for job in super().activate(demands, lease_seconds)]


class JsonLines(logging.Handler):
    """The library logger's lines, formatted by its own Powertools JSON formatter."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(observability.logger.registered_formatter.format(record)))


@pytest.fixture
def engine(aws: Aws) -> TracedEngine:
    fake = TracedEngine()
    runtime.set_engine(fake)
    return fake


@pytest.fixture
def metrics() -> Iterator[list[dict[str, Any]]]:
    documents: list[dict[str, Any]] = []
    observability.configure(metrics=True, sink=lambda line: documents.append(json.loads(line)))
    yield documents
    observability.configure(metrics=None, sink=None)


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    handler = JsonLines()
    library = logging.getLogger(observability.logger.name)
    saved = library.level
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    yield handler.lines
    library.removeHandler(handler)
    library.setLevel(saved)


def charge_handler() -> Any:
    spec = importlib.util.spec_from_file_location("obs_charge_app", ROOT / "functions" / "chargepayment" / "app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.handler


def metric(documents: list[dict[str, Any]], name: str, **dimensions: str) -> list[float]:
    return [
        value
        for doc in documents
        if name in doc and all(doc.get(k) == v for k, v in dimensions.items())
        for value in doc[name]
    ]


def run_charge(aws: Aws) -> dict[str, Any]:
    event = aws.receive_event(aws.queues["charge-payment"])
    response: dict[str, Any] = charge_handler()(event, FakeContext())
    aws.settle(aws.queues["charge-payment"], event, response)
    return response


def test_one_job_is_visible_in_logs_metrics_and_its_trace(
    aws: Aws,
    engine: TracedEngine,
    metrics: list[dict[str, Any]],
    logs: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GIVEN a charge-payment job whose engine span has a traceparent
    WHEN the poller and the handler Lambdas run
    THEN the poller writes the activated count, the handler pickup latency and the completed count,
    and every handler log line of the job carries its id, type and trace id."""
    job_id = engine.add_job("charge-payment", {"orderId": "7", "amount": 12})
    # How many empty polls a lingering poller makes depends on timing: one cycle here.
    monkeypatch.setattr("workerless._poller.poller.LINGER_SECONDS", 0.0)

    entrypoints.poller({}, FakeContext())
    poll_docs = list(metrics)
    # The job it took; its runs are the poller's AWS/Lambda Invocations (no metric of its own).
    assert metric(poll_docs, "JobsActivated", service="workerless") == [1.0]
    assert {m["Name"] for d in poll_docs for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]} == {"JobsActivated"}
    assert metric(poll_docs, "PollErrors", service="workerless") == []  # a count of 0 is not published

    assert run_charge(aws) == {"batchItemFailures": []}
    handler_docs = metrics[len(poll_docs) :]
    assert metric(handler_docs, "JobsCompleted", service="workerless") == [1.0]
    (latency,) = metric(handler_docs, "PickupLatency", service="workerless")
    assert 0 <= latency < 30_000
    # The run time is the handler function's AWS/Lambda Duration (free): no metric of its own.
    handler_names = {m["Name"] for d in handler_docs for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert handler_names == {"JobsCompleted", "PickupLatency"}
    for doc in handler_docs:
        assert doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "workerless"
        assert doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]

    job_lines = [line for line in logs if line.get("job_id") == job_id]
    steps = [line["lifecycle"] for line in job_lines if "lifecycle" in line]
    # At INFO (the template's LogLevel) a job writes one lifecycle line: its outcome.
    assert steps == ["completed"]
    handled = [line for line in job_lines if line.get("lifecycle") == "completed"]
    handled += [line for line in job_lines if line["message"].startswith("charging")]
    assert len(handled) == 2
    for line in handled:
        assert line["trace_id"] == TRACE_ID
        assert line["traceparent"] == TRACEPARENT
        assert (line["job_type"], line["engine"]) == ("charge-payment", "fake")
    # One line per outcome, not one per call or step: nothing else logged per job at INFO.
    assert len(job_lines) <= 3


def test_a_lost_lease_at_report_counts_an_engine_error_by_status(
    aws: Aws, engine: TracedEngine, metrics: list[dict[str, Any]]
) -> None:
    job_id = engine.add_job("charge-payment", {"orderId": "8", "amount": 3})
    entrypoints.poller({}, FakeContext())
    engine.lost.add(job_id)  # the engine gave the job to someone else: report answers 409

    assert run_charge(aws) == {"batchItemFailures": []}
    assert metric(metrics, "EngineErrors", Status="409") == [1.0]
    assert metric(metrics, "JobsLeaseLost", JobType="charge-payment") == [1.0]
    assert metric(metrics, "JobsCompleted") == []


def test_metrics_are_off_inside_local_mode_and_on_in_lambda(aws: Aws, engine: TracedEngine) -> None:
    """With no configuration, an invocation outside local mode writes EMF lines to stdout (an idle
    one writes none: the poller is given a job to take)."""
    engine.add_job("charge-payment", {"orderId": "9", "amount": 1})
    lines: list[str] = []
    observability.configure(metrics=None, sink=lines.append)
    try:
        entrypoints.poller({}, FakeContext())
    finally:
        observability.configure(metrics=None, sink=None)
    assert lines and all(json.loads(line)["_aws"]["CloudWatchMetrics"] for line in lines)
