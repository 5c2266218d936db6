"""Logs, metrics and traces.

**Logs.** One Powertools Logger for the library (JSON). While a job is handled, its lines carry the
job id, type, engine, instance id, the engine's traceparent and the trace id as correlation keys.
:func:`record` writes one line per job lifecycle step (``"job completed"``, with ``lifecycle``,
``job_type`` and ``job_id``), never one per HTTP call: a job's *outcome* (:data:`OUTCOMES`:
completed, failed, thrown, lease lost, ...) at INFO, the steps on the way (activated, dispatched,
started, extended) at DEBUG. CloudWatch Logs bills every byte ingested: at INFO a job that
completes writes one line, not five.

**Metrics** (CloudWatch EMF, namespace ``workerless``). A small, fixed set (:data:`METRICS`), with
the one dimension ``service``; only the rare failure counts (:data:`PER_TYPE`) also carry
``JobType`` (with the roll-up ``service``), and ``EngineErrors`` carries ``Status``. CloudWatch
bills every metric name x dimension set as a custom metric for each hour in which it is published,
so a count of 0 is not published (a missing datapoint reads as 0: the alarms treat missing data as
not breaching) and an idle poller invocation publishes nothing. :func:`record` counts the steps
that have a metric (:data:`EVENT_METRICS`); :func:`add_metric` takes the others (pickup latency,
handler duration, poll errors, engine errors by status). Per-type throughput and durations come
from AWS's own free metrics (each route has its own queue and function: ``AWS/SQS``,
``AWS/Lambda``). Values are kept per invocation, in a buffer opened by :func:`invocation_metrics`
(the entry points and the handler wrapper open one), and written as one EMF line per dimension set
when the invocation ends. Lambda sends the lines to CloudWatch Logs, which extracts the metrics: no
``cloudwatch:PutMetricData`` call and no permission for it.

Why not one module-level ``Metrics``: Powertools' ``Metrics`` keeps one dimension set per flush and
shares its metric set between every instance in the process (class attributes), while one poller or
heartbeat invocation counts several job types, and local mode runs many invocations at once in
threads of one process. So each invocation gets its own buffer (a context variable: a thread sees
only its own invocation's buffer, no lock contention between invocations), written in the EMF
format Powertools' provider writes (tests/unit/test_observability.py compares the two) by
:func:`emf_document`: the provider, built per document, validated and logged every value again at
flush (a tenth of a millisecond per handler invocation); :func:`add_metric` validates each value
once, as it is added, against the units Powertools knows.

Local mode: no metrics are written inside a local-mode invocation (``workerless local`` shows its
summary table instead, and EMF lines would bury its output); :func:`configure` overrides that.
``POWERTOOLS_METRICS_DISABLED=true`` turns them off anywhere, as for any Powertools metric.

**Traces.** :func:`job_span` runs the handler function inside a span named after the job type whose
parent is the engine's W3C traceparent (OpenTelemetry API, when ``opentelemetry-api`` is installed;
a no-op otherwise), so one trace covers engine → poller → handler → the downstream calls the
handler makes (with an OpenTelemetry SDK and instrumentations configured by the function). X-Ray
subsegments through Powertools Tracer are added only when :func:`configure` turns them on.

Listeners (local mode's summary, tests) subscribe to lifecycle steps with :func:`add_listener`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
import math
import numbers
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import formatter as _powertools_formatter

if TYPE_CHECKING:
    from workerless.engines.base import Engine
    from workerless.settings import Settings


class JsonFormatter(_powertools_formatter.LambdaPowertoolsFormatter):
    """Powertools' JSON formatter, every line byte for byte as it writes it, at less CPU a line.

    Two of its steps cost more than the line needs, on every line: it sorts the record's attributes
    from the extras by scanning a 25-name tuple once per attribute, and it tries to decode every
    message as JSON (a failing ``json.loads`` and its exception, for "job completed"). Here the same
    names are a frozenset, and a message whose first character cannot begin a JSON document is
    kept as it is without trying (a string that can is decoded as Powertools does).
    tests/unit/test_observability.py compares the lines with Powertools' own formatter.
    """

    _RESERVED = frozenset(_powertools_formatter.RESERVED_LOG_ATTRS)
    #: What a document json.loads accepts can begin with, after JSON whitespace (NaN, Infinity too).
    _JSON_START = frozenset('{["-0123456789tfnNI')

    def _extract_log_message(self, log_record: logging.LogRecord) -> Any:
        message = log_record.msg
        if isinstance(message, str) and not log_record.args and message.lstrip(" \t\n\r")[:1] not in self._JSON_START:
            return message
        return super()._extract_log_message(log_record)

    def _extract_log_keys(self, log_record: logging.LogRecord) -> dict[str, Any]:
        # Powertools' own, with the reserved names in a frozenset (same names, same order of keys).
        reserved = self._RESERVED
        record_dict = log_record.__dict__.copy()
        record_dict["asctime"] = self.formatTime(record=log_record)
        extras = {k: v for k, v in record_dict.items() if k not in reserved}
        formatted_log: dict[str, Any] = {}
        for keys in (self.log_format, _powertools_formatter._get_context().get()):
            for key, value in keys.items():
                if value and key in reserved:
                    if not isinstance(value, str):
                        raise ValueError(
                            "Logging keys that override reserved log attributes need to be type 'str', "
                            f"instead got '{type(value).__name__}'",
                        )
                    formatted_log[key] = value % record_dict
                else:
                    formatted_log[key] = value
        formatted_log.update(**extras)
        return formatted_log


logger = Logger(service="workerless", child=False)
# The same formatter Powertools builds for it (its keys: service, sampling rate), the faster class.
logger.registered_handler.setFormatter(JsonFormatter(service=logger.service, sampling_rate=logger.sampling_rate))

#: CloudWatch namespace and the ``service`` dimension of every workerless metric.
NAMESPACE = "workerless"
SERVICE = "workerless"

#: The lifecycle steps one job can go through.
EVENTS = (
    "activated",
    "dispatched",
    "released",
    "started",
    "completed",
    "failed",
    "thrown",
    "rereported",
    "report_owed",
    "lease_lost",
    "skipped",
    "extended",
    "dead_lettered",
    "dead_letter_rejected",
)

#: The steps on the way to a job's outcome: DEBUG lines. Every other step ends the job's handling
#: (its outcome: one INFO line each).
STEPS = frozenset({"activated", "dispatched", "started", "extended"})
OUTCOMES = frozenset(EVENTS) - STEPS

#: The metric (Count) each counted lifecycle step is counted under. Steps without one (dispatched,
#: started, skipped, rereported, report_owed) are in the logs: a metric filter can count them.
EVENT_METRICS: dict[str, str] = {
    "activated": "JobsActivated",
    "released": "JobsReleased",
    "completed": "JobsCompleted",
    "failed": "JobsFailed",
    "thrown": "JobsThrown",
    "lease_lost": "JobsLeaseLost",
    "extended": "HeartbeatExtends",
    "dead_lettered": "JobsDeadLettered",
    # A dead letter the engine refused to settle for good (404, 400): logged at ERROR and deleted.
    "dead_letter_rejected": "DeadLettersRejected",
}

#: Rare counts that also carry JobType (``workerless status`` shows failures per route). Every
#: other metric has the ``service`` dimension only: per type, a metric costs once per route.
PER_TYPE = frozenset({"JobsFailed", "JobsThrown", "JobsLeaseLost", "JobsDeadLettered", "DeadLettersRejected"})

#: Metrics that are not lifecycle steps (unit; dimensions).
POLL_CYCLES = "PollCycles"  # Count; service. Cycles of a poller invocation that took work or failed.
POLL_ERRORS = "PollErrors"  # Count; service. Activation calls the engine refused or that failed.
ENGINE_ERRORS = "EngineErrors"  # Count; service, Status. Every engine call that raised an EngineError.
PICKUP_LATENCY = "PickupLatency"  # Milliseconds; service. Engine activation → handler start.
HANDLER_DURATION = "HandlerDuration"  # Milliseconds; service. The user function's run time.

#: Every metric the library publishes (namespace ``workerless``): the fixed set.
METRICS = frozenset(
    {*EVENT_METRICS.values(), POLL_CYCLES, POLL_ERRORS, ENGINE_ERRORS, PICKUP_LATENCY, HANDLER_DURATION}
)

#: EMF accepts at most 100 values per metric in one document: a metric with more is split.
_MAX_VALUES = 100
#: CloudWatch's limit on a metric name's length.
_MAX_NAME = 255

Listener = Callable[[str, str, dict[str, Any]], None]
_listeners: list[Listener] = []
_lock = threading.Lock()


def add_listener(listener: Listener) -> None:
    """Call ``listener(job_type, event, fields)`` for every lifecycle event from now on."""
    with _lock:
        _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def record(job_type: str, event: str, **fields: Any) -> None:
    """Note one lifecycle step of one job: one log line (INFO for an outcome, DEBUG for a step on the
    way), one count where the step has a metric, every listener.

    Never raises: observers must not fail a job.
    """
    try:
        log = logger.info if event in OUTCOMES else logger.debug
        log(f"job {event.replace('_', ' ')}", extra={"lifecycle": event, "job_type": job_type, **fields})
        metric = EVENT_METRICS.get(event)
        if metric is not None:
            add_metric(metric, 1, "Count", job_type=job_type if metric in PER_TYPE else None)
    except Exception:  # an observer must never fail the step it observes
        logger.debug("lifecycle log or metric failed", exc_info=True)
    for listener in list(_listeners):
        try:
            listener(job_type, event, fields)
        except Exception:
            logger.exception("lifecycle listener failed", extra={"listener": repr(listener)})


# ------------------------------------------------------------------------------------------------
# Configuration


class _Config:
    """Process-wide switches (see :func:`configure`)."""

    metrics: bool | None = None  # None: on, except while `quiet` says so (a local-mode invocation)
    quiet: Callable[[], bool] | None = None  # see suppress_metrics_while
    sink: Callable[[str], None] | None = None  # None: stdout (where Lambda's log capture reads EMF)
    xray: bool = False


def configure(
    *,
    metrics: bool | None = None,
    sink: Callable[[str], None] | None = None,
    xray: bool | None = None,
) -> None:
    """Set the observability switches for this process.

    Args:
        metrics: True writes EMF metrics everywhere, False nowhere, None (the default) everywhere
            but inside a local-mode invocation.
        sink: where each EMF line goes (default: stdout, which Lambda sends to CloudWatch Logs).
            Tests pass a list's ``append``.
        xray: add a Powertools Tracer (X-Ray) subsegment around each handler run. Needs the
            function's ``Tracing: Active`` and ``aws-xray-sdk`` in the layer; off by default.
    """
    _Config.metrics = metrics
    _Config.sink = sink
    if xray is not None:
        _Config.xray = xray


def configure_from_settings(settings: Settings) -> None:
    """Apply the deployment's switches: ``xray_tracing`` (``WORKERLESS_XRAY_TRACING``)."""
    _Config.xray = settings.xray_tracing


def suppress_metrics_while(predicate: Callable[[], bool] | None) -> Callable[[], bool] | None:
    """Write no metrics while ``predicate()`` is true, unless :func:`configure` forces them on or off.
    Returns the predicate it replaces (``None`` removes it).

    Local mode (the devkit) registers "a local invocation is running", so its runs publish nothing a
    deployment would be billed for; in Lambda nothing registers one.

    Example:
        >>> previous = suppress_metrics_while(lambda: True)
        >>> metrics_enabled()
        False
        >>> _ = suppress_metrics_while(previous)
    """
    previous, _Config.quiet = _Config.quiet, predicate
    return previous


def metrics_enabled() -> bool:
    """Whether an invocation started now writes metrics (see :func:`configure`)."""
    if _Config.metrics is not None:
        return _Config.metrics
    return _Config.quiet is None or not _Config.quiet()


# ------------------------------------------------------------------------------------------------
# Metrics


Dimensions = tuple[tuple[str, str], ...]


class MetricsBuffer:
    """One invocation's metric values, grouped by dimension set, until :meth:`documents`.

    Counts are summed (one value per flush); other units keep every value (CloudWatch computes
    the statistics). Thread-safe: a handler may record from threads it starts.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[Dimensions, dict[str, tuple[str, list[float]]]] = {}

    def add(self, name: str, value: float, unit: str, dimensions: Dimensions) -> None:
        with self._lock:
            metrics = self._values.setdefault(dimensions, {})
            found = metrics.get(name)
            if found is None:
                metrics[name] = (unit, [float(value)])
            elif unit == "Count":
                found[1][0] += float(value)
            else:
                found[1].append(float(value))

    def values(self, name: str, **dimensions: str) -> list[float]:
        """The values of ``name`` under exactly these dimensions (tests, the report)."""
        key = _dimension_key(dimensions)
        with self._lock:
            found = self._values.get(key, {}).get(name)
            return list(found[1]) if found else []

    def total(self, name: str) -> float:
        """``name`` summed over every dimension set."""
        with self._lock:
            return sum(sum(m[name][1]) for m in self._values.values() if name in m)

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._values)

    def documents(self) -> list[dict[str, Any]]:
        """The EMF documents: one per dimension set (and per 100 values of a metric)."""
        with self._lock:
            snapshot = {dims: {n: (u, list(v)) for n, (u, v) in m.items()} for dims, m in self._values.items()}
        timestamp = int(time.time() * 1000)
        documents: list[dict[str, Any]] = []
        for dims, metrics in snapshot.items():
            chunks = max((len(values) + _MAX_VALUES - 1) // _MAX_VALUES for _, values in metrics.values())
            for chunk in range(chunks):
                part = {
                    name: (unit, values[chunk * _MAX_VALUES : (chunk + 1) * _MAX_VALUES])
                    for name, (unit, values) in metrics.items()
                }
                document = emf_document(part, dims, timestamp=timestamp)
                if document is not None:
                    documents.append(document)
        return documents


def emf_document(
    metrics: dict[str, tuple[str, list[float]]], dims: Dimensions, *, timestamp: int
) -> dict[str, Any] | None:
    """One EMF document (``{"_aws": ..., "service": ..., <dimensions>, <metric>: [values]}``, as
    Powertools' ``AmazonCloudWatchEMFProvider.serialize_metric_set`` writes it) of ``metrics``
    (name → unit and values) under ``service`` plus ``dims``; None when no metric has a value.

    A document with dimensions beyond ``service`` also declares the service-wide roll-up of the same
    values: alarms and the dashboard's totals read it without knowing the job types (an alarm cannot
    use SEARCH)."""
    present = {name: (unit, values) for name, (unit, values) in metrics.items() if values}
    if not present:
        return None
    dimensions = [["service", *(key for key, _ in dims)]]
    if dims:
        dimensions.append(["service"])
    document: dict[str, Any] = {
        "_aws": {
            "Timestamp": timestamp,
            "CloudWatchMetrics": [
                {
                    "Namespace": NAMESPACE,
                    "Dimensions": dimensions,
                    "Metrics": [{"Name": name, "Unit": unit} for name, (unit, _) in present.items()],
                }
            ],
        },
        "service": SERVICE,
    }
    document.update(dims)
    document.update((name, values) for name, (_, values) in present.items())
    return document


@functools.cache
def _units() -> frozenset[str]:
    """The units CloudWatch accepts (Powertools' MetricUnit: Count, Milliseconds, ...)."""
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.metric_properties import MetricUnit

    return frozenset(unit.value for unit in MetricUnit)


def _dimension_key(dimensions: dict[str, str]) -> Dimensions:
    return tuple(sorted((k, v) for k, v in dimensions.items() if v))


_BUFFER: contextvars.ContextVar[MetricsBuffer | None] = contextvars.ContextVar("workerless_metrics", default=None)


def add_metric(name: str, value: float, unit: str = "Count", *, job_type: str | None = None, **dimensions: str) -> None:
    """Add a value to the current invocation's metrics (dropped outside :func:`invocation_metrics`).

    ``job_type`` becomes the ``JobType`` dimension; other keyword arguments are dimensions too.
    """
    buffer = _BUFFER.get()
    if buffer is None or (unit == "Count" and not value):
        return  # a count of 0 is not published: CloudWatch bills each metric for every hour it is sent
    if not (isinstance(name, str) and 0 < len(name) <= _MAX_NAME) or unit not in _units():
        logger.warning("metric not published: invalid name or unit", extra={"metric": repr(name), "unit": unit})
        return
    if not isinstance(value, numbers.Real) or not math.isfinite(value):
        logger.warning("metric not published: not a finite number", extra={"metric": name, "value": repr(value)})
        return
    if job_type is not None:
        dimensions = {"JobType": job_type, **dimensions}
    buffer.add(name, value, unit, _dimension_key(dimensions))


@contextlib.contextmanager
def invocation_metrics() -> Iterator[MetricsBuffer | None]:
    """Collect the metrics of one invocation and write them as EMF lines when it ends.

    Yields the buffer (None when metrics are off: nothing is collected). Never raises from the flush.
    """
    buffer = MetricsBuffer() if metrics_enabled() else None
    token = _BUFFER.set(buffer)
    try:
        yield buffer
    finally:
        _BUFFER.reset(token)
        if buffer:
            flush(buffer)


def flush(buffer: MetricsBuffer) -> None:
    """Write ``buffer`` as EMF lines to the sink (never raises)."""
    try:
        from aws_lambda_powertools.metrics.functions import is_metrics_disabled

        if is_metrics_disabled():
            return
        sink = _Config.sink or _stdout
        for document in buffer.documents():
            sink(json.dumps(document, separators=(",", ":")))
    except Exception:  # metrics must never fail an invocation
        logger.warning("could not write metrics", exc_info=True)


def _stdout(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def poll_report(report: Any) -> None:
    """Count one poller invocation's :class:`~workerless.poller.PollReport`: nothing for an idle one
    (no job taken, no error), so an idle tick publishes no metric."""
    errors = getattr(report, "errors", 0)
    if getattr(report, "activated", 0) or errors:
        add_metric(POLL_CYCLES, getattr(report, "cycles", 0))
    add_metric(POLL_ERRORS, errors)


def engine_error(exc: BaseException, *, operation: str = "") -> None:
    """Count one engine call that failed, by HTTP status (or the error class without one)."""
    status = getattr(exc, "status", None)
    add_metric(ENGINE_ERRORS, 1, "Count", Status=str(status) if status is not None else type(exc).__name__)
    logger.debug("engine call failed", extra={"operation": operation, "status": status})


def observe_engine(engine: Engine) -> Engine:
    """``engine`` wrapped in :class:`workerless.observer.ObservedEngine` (once)."""
    from workerless.observer import ObservedEngine

    return engine if isinstance(engine, ObservedEngine) else ObservedEngine(engine)


# ------------------------------------------------------------------------------------------------
# Traces

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C traceparent (``00-<trace id>-<span id>-<flags>``), None if malformed.

    Example:
        >>> trace_id_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        '4bf92f3577b34da6a3ce929d0e0e4736'
    """
    if not traceparent:
        return None
    found = _TRACEPARENT.match(traceparent.strip().lower())
    if found is None or found.group(1) == "ff" or set(found.group(2)) == {"0"} or set(found.group(3)) == {"0"}:
        return None
    return found.group(2)


@functools.cache
def _otel() -> Any:
    """The OpenTelemetry API's trace and context modules and W3C propagator, or None without
    opentelemetry-api.

    Imported on the first job, not at cold start (about 20 ms)."""
    try:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    return trace, TraceContextTextMapPropagator(), context


@functools.cache
def _xray_tracer() -> Any:
    try:
        from aws_lambda_powertools import Tracer

        return Tracer(service=SERVICE)
    except Exception:  # noqa: BLE001 - aws-xray-sdk missing: tracing off, the job still runs
        logger.warning("X-Ray tracing is on but Powertools Tracer cannot start (is aws-xray-sdk installed?)")
        return None


class JobSpan:
    """What :func:`job_span` yields: the handler span's ids, for log lines and outbound calls."""

    def __init__(self, trace_id: str | None, traceparent: str | None, span: Any = None) -> None:
        self.trace_id = trace_id
        #: The traceparent to forward on the handler's outbound calls: the handler span's own when
        #: an OpenTelemetry SDK records spans, the engine's otherwise.
        self.traceparent = traceparent
        self.span = span


@contextlib.contextmanager
def job_span(activated: Any) -> Iterator[JobSpan]:
    """Run one handler call as a span whose parent is the engine's traceparent; time it.

    Records ``PickupLatency`` (engine activation → now) on entry and ``HandlerDuration`` on exit.
    With ``opentelemetry-api`` installed the span is started by the global tracer provider (a no-op
    one unless the function configures an SDK; the trace id is the engine's either way); without it,
    only the ids are parsed from the traceparent. Exceptions from the handler pass through.
    """
    ref = activated.ref
    started = time.time()
    activated_at = float(getattr(activated, "activated_at", 0.0) or 0.0)
    if activated_at > 0:
        add_metric(PICKUP_LATENCY, max(0.0, (started - activated_at) * 1000.0), "Milliseconds")
    traceparent: str | None = activated.traceparent
    with contextlib.ExitStack() as stack:
        span_info: JobSpan | None = None
        otel = _otel()
        if otel is not None:
            try:
                span_info = _start_otel_span(stack, otel, activated, traceparent)
            except Exception:  # tracing must never fail a job
                logger.debug("could not start the handler span", exc_info=True)
        if span_info is None:
            span_info = JobSpan(trace_id_of(traceparent), traceparent)
        if _Config.xray:
            tracer = _xray_tracer()
            if tracer is not None:
                try:
                    subsegment = stack.enter_context(tracer.provider.in_subsegment(f"## {ref.job_type}"))
                    subsegment.put_annotation("job_type", ref.job_type)
                    subsegment.put_annotation("job_id", ref.job_id)
                except Exception:  # tracing must never fail a job
                    logger.debug("could not start the X-Ray subsegment", exc_info=True)
        try:
            yield span_info
        finally:
            elapsed = (time.time() - started) * 1000.0
            add_metric(HANDLER_DURATION, elapsed, "Milliseconds")


def _start_otel_span(stack: contextlib.ExitStack, otel: Any, activated: Any, traceparent: str | None) -> JobSpan:
    trace, propagator, context_api = otel
    parent = propagator.extract({"traceparent": traceparent}) if traceparent else None
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # No OpenTelemetry SDK (none configured: the API's own provider). Its tracer's span would be
        # the parent's own non-recording span (NoOpTracer.start_span returns it), made current until
        # the handler returns: make it current directly, without the tracer's span machinery (a
        # tenth of the wrapper's CPU per job). The same span and context for every reader.
        span = trace.get_current_span(parent)
        if not isinstance(span, trace.NonRecordingSpan):
            span = trace.NonRecordingSpan(span.get_span_context())
        token = context_api.attach(trace.set_span_in_context(span))
        stack.callback(context_api.detach, token)
    else:
        ref = activated.ref
        attributes = {
            "workerless.job.id": ref.job_id,
            "workerless.job.type": ref.job_type,
            "workerless.engine": ref.engine,
            "workerless.instance.id": activated.instance_id or "",
        }
        tracer = trace.get_tracer("workerless")
        span = stack.enter_context(
            tracer.start_as_current_span(
                ref.job_type, context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
            )
        )
    context = span.get_span_context()
    if not context.is_valid:
        return JobSpan(trace_id_of(traceparent), traceparent, span)
    # What the W3C propagator injects for the current span (its traceparent, less any tracestate).
    forwarded = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    return JobSpan(format(context.trace_id, "032x"), forwarded, span)


def current_traceparent() -> str | None:
    """The traceparent of the running handler span (to forward on an outbound call), or None.

    Needs ``opentelemetry-api``; without an OpenTelemetry SDK it is the engine's traceparent.
    """
    otel = _otel()
    if otel is None:
        return None
    carrier: dict[str, str] = {}
    otel[1].inject(carrier)
    return carrier.get("traceparent")
