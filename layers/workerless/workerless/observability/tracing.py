"""Traces: the handler's span, parented on the engine's W3C traceparent."""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from workerless.observability.logs import logger
from workerless.observability.metrics import PICKUP_LATENCY, SERVICE, add_metric
from workerless.observability.switches import _Config

if TYPE_CHECKING:
    from types import ModuleType

    from aws_lambda_powertools import Tracer
    from opentelemetry.trace import Span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from workerless._core.model import ActivatedJob

    #: opentelemetry.trace, its W3C propagator, opentelemetry.context.
    Otel = tuple[ModuleType, TraceContextTextMapPropagator, ModuleType]

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


def correlation_keys(job: ActivatedJob) -> dict[str, str | None]:
    """A job's correlation keys for a log line, the handler's own (job id, engine, instance id,
    trace id): the poller's and the handler's lines of one job are found by the same keys.

    Example:
        >>> from workerless._core.model import ActivatedJob, JobRef
        >>> ref = JobRef("sheptra", "7", "charge-payment")
        >>> correlation_keys(ActivatedJob(ref, {}, 0, 0, instance_id="wf-1"))
        {'job_id': '7', 'engine': 'sheptra', 'instance_id': 'wf-1', 'trace_id': None}
    """
    return {
        "job_id": job.ref.job_id,
        "engine": job.ref.engine,
        "instance_id": job.instance_id,
        "trace_id": trace_id_of(job.traceparent),
    }


@functools.cache
def _otel() -> Otel | None:
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
def _xray_tracer() -> Tracer | None:
    try:
        from aws_lambda_powertools import Tracer

        return Tracer(service=SERVICE)
    except Exception:  # noqa: BLE001 - aws-xray-sdk missing: tracing off, the job still runs
        logger.warning("X-Ray tracing is on but Powertools Tracer cannot start (is aws-xray-sdk installed?)")
        return None


class JobSpan:
    """What :func:`job_span` yields: the handler span's ids, for log lines and outbound calls."""

    def __init__(self, trace_id: str | None, traceparent: str | None, span: Span | None = None) -> None:
        self.trace_id = trace_id
        #: The traceparent to forward on the handler's outbound calls: the handler span's own when
        #: an OpenTelemetry SDK records spans, the engine's otherwise.
        self.traceparent = traceparent
        self.span = span


@contextlib.contextmanager
def job_span(activated: ActivatedJob, *, xray: bool = False) -> Iterator[JobSpan]:
    """Run one handler call as a span whose parent is the engine's traceparent.

    Records ``PickupLatency`` (engine activation → now) on entry. The run time is the function's
    AWS/Lambda Duration (free; a batch's jobs run inside one invocation) and the span's own.
    With ``opentelemetry-api`` installed the span is started by the global tracer provider (a no-op
    one unless the function configures an SDK; the trace id is the engine's either way); without it,
    only the ids are parsed from the traceparent. ``xray`` (the wiring's ``xray_tracing``, unless
    :func:`~workerless.observability.configure` set the process's) adds an X-Ray subsegment.
    Exceptions from the handler pass through.
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
        if _Config.xray if _Config.xray is not None else xray:
            tracer = _xray_tracer()
            if tracer is not None:
                try:
                    subsegment = stack.enter_context(tracer.provider.in_subsegment(f"## {ref.job_type}"))
                    subsegment.put_annotation("job_type", ref.job_type)
                    subsegment.put_annotation("job_id", ref.job_id)
                except Exception:  # tracing must never fail a job
                    logger.debug("could not start the X-Ray subsegment", exc_info=True)
        yield span_info


def _start_otel_span(
    stack: contextlib.ExitStack[bool | None], otel: Otel, activated: ActivatedJob, traceparent: str | None
) -> JobSpan:
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
