"""``workerless status``: per route, what waits, what runs, what died, and whether anyone polls.

Every number comes from something that already exists; status adds no write to the pipeline:

- queue depth / in flight / delayed: GetQueueAttributes on the route's queue
  (``ApproximateNumberOf...``; SQS's own approximation, seconds behind);
- dead letters waiting: the same on the job dead-letter queue every route shares, once (SQS counts a
  queue, not the job types in it; ``workerless dlq show`` reads the types from the messages, and the
  per-route count of the window is ``JobsDeadLettered``, below);
- last poll: the poller's ticker state item (``pk = state#ticker``, ``last_tick``), which every
  tick of the self-rescheduling chain writes anyway. With ``TickSeconds`` 0 (schedule only) no such
  item exists: status then says "unknown" rather than adding a write per idle poll; the poller
  function's ``AWS/Lambda Invocations`` (below) counts its runs, idle ones included (the library
  publishes no metric of its own for them);
- recent failures, dead letters and oldest message: CloudWatch (``--metrics``; a deployed stack
  only): the workerless EMF metrics ``JobsFailed`` and ``JobsThrown`` (failed) and
  ``JobsDeadLettered`` (dead letters the dead-letter function settled) per ``JobType``, summed over
  the window, the poller's ``AWS/Lambda Invocations``, and ``AWS/SQS ApproximateAgeOfOldestMessage`` (the
  oldest message's age is a CloudWatch metric, not a queue attribute). One GetMetricData call.
  The job table is never scanned: it can be large, and a scan per status would cost more than the
  pipeline's idle day.

For local mode, :func:`topology_status` reads a running :class:`~workerless_devkit.local.LocalTopology` in
the same process (its moto queues and table); across processes there is nothing to read, since the
topology's AWS lives in memory.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from workerless_devkit.devtools.stack import Deployment

TICKER_PK = "state#ticker"
METRICS_NAMESPACE = "workerless"
SERVICE = "workerless"
FAILURE_METRICS = ("JobsFailed", "JobsThrown")
DEAD_LETTER_METRIC = "JobsDeadLettered"


@dataclass
class RouteStatus:
    job_type: str
    waiting: int | None = None
    in_flight: int | None = None
    delayed: int | None = None
    oldest_seconds: float | None = None
    recent_failures: int | None = None
    #: Dead letters of this type the dead-letter function settled in the window (JobsDeadLettered).
    recent_dead_lettered: int | None = None
    errors: list[str] = field(default_factory=list)


@dataclass
class Status:
    source: str
    routes: list[RouteStatus]
    last_poll_seconds_ago: float | None = None
    last_poll_note: str = ""
    #: The poller function's invocations in the window (AWS/Lambda Invocations, free).
    poller_invocations: int | None = None
    window_minutes: int = 60
    #: Messages in the job dead-letter queue (every route's): waiting plus being handled.
    dead_letters: int | None = None
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "last_poll_seconds_ago": self.last_poll_seconds_ago,
            "last_poll_note": self.last_poll_note,
            "poller_invocations": self.poller_invocations,
            "window_minutes": self.window_minutes,
            "dead_letters": self.dead_letters,
            "routes": [
                {
                    "type": r.job_type,
                    "waiting": r.waiting,
                    "in_flight": r.in_flight,
                    "delayed": r.delayed,
                    "oldest_seconds": r.oldest_seconds,
                    "recent_failures": r.recent_failures,
                    "recent_dead_lettered": r.recent_dead_lettered,
                    "errors": r.errors,
                }
                for r in self.routes
            ],
            "errors": self.errors,
        }

    def table(self) -> str:
        """The human view: one line per route, then the job dead-letter queue and the poller lines."""

        def show(value: float | int | None) -> str:
            return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

        failed = f"failed ({self.window_minutes}m)"
        dead = f"dead-lettered ({self.window_minutes}m)"
        headers = ("job type", "waiting", "in flight", "delayed", "oldest (s)", failed, dead)
        rows = [
            (
                r.job_type,
                show(r.waiting),
                show(r.in_flight),
                show(r.delayed),
                show(r.oldest_seconds),
                show(r.recent_failures),
                show(r.recent_dead_lettered),
            )
            for r in self.routes
        ]
        widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
        lines = [f"{self.source}", ""]
        lines.append(
            "  ".join(
                h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True))
            )
        )
        lines.append("  ".join("-" * w for w in widths))
        for row in rows:
            lines.append(
                "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
                )
            )
        if not rows:
            lines.append("(no routes)")
        lines.append("")
        if self.dead_letters is not None:
            lines.append(f"job dead-letter queue (every route's): {self.dead_letters} message(s)")
        if self.last_poll_seconds_ago is not None:
            poll = f"last poll: {self.last_poll_seconds_ago:.0f} s ago"
        else:
            poll = f"last poll: unknown ({self.last_poll_note})" if self.last_poll_note else "last poll: unknown"
        if self.poller_invocations is not None:
            poll += f"; poller invocations in the last {self.window_minutes} min: {self.poller_invocations}"
        lines.append(poll)
        for route in self.routes:
            lines.extend(f"{route.job_type}: {error}" for error in route.errors)
        lines.extend(self.errors)
        return "\n".join(lines)


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", type(exc).__name__))
    return type(exc).__name__


def _queue_numbers(sqs: Any, url: str) -> dict[str, int]:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    ).get("Attributes", {})
    return {key: int(value) for key, value in attributes.items()}


def last_poll(dynamodb: Any, table: str, *, now: float) -> tuple[float | None, str]:
    """Seconds since the ticker's last tick, or None and why not."""
    answer = dynamodb.get_item(TableName=table, Key={"pk": {"S": TICKER_PK}}, ConsistentRead=True)
    item = answer.get("Item")
    if not item:
        return None, "no ticker state: TickSeconds is 0 (schedule only) or the poller has not run yet"
    try:
        value = json.loads(item["value"]["S"])
        return max(0.0, now - float(value["last_tick"])), ""
    except (KeyError, TypeError, ValueError):
        return None, "the ticker state item has no last_tick"


def _metric_queries(deployment: Deployment, period: int) -> list[dict[str, Any]]:
    queries: list[dict[str, Any]] = []
    if deployment.poller_function:
        queries.append(
            {
                "Id": "pollerinvocations",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "AWS/Lambda",
                        "MetricName": "Invocations",
                        "Dimensions": [{"Name": "FunctionName", "Value": deployment.poller_function}],
                    },
                    "Period": period,
                    "Stat": "Sum",
                },
            }
        )
    for index, route in enumerate(deployment.routes):
        for metric_index, metric in enumerate((*FAILURE_METRICS, DEAD_LETTER_METRIC)):
            queries.append(
                {
                    "Id": f"f{index}x{metric_index}",
                    "MetricStat": {
                        "Metric": {
                            "Namespace": METRICS_NAMESPACE,
                            "MetricName": metric,
                            "Dimensions": [
                                {"Name": "service", "Value": SERVICE},
                                {"Name": "JobType", "Value": route.job_type},
                            ],
                        },
                        "Period": period,
                        "Stat": "Sum",
                    },
                }
            )
        if route.queue_url:
            queue_name = route.queue_url.rstrip("/").rsplit("/", 1)[-1]
            queries.append(
                {
                    "Id": f"age{index}",
                    "MetricStat": {
                        "Metric": {
                            "Namespace": "AWS/SQS",
                            "MetricName": "ApproximateAgeOfOldestMessage",
                            "Dimensions": [{"Name": "QueueName", "Value": queue_name}],
                        },
                        "Period": 300,
                        "Stat": "Maximum",
                    },
                }
            )
    return queries


def _apply_metrics(status: Status, deployment: Deployment, cloudwatch: Any, *, now: float) -> None:
    window = status.window_minutes * 60
    results: dict[str, list[float]] = {}
    queries = _metric_queries(deployment, window)
    # GetMetricData takes up to 500 queries per call; a stack has a handful of routes.
    for start in range(0, len(queries), 500):
        kwargs: dict[str, Any] = {
            "MetricDataQueries": queries[start : start + 500],
            "StartTime": now - window,
            # A minute past now: a data point from this second is inside the window either way.
            "EndTime": now + 60,
        }
        for _ in range(20):  # bounded pagination
            answer = cloudwatch.get_metric_data(**kwargs)
            for result in answer.get("MetricDataResults", []):
                results.setdefault(result["Id"], []).extend(float(v) for v in result.get("Values", []))
            token = answer.get("NextToken")
            if not token:
                break
            kwargs["NextToken"] = token
    if deployment.poller_function:
        status.poller_invocations = int(sum(results.get("pollerinvocations", [])))
    for index, route in enumerate(status.routes):
        route.recent_failures = int(sum(sum(results.get(f"f{index}x{m}", [])) for m in range(len(FAILURE_METRICS))))
        route.recent_dead_lettered = int(sum(results.get(f"f{index}x{len(FAILURE_METRICS)}", [])))
        ages = results.get(f"age{index}", [])
        route.oldest_seconds = max(ages) if ages else None


def collect_status(
    deployment: Deployment,
    *,
    sqs: Any,
    dynamodb: Any | None = None,
    cloudwatch: Any | None = None,
    window_minutes: int = 60,
    now: float | None = None,
) -> Status:
    """Read every route's queue, the job dead-letter queue, the ticker state and (with ``cloudwatch``)
    the metrics.

    A failing read is reported in the result (its error code), never raised: status is what you run
    when something is wrong, and one unreadable queue must not hide the others.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    aws_errors = (BotoCoreError, ClientError)
    now = time.time() if now is None else now
    status = Status(deployment.source, [], window_minutes=window_minutes)
    for route in deployment.routes:
        row = RouteStatus(route.job_type)
        if route.queue_url:
            try:
                numbers = _queue_numbers(sqs, route.queue_url)
                row.waiting = numbers.get("ApproximateNumberOfMessages")
                row.in_flight = numbers.get("ApproximateNumberOfMessagesNotVisible")
                row.delayed = numbers.get("ApproximateNumberOfMessagesDelayed")
            except aws_errors as exc:  # reported per route, see the docstring
                row.errors.append(f"queue unreadable: {_error_code(exc)}")
        status.routes.append(row)
    if deployment.dead_letter_url:
        try:
            status.dead_letters = sum(_queue_numbers(sqs, deployment.dead_letter_url).values())
        except aws_errors as exc:
            status.errors.append(f"job dead-letter queue unreadable: {_error_code(exc)}")
    if dynamodb is not None and deployment.table:
        try:
            status.last_poll_seconds_ago, status.last_poll_note = last_poll(dynamodb, deployment.table, now=now)
        except aws_errors as exc:
            status.last_poll_note = f"job table unreadable: {_error_code(exc)}"
    elif not deployment.table:
        status.last_poll_note = "no job table given"
    if cloudwatch is not None:
        try:
            _apply_metrics(status, deployment, cloudwatch, now=now)
        except aws_errors as exc:
            status.errors.append(f"metrics unreadable: {_error_code(exc)}")
    return status


def topology_status(topology: Any) -> Status:
    """:func:`collect_status` of a running :class:`~workerless_devkit.local.LocalTopology` (same process).

    Example:
        >>> with LocalTopology("template.yaml", ".env") as topology:  # doctest: +SKIP
        ...     print(topology_status(topology).table())
    """
    from workerless_devkit.devtools.stack import from_topology

    deployment = from_topology(topology)
    return collect_status(deployment, sqs=topology.client("sqs"), dynamodb=topology.client("dynamodb"))
