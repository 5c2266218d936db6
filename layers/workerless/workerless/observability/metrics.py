"""Metrics: the fixed set, one invocation's buffer, and the EMF lines it is written as."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import math
import numbers
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from workerless.observability.logs import logger
from workerless.observability.switches import _Config, metrics_enabled

if TYPE_CHECKING:
    from workerless._poller.poller import PollReport

#: CloudWatch namespace and the ``service`` dimension of every workerless metric.
NAMESPACE = "workerless"
SERVICE = "workerless"


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

#: Metrics that are not lifecycle steps (unit; dimensions). None where AWS's own free metrics say
#: the same: a function's run time is AWS/Lambda Duration (each route has its own function), the
#: poller's runs AWS/Lambda Invocations (docs/operating.md).
POLL_ERRORS = "PollErrors"  # Count; service. Activation calls the engine refused or that failed.
ENGINE_ERRORS = "EngineErrors"  # Count; service, Status. Every engine call that raised an EngineError.
PICKUP_LATENCY = "PickupLatency"  # Milliseconds; service. Engine activation → handler start.

#: Every metric the library publishes (namespace ``workerless``): the fixed set.
METRICS = frozenset({*EVENT_METRICS.values(), POLL_ERRORS, ENGINE_ERRORS, PICKUP_LATENCY})

#: EMF accepts at most 100 values per metric in one document: a metric with more is split.
_MAX_VALUES = 100
#: CloudWatch's limit on a metric name's length.
_MAX_NAME = 255


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
def invocation_metrics(enabled: bool = True) -> Iterator[MetricsBuffer | None]:
    """Collect the metrics of one invocation and write them as EMF lines when it ends; ``enabled``:
    whether its wiring writes any (:func:`~workerless.observability.switches.metrics_enabled`).

    Yields the buffer (None when metrics are off: nothing is collected). Never raises from the flush.
    """
    buffer = MetricsBuffer() if metrics_enabled(enabled) else None
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


def poll_report(report: PollReport) -> None:
    """Count one poller invocation's :class:`~workerless._poller.poller.PollReport`: its failed polls only
    (a count of 0 is not published, so an idle tick publishes no metric). Its jobs are counted as
    they are activated (``JobsActivated``); its runs are the poller's AWS/Lambda Invocations."""
    add_metric(POLL_ERRORS, report.errors)


def engine_error(exc: BaseException, *, operation: str = "") -> None:
    """Count one engine call that failed, by HTTP status (or the error class without one)."""
    status = getattr(exc, "status", None)
    add_metric(ENGINE_ERRORS, 1, "Count", Status=str(status) if status is not None else type(exc).__name__)
    logger.debug("engine call failed", extra={"operation": operation, "status": status})


# ------------------------------------------------------------------------------------------------
