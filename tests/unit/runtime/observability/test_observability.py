"""workerless.observability: EMF metrics per invocation, lifecycle counts, engine errors, the handler span."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from workerless import observability
from workerless._core.lease import ACTIVATION_LEASE
from workerless._core.model import JobRef
from workerless._core.observer import observe_engine
from workerless.errors import LeaseLostError, RateLimitedError
from workerless.testing import FakeEngine, make_activated_job

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def emitted() -> Iterator[list[dict[str, Any]]]:
    documents: list[dict[str, Any]] = []
    observability.configure(metrics=True, sink=lambda line: documents.append(json.loads(line)))
    yield documents
    observability.configure(metrics=None, sink=None)


def by_dimensions(documents: list[dict[str, Any]]) -> dict[tuple[str, ...], dict[str, Any]]:
    out = {}
    for doc in documents:
        spec = doc["_aws"]["CloudWatchMetrics"][0]
        assert spec["Namespace"] == "workerless"
        out[tuple(spec["Dimensions"][0])] = doc
    return out


def test_lifecycle_steps_are_counted_by_service_and_failures_per_job_type(emitted: list[dict[str, Any]]) -> None:
    """GIVEN an invocation that sees steps of two job types
    WHEN it ends
    THEN completions are counted service-wide only (one custom metric, not one per route), a rare
    failure count per job type with its service roll-up, and steps without a metric not at all."""
    with observability.invocation_metrics():
        observability.emit("charge-payment", "completed", job_id="1")
        observability.emit("send-receipt", "completed", job_id="2")
        observability.emit("send-receipt", "lease_lost", job_id="3")
        observability.emit("send-receipt", "started", job_id="3")  # logged, not a metric
        observability.emit("send-receipt", "no-such-step", job_id="4")  # logged, not a metric

    assert len(emitted) == 2
    service, receipt = sorted(emitted, key=lambda d: d.get("JobType", ""))
    assert service["JobsCompleted"] == [2.0]  # Powertools writes every value as a list
    assert service["service"] == "workerless"
    assert service["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]
    assert service["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [{"Name": "JobsCompleted", "Unit": "Count"}]
    assert receipt["JobsLeaseLost"] == [1.0]
    assert receipt["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service", "JobType"], ["service"]]
    assert "no-such-step" not in json.dumps(emitted) and "JobsStarted" not in json.dumps(emitted)


def test_every_metric_is_one_of_the_fixed_set_and_a_zero_count_is_not_published(emitted: list[dict[str, Any]]) -> None:
    with observability.invocation_metrics():
        for step in observability.EVENTS:
            observability.emit("t", step, job_id="1")
        observability.add_metric(observability.POLL_ERRORS, 0)
    names = {m["Name"] for doc in emitted for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names == set(observability.EVENT_METRICS.values())
    assert names <= observability.METRICS
    assert observability.POLL_ERRORS not in names


def test_an_outcome_logs_at_info_and_a_step_on_the_way_at_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(observability.logger, "info", lambda msg, **kw: seen.append(("INFO", msg)))
    monkeypatch.setattr(observability.logger, "debug", lambda msg, **kw: seen.append(("DEBUG", msg)))
    for step in ("activated", "dispatched", "started", "completed"):
        observability.emit("t", step, job_id="1")
    assert seen == [
        ("DEBUG", "job activated"),
        ("DEBUG", "job dispatched"),
        ("DEBUG", "job started"),
        ("INFO", "job completed"),
    ]


def test_distributions_keep_every_value_and_split_past_the_emf_cap(emitted: list[dict[str, Any]]) -> None:
    with observability.invocation_metrics():
        for i in range(150):
            observability.add_metric("PickupLatency", i, "Milliseconds")
    assert len(emitted) == 2
    values = [v for doc in emitted for v in doc["PickupLatency"]]
    assert values == [float(i) for i in range(150)]
    assert all(len(doc["PickupLatency"]) <= 100 for doc in emitted)


def test_nothing_is_written_outside_an_invocation_or_when_empty(emitted: list[dict[str, Any]]) -> None:
    observability.emit("t", "completed", job_id="1")
    with observability.invocation_metrics():
        pass
    assert emitted == []


def test_local_mode_invocations_write_no_metrics_by_default() -> None:
    """Local mode runs many invocations in threads: they write none (the summary table is the view).
    Its wirings' hooks say so (no process-wide predicate); configure(metrics=True) still forces them."""
    from workerless.wiring import Hooks, Wiring
    from workerless_devkit.local.engine_health import EngineHealth
    from workerless_devkit.local.library import LibraryAttachments

    hooks = LibraryAttachments(EngineHealth(), lambda: None).hooks()
    assert hooks.metrics is False
    local, deployed = Wiring(hooks=hooks), Wiring(hooks=Hooks())
    documents: list[str] = []
    observability.configure(metrics=None, sink=documents.append)
    try:
        with local.observer.invocation() as buffer:
            observability.emit("t", "completed", job_id="1")
        assert buffer is None
        assert documents == []
        with deployed.observer.invocation() as buffer:
            observability.emit("t", "completed", job_id="2")
        assert buffer is not None and len(documents) == 1
        observability.configure(metrics=True, sink=documents.append)
        with local.observer.invocation() as buffer:
            observability.emit("t", "completed", job_id="3")
        assert buffer is not None and len(documents) == 2
    finally:
        observability.configure(metrics=None, sink=None)
    assert observability.metrics_enabled() is True


def test_powertools_metrics_disabled_is_honoured(
    emitted: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    with observability.invocation_metrics():
        observability.emit("t", "completed", job_id="1")
    assert emitted == []


def test_poll_report_of_a_busy_invocation_and_of_an_idle_one(emitted: list[dict[str, Any]]) -> None:
    class Busy:
        cycles, polls, empty_polls, errors, activated = 3, 2, 1, 1, 4

    class Idle:
        cycles, polls, empty_polls, errors, activated = 1, 1, 1, 0, 0

    with observability.invocation_metrics():
        observability.poll_report(Busy())
    service = by_dimensions(emitted)[("service",)]
    # Its failed polls only: its runs are the poller's AWS/Lambda Invocations (free).
    assert {k: v for k, v in service.items() if k not in ("_aws", "service")} == {"PollErrors": [1.0]}
    emitted.clear()
    with observability.invocation_metrics():
        observability.poll_report(Idle())
    assert emitted == []  # an idle tick publishes no custom metric


def test_engine_errors_are_counted_by_status_and_re_raised(emitted: list[dict[str, Any]]) -> None:
    class Adapter:
        lease = ACTIVATION_LEASE

        def extend(self, ref: Any, seconds: int) -> float:
            raise LeaseLostError("lost", engine="fake", status=409)

        def activate(self, demands: Any, seconds: int) -> list[Any]:
            raise RateLimitedError("slow down", engine="fake", status=429, retry_after=1.0)

        def report(self, ref: Any, outcome: Any) -> None:
            return None

    ref = JobRef(engine="fake", job_id="j1", job_type="t")
    engine = observe_engine(Adapter())
    assert observe_engine(engine) is engine
    assert engine.lease is ACTIVATION_LEASE  # not a call: passed through as it is
    with observability.invocation_metrics():
        with pytest.raises(LeaseLostError):
            engine.extend(ref, 5)
        with pytest.raises(LeaseLostError):
            engine.extend(ref, 5)
        with pytest.raises(RateLimitedError):
            engine.activate([], 5)
        engine.report(ref, None)
    statuses = {doc["Status"]: doc["EngineErrors"] for doc in emitted}
    assert statuses == {"409": [2.0], "429": [1.0]}


@pytest.mark.parametrize(
    ("traceparent", "trace_id"),
    [
        (TRACEPARENT, "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-00", "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
        ("not a traceparent", None),
        (None, None),
    ],
)
def test_trace_id_of(traceparent: str | None, trace_id: str | None) -> None:
    assert observability.trace_id_of(traceparent) == trace_id


def test_the_handler_span_continues_the_engines_trace(emitted: list[dict[str, Any]]) -> None:
    """GIVEN a job whose engine span has a traceparent
    WHEN the handler runs inside job_span
    THEN the current trace is the engine's (an outbound call forwards it) and the pickup latency is
    recorded (the run time is the function's AWS/Lambda Duration: no metric of the library's)."""
    pytest.importorskip("opentelemetry.trace")
    from opentelemetry import trace

    job = make_activated_job("charge-payment", {}, traceparent=TRACEPARENT, activated_at=1.0)
    with observability.invocation_metrics(), observability.job_span(job) as span:
        current = trace.get_current_span().get_span_context()
        forwarded = observability.current_traceparent()
    assert span.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert format(current.trace_id, "032x") == span.trace_id
    assert forwarded is not None and observability.trace_id_of(forwarded) == span.trace_id
    (doc,) = emitted
    assert doc["PickupLatency"][0] > 0
    assert {m["Name"]: m["Unit"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]} == {
        "PickupLatency": "Milliseconds",
    }


def test_without_opentelemetry_the_span_is_a_no_op_that_still_names_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observability.tracing, "_otel", lambda: None)
    job = make_activated_job("t", {}, traceparent=TRACEPARENT)
    with observability.job_span(job) as span:
        assert observability.current_traceparent() is None
    assert (span.trace_id, span.traceparent) == ("4bf92f3577b34da6a3ce929d0e0e4736", TRACEPARENT)


def test_a_job_without_traceparent_still_runs_in_a_span() -> None:
    with observability.job_span(make_activated_job("t", {})) as span:
        pass
    # No SDK records spans, so without an engine trace there is no trace id to correlate on.
    assert (span.trace_id, span.traceparent) == (None, None)


def test_handler_exceptions_pass_through_the_span_and_its_latency_is_kept(emitted: list[dict[str, Any]]) -> None:
    with (
        observability.invocation_metrics(),
        pytest.raises(KeyError),
        observability.job_span(make_activated_job("t", {}, activated_at=1.0)),
    ):
        raise KeyError("x")
    assert "PickupLatency" in emitted[0]


def test_a_broken_xray_tracer_never_fails_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    observability.tracing._xray_tracer.cache_clear()
    monkeypatch.setattr(observability.switches._Config, "xray", True)
    broken = type("Tracer", (), {"provider": None})()  # in_subsegment is missing: must not fail the job
    monkeypatch.setattr(observability.tracing, "_xray_tracer", lambda: broken)
    with observability.job_span(make_activated_job("t", {})) as span:
        ran = True
    assert ran and span is not None


def test_a_failing_sink_never_fails_the_invocation() -> None:
    def sink(line: str) -> None:
        raise OSError("stdout closed")

    observability.configure(metrics=True, sink=sink)
    try:
        with observability.invocation_metrics():
            observability.emit("t", "completed", job_id="1")
    finally:
        observability.configure(metrics=None, sink=None)


def _powertools_document(metrics: dict[str, tuple[str, list[float]]], dims: dict[str, str]) -> dict[str, Any]:
    """What Powertools' own EMF provider writes for the same values (the reference format)."""
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

    provider = AmazonCloudWatchEMFProvider(namespace=observability.NAMESPACE, service=observability.SERVICE)
    for name, (unit, values) in metrics.items():
        for value in values:
            provider.add_metric(name=name, unit=unit, value=value)
    provider.add_dimension(name="service", value=observability.SERVICE)
    for key, value in dims.items():
        provider.add_dimension(name=key, value=value)
    document: dict[str, Any] = dict(provider.serialize_metric_set())
    if dims:
        document["_aws"]["CloudWatchMetrics"][0]["Dimensions"].append(["service"])
    return document


@pytest.mark.parametrize("dims", [{}, {"JobType": "charge-payment"}, {"Status": "503"}])
def test_documents_are_written_as_powertools_writes_them(emitted: list[dict[str, Any]], dims: dict[str, str]) -> None:
    """The EMF lines are the ones Powertools' provider serialises for the same values, key order
    included (the Timestamp aside): CloudWatch extracts the same metrics from them."""
    values = {
        "PickupLatency": ("Milliseconds", [12.5, 3.0, 0.25, 7.0]),
        "JobsCompleted": ("Count", [2.0]),
    }
    with observability.invocation_metrics():
        for name, (unit, numbers) in values.items():
            for value in numbers if unit != "Count" else [1, 1]:
                observability.add_metric(name, value, unit, **dims)
    (doc,) = emitted
    expected = _powertools_document(values, dims)
    assert abs(doc["_aws"].pop("Timestamp") - expected["_aws"].pop("Timestamp")) < 60_000
    assert json.dumps(doc) == json.dumps(expected)


@pytest.mark.parametrize(
    ("name", "value", "unit"),
    [
        ("", 1, "Count"),
        ("x" * 256, 1, "Count"),
        ("PickupLatency", 1, "Fortnights"),
        ("PickupLatency", float("nan"), "Milliseconds"),
        ("PickupLatency", "5", "Milliseconds"),
    ],
)
def test_an_invalid_metric_is_dropped_with_a_warning_and_the_others_still_written(
    emitted: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, name: str, value: Any, unit: str
) -> None:
    warned: list[str] = []
    monkeypatch.setattr(observability.logger, "warning", lambda msg, **kw: warned.append(msg))
    with observability.invocation_metrics():
        observability.add_metric(name, value, unit)
        observability.emit("t", "completed", job_id="1")
    (doc,) = emitted
    assert doc["JobsCompleted"] == [1.0]
    assert [m["Name"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == ["JobsCompleted"]
    assert len(warned) == 1 and warned[0].startswith("metric not published")


def test_with_an_sdk_the_handler_runs_in_a_consumer_span_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN a tracer provider that records spans (an OpenTelemetry SDK in the function)
    WHEN the handler runs inside job_span
    THEN it runs in a span named after the job type, kind CONSUMER, child of the engine's span,
    carrying the job's attributes; the forwarded traceparent is that span's."""
    trace = pytest.importorskip("opentelemetry.trace")

    started: list[dict[str, Any]] = []

    class RecordingTracer(trace.NoOpTracer):
        def start_span(
            self, name: str, context: Any = None, kind: Any = None, attributes: Any = None, **kw: Any
        ) -> Any:
            parent = trace.get_current_span(context).get_span_context()
            started.append({"name": name, "kind": kind, "attributes": dict(attributes or {}), "parent": parent})
            own = trace.SpanContext(
                parent.trace_id, 0x1111222233334444, is_remote=False, trace_flags=parent.trace_flags
            )
            return trace.NonRecordingSpan(own)

    class RecordingProvider(trace.TracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            return RecordingTracer()

    monkeypatch.setattr(trace, "_TRACER_PROVIDER", RecordingProvider())
    job = make_activated_job("charge-payment", {}, traceparent=TRACEPARENT, instance_id="i-9")
    with observability.job_span(job) as span:
        forwarded = observability.current_traceparent()
    (one,) = started
    assert one["name"] == "charge-payment" and one["kind"] is trace.SpanKind.CONSUMER
    assert format(one["parent"].span_id, "016x") == "00f067aa0ba902b7"
    assert one["attributes"] == {
        "workerless.job.id": job.ref.job_id,
        "workerless.job.type": "charge-payment",
        "workerless.engine": job.ref.engine,
        "workerless.instance.id": "i-9",
    }
    own = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111222233334444-01"
    assert (span.trace_id, span.traceparent, forwarded) == ("4bf92f3577b34da6a3ce929d0e0e4736", own, own)
    assert trace.get_current_span().get_span_context().is_valid is False  # restored on exit


def test_without_an_sdk_the_current_span_is_the_engines_until_the_handler_returns() -> None:
    trace = pytest.importorskip("opentelemetry.trace")
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    job = make_activated_job("t", {}, traceparent=TRACEPARENT)
    with observability.job_span(job) as span:
        inside = trace.get_current_span().get_span_context()
        forwarded = observability.current_traceparent()
    assert (format(inside.trace_id, "032x"), format(inside.span_id, "016x")) == (span.trace_id, "00f067aa0ba902b7")
    assert forwarded == span.traceparent == TRACEPARENT
    assert trace.get_current_span().get_span_context().is_valid is False


def _records() -> list[logging.LogRecord]:
    """Log records of every shape the formatter meets: plain, JSON-looking, dict and %-args messages,
    extras, an exception, whitespace before JSON, an empty message."""
    library = logging.getLogger("workerless-format-test")
    out: list[logging.LogRecord] = []
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    cases: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = [
        ("job completed", (), {"lifecycle": "completed", "job_type": "t", "job_id": "1"}, None),
        ('{"already": "json"}', (), {}, None),
        ("  [1, 2]", (), {}, None),
        ("42", (), {}, None),
        ("null", (), {}, None),
        ("NaN", (), {}, None),
        ("true story", (), {}, None),
        ("", (), {}, None),
        ({"a": 1}, (), {}, None),
        ("sheptra discovery resolved cluster %s to %s", ("c1", "https://x"), {}, None),
        ("handler raised", (), {"error": "ValueError: boom"}, exc_info),
        ("odd extra", (), {"when": object.__new__(type("Opaque", (), {}))}, None),
    ]
    for msg, args, extra, exc in cases:
        out.append(library.makeRecord(library.name, logging.INFO, __file__, 7, msg, args, exc, "fn", extra))
    return out


#: What inject_lambda_context appends (Powertools' lambda_context model), as a bench or test context gives it.
LAMBDA_KEYS = {
    "cold_start": False,
    "function_name": "f",
    "function_memory_size": 256,
    "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:f",
    "function_request_id": "r-1",
}


def test_the_library_formatter_writes_every_line_as_powertools_formatter_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """JsonFormatter is Powertools' formatter made cheaper: the same line for every record, less the
    per-function Lambda-context keys (the log group names the function), with the library's context
    keys and after a clear_state (inject_lambda_context(clear_state=True))."""
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    assert isinstance(observability.logger.registered_formatter, observability.JsonFormatter)
    ours = observability.JsonFormatter(service="workerless", sampling_rate=None)
    theirs = LambdaPowertoolsFormatter(service="workerless", sampling_rate=None)
    skipped = observability.JsonFormatter.PER_FUNCTION_KEYS
    assert skipped == {"function_name", "function_arn", "function_memory_size"}
    observability.logger.thread_safe_append_keys(job_id="1", job_type="t", traceparent=TRACEPARENT)
    try:
        for state in ("fresh", "cleared"):
            for formatter in (ours, theirs):
                formatter.append_keys(**LAMBDA_KEYS)
                if state == "cleared":
                    formatter.clear_state()
            for record in _records():
                expected = {k: v for k, v in json.loads(theirs.format(record)).items() if k not in skipped}
                line = ours.format(record)
                assert list(json.loads(line).items()) == list(expected.items()), (state, record.msg)
                assert line == json.dumps(expected, separators=(",", ":"), default=str), (state, record.msg)
                if state == "fresh":  # the request id and the cold start stay on every line
                    assert expected["function_request_id"] == "r-1" and "cold_start" in expected
    finally:
        observability.logger.thread_safe_remove_keys(["job_id", "job_type", "traceparent"])


def test_a_per_function_key_set_on_the_record_is_kept() -> None:
    # Local mode runs every function in one process and stamps each line with its own function.
    formatter = observability.JsonFormatter(service="workerless", sampling_rate=None)
    formatter.append_keys(**LAMBDA_KEYS)
    library = logging.getLogger(observability.logger.name)
    record = library.makeRecord(library.name, logging.INFO, __file__, 7, "job completed", (), None, "fn", None)
    record.function_name = "workerless-local-chargepaymentFunction"
    line = json.loads(formatter.format(record))
    assert line["function_name"] == "workerless-local-chargepaymentFunction"
    assert "function_arn" not in line and "function_memory_size" not in line


def test_apply_log_level_keeps_a_less_verbose_log_level_over_lambdas() -> None:
    """Powertools lets Lambda's AWS_LAMBDA_LOG_LEVEL win over POWERTOOLS_LOG_LEVEL; the template
    never sets Lambda's above INFO (EMF lines carry no level), so the library sets LogLevel itself."""
    library = logging.getLogger(observability.logger.name)
    saved = library.level
    try:
        library.setLevel(logging.INFO)  # what Powertools chose from AWS_LAMBDA_LOG_LEVEL=INFO
        observability.apply_log_level("WARNING", "INFO")
        assert library.level == logging.WARNING
        library.setLevel(logging.DEBUG)
        observability.apply_log_level("DEBUG", "DEBUG")  # in step: nothing to do
        assert library.level == logging.DEBUG
        observability.apply_log_level("ERROR", None)  # no Lambda level (tests, local mode): untouched
        assert library.level == logging.DEBUG
        observability.apply_log_level("LOUD", "INFO")  # a level Powertools would have refused
        assert library.level == logging.DEBUG
    finally:
        library.setLevel(saved)


def test_settings_read_both_log_levels() -> None:
    from workerless._core.settings import Settings

    settings = Settings.from_env({"POWERTOOLS_LOG_LEVEL": "WARNING", "AWS_LAMBDA_LOG_LEVEL": "INFO", "OTHER": "x"})
    assert (settings.log_level, settings.lambda_log_level) == ("WARNING", "INFO")


def test_a_containers_wiring_applies_the_log_level_before_its_first_invocation() -> None:
    from workerless._core.settings import Settings
    from workerless.wiring import Wiring

    library = logging.getLogger(observability.logger.name)
    saved = library.level
    try:
        library.setLevel(logging.INFO)
        env = {"POWERTOOLS_LOG_LEVEL": "ERROR", "AWS_LAMBDA_LOG_LEVEL": "INFO"}
        assert Wiring(settings=Settings.from_env(env)).observer is not None
        assert library.level == logging.ERROR
    finally:
        library.setLevel(saved)


class _RecordingTracer:
    """A Powertools Tracer stand-in recording the subsegments a job span opens."""

    def __init__(self) -> None:
        import contextlib

        self.opened: list[str] = []
        recorder = self

        class Subsegment:
            def put_annotation(self, key: str, value: str) -> None:
                pass

        class Provider:
            @contextlib.contextmanager
            def in_subsegment(self, name: str) -> Iterator[Subsegment]:
                recorder.opened.append(name)
                yield Subsegment()

        self.provider = Provider()


def test_xray_follows_the_wiring_s_setting_unless_configure_sets_the_process_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """X-Ray is the wiring's ``xray_tracing`` (passed to each job's span), not a process switch the
    settings write: the handler's per-batch ``configure_from_settings`` no longer undoes an explicit
    ``configure(xray=True)`` (docs/operating.md's way to turn it on), nor does one function's setting
    turn it on for another in the same process."""
    from workerless._core.settings import Settings
    from workerless._handler.handler import JobProcessor

    tracer = _RecordingTracer()
    monkeypatch.setattr(observability.tracing, "_xray_tracer", lambda: tracer)
    monkeypatch.setattr(observability.switches._Config, "xray", None)
    with observability.job_span(make_activated_job("off", {})):
        pass
    with observability.job_span(make_activated_job("on", {}), xray=True):
        pass
    assert tracer.opened == ["## on"]

    observability.configure(xray=True)
    observability.configure_from_settings(Settings(xray_tracing=False))
    with observability.job_span(make_activated_job("forced", {})):
        pass
    assert tracer.opened == ["## on", "## forced"], "the settings undid configure(xray=True)"
    observability.configure(xray=False)
    with observability.job_span(make_activated_job("refused", {}), xray=True):
        pass
    assert tracer.opened == ["## on", "## forced"]

    processor = JobProcessor("t", lambda job: None)
    job = make_activated_job("t", {})
    kwargs: dict[str, Any] = {
        "message_id": "m",
        "receive_count": 1,
        "context": None,
        "engine": FakeEngine(),
        "store": None,
    }
    assert processor.delivery(job, settings=Settings(xray_tracing=True), **kwargs).xray is True
    assert processor.delivery(job, settings=Settings(), **kwargs).xray is False
