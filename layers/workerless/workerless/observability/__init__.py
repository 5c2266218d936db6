"""Logs, metrics and traces.

**Logs.** One Powertools Logger for the library (JSON). While a job is handled, its lines carry the
job id, type, engine, instance id, the engine's traceparent and the trace id as correlation keys.
:func:`emit` writes one line per job lifecycle step (``"job completed"``, with ``lifecycle``,
``job_type`` and ``job_id``), never one per HTTP call: a job's *outcome* (:data:`OUTCOMES`:
completed, failed, thrown, lease lost, ...) at INFO, the steps on the way (activated, dispatched,
started, extended) at DEBUG. CloudWatch Logs bills every byte ingested: at INFO a job that
completes writes one line, not five.

**Metrics** (CloudWatch EMF, namespace ``workerless``). A small, fixed set (:data:`METRICS`), with
the one dimension ``service``; only the rare failure counts (:data:`PER_TYPE`) also carry
``JobType`` (with the roll-up ``service``), and ``EngineErrors`` carries ``Status``. CloudWatch
bills every metric name x dimension set as a custom metric for each hour in which it is published,
so a count of 0 is not published (a missing datapoint reads as 0: the alarms treat missing data as
not breaching) and an idle poller invocation publishes nothing. :func:`emit` counts the steps
that have a metric (:data:`EVENT_METRICS`); :func:`add_metric` takes the others (pickup latency,
poll errors, engine errors by status). Durations and per-type throughput come from AWS's own free
metrics (each route has its own queue and function: ``AWS/SQS``, ``AWS/Lambda`` Duration), as do the
poller's runs (``AWS/Lambda`` Invocations): the library publishes no metric AWS already does.
Values are kept per invocation, in a buffer opened by :func:`invocation_metrics`
(the entry points and the handler wrapper open one), and written as one EMF line per dimension set
when the invocation ends. Lambda sends the lines to CloudWatch Logs, which extracts the metrics: no
``cloudwatch:PutMetricData`` call and no permission for it.

Why not one module-level ``Metrics``: Powertools' ``Metrics`` keeps one dimension set per flush and
shares its metric set between every instance in the process (class attributes), while one poller or
heartbeat invocation counts several job types, and local mode runs many invocations at once in
threads of one process. So each invocation gets its own buffer (a context variable: a thread sees
only its own invocation's buffer, no lock contention between invocations), written in the EMF
format Powertools' provider writes (tests/unit/runtime/observability/test_observability.py compares the two) by
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

Listeners (local mode's summary, tests) hear lifecycle steps through the hooks given to the wiring
(:class:`workerless.wiring.Hooks`): its observer opens :func:`listening` around each invocation.
"""

from __future__ import annotations

from workerless.observability.lifecycle import (
    EVENTS,
    OUTCOMES,
    STEPS,
    Lifecycle,
    Listener,
    emit,
    listening,
)
from workerless.observability.logs import JsonFormatter, apply_log_level, logger
from workerless.observability.metrics import (
    ENGINE_ERRORS,
    EVENT_METRICS,
    METRICS,
    NAMESPACE,
    PER_TYPE,
    PICKUP_LATENCY,
    POLL_ERRORS,
    SERVICE,
    MetricsBuffer,
    add_metric,
    emf_document,
    engine_error,
    flush,
    invocation_metrics,
    poll_report,
)
from workerless.observability.switches import (
    configure,
    configure_from_settings,
    metrics_enabled,
)
from workerless.observability.tracing import JobSpan, correlation_keys, current_traceparent, job_span, trace_id_of

__all__ = [
    "ENGINE_ERRORS",
    "EVENTS",
    "EVENT_METRICS",
    "METRICS",
    "NAMESPACE",
    "OUTCOMES",
    "PER_TYPE",
    "PICKUP_LATENCY",
    "POLL_ERRORS",
    "SERVICE",
    "STEPS",
    "JobSpan",
    "JsonFormatter",
    "Lifecycle",
    "Listener",
    "MetricsBuffer",
    "add_metric",
    "apply_log_level",
    "configure",
    "configure_from_settings",
    "correlation_keys",
    "current_traceparent",
    "emf_document",
    "emit",
    "engine_error",
    "flush",
    "invocation_metrics",
    "job_span",
    "listening",
    "logger",
    "metrics_enabled",
    "poll_report",
    "trace_id_of",
]
