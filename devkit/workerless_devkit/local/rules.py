"""AWS's rules on what a template declares, checked before local mode creates or runs anything.

A template that CloudFormation, SQS, Lambda or EventBridge would refuse must not run locally: a
local run at timings AWS would never accept proves nothing. :func:`check_template` raises
:class:`~workerless_devkit.local.template.TemplateError` naming the resource and the rule, in AWS's words
where AWS has them:

- SQS queue attributes within SQS's ranges (VisibilityTimeout 0-43200, DelaySeconds 0-900,
  MaximumMessageSize 1024-1048576, MessageRetentionPeriod 60-1209600,
  ReceiveMessageWaitTimeSeconds 0-20, RedrivePolicy maxReceiveCount 1-1000); a dead-letter queue of
  the same kind as each queue that redrives to it (a standard queue's is standard, a FIFO queue's
  FIFO: a queue shared by several sources, as template.yaml's JobDeadLetterQueue, must suit each);
- Lambda function Timeout 1-900 s, MemorySize 128-10240 MB;
- each SQS event source mapping: the queue's visibility timeout at least the function's timeout
  (Lambda validates it when it creates the mapping), BatchSize 1-10000 (10 for FIFO), a BatchSize
  over 10 only with MaximumBatchingWindowInSeconds of at least 1, the window 0-300 s (none on
  FIFO), ScalingConfig MaximumConcurrency 2-1000;
- Schedule expressions EventBridge accepts: ``rate(value unit)`` with a positive whole value and a
  singular unit for 1 (``rate(1 minute)``, ``rate(5 minutes)``; nothing finer than a minute), or
  ``cron(...)`` with six fields.
"""

from __future__ import annotations

import re

from workerless_devkit.local.limits import queue_attribute_problem
from workerless_devkit.local.template import FunctionSpec, LocalTemplate, QueueSpec, ScheduleEventSpec, TemplateError

LAMBDA_TIMEOUT_RANGE = (1, 900)
LAMBDA_MEMORY_RANGE = (128, 10_240)
SQS_BATCH_SIZE_RANGE = (1, 10_000)
SQS_FIFO_MAX_BATCH_SIZE = 10
#: A BatchSize above this needs a batching window of at least 1 s.
SQS_BATCH_SIZE_WITHOUT_WINDOW = 10
BATCHING_WINDOW_RANGE = (0, 300)
MAXIMUM_CONCURRENCY_RANGE = (2, 1_000)

_RATE = re.compile(r"^rate\((?P<value>[^ )]+) +(?P<unit>[a-z]+)\)$")
_RATE_UNITS = {"minute": "minutes", "hour": "hours", "day": "days"}


def check_template(template: LocalTemplate) -> None:
    """Raise :class:`TemplateError` for the first thing in ``template`` AWS would refuse."""
    for queue in template.queues:
        _check_queue(queue)
        if queue.dead_letter_queue_id is not None:
            target = template.queue(queue.dead_letter_queue_id)
            if target.fifo != queue.fifo:
                kinds = {True: "a FIFO queue", False: "a standard queue"}
                raise TemplateError(
                    f"{queue.logical_id}.RedrivePolicy: the dead-letter queue must be the same kind as its source "
                    f"queue ({queue.logical_id} is {kinds[queue.fifo]}, {target.logical_id} {kinds[target.fifo]})"
                )
    for function in template.functions:
        _check_function(template, function)


def _check_queue(queue: QueueSpec) -> None:
    values: dict[str, int | None] = {
        "VisibilityTimeout": queue.visibility_timeout,
        "DelaySeconds": queue.delay_seconds,
        "MaximumMessageSize": queue.maximum_message_size,
        "MessageRetentionPeriod": queue.message_retention_seconds,
        "ReceiveMessageWaitTimeSeconds": queue.receive_wait_seconds,
    }
    for name, value in values.items():
        if value is not None and queue_attribute_problem(name, value) is not None:
            raise TemplateError(f"{queue.logical_id}.{name}: SQS refuses {value} (InvalidAttributeValue)")
    if queue.max_receive_count is not None:
        problem = queue_attribute_problem("RedrivePolicy", {"maxReceiveCount": queue.max_receive_count})
        if problem is not None:
            raise TemplateError(f"{queue.logical_id}.RedrivePolicy: {problem.split('Reason: ', 1)[-1]}")


def _within(value: float, bounds: tuple[int, int]) -> bool:
    return bounds[0] <= value <= bounds[1]


def _check_function(template: LocalTemplate, function: FunctionSpec) -> None:
    lid = function.logical_id
    if not _within(function.timeout, LAMBDA_TIMEOUT_RANGE):
        raise TemplateError(f"{lid}.Timeout: Lambda accepts 1 to 900 seconds, got {function.timeout}")
    if not _within(function.memory_size, LAMBDA_MEMORY_RANGE):
        raise TemplateError(f"{lid}.MemorySize: Lambda accepts 128 to 10240 MB, got {function.memory_size}")
    for event in function.sqs_events:
        where = f"{lid}.Events.{event.name}"
        queue = template.queue(event.queue_id)
        if queue.visibility_timeout < function.timeout:
            # Lambda's own words (CreateEventSourceMapping's InvalidParameterValueException).
            raise TemplateError(
                f"{where}: Invalid request provided: Queue visibility timeout: {queue.visibility_timeout} seconds "
                f"is less than Function timeout: {function.timeout} seconds ({queue.logical_id} feeds {lid})"
            )
        most = SQS_FIFO_MAX_BATCH_SIZE if queue.fifo else SQS_BATCH_SIZE_RANGE[1]
        if not SQS_BATCH_SIZE_RANGE[0] <= event.batch_size <= most:
            raise TemplateError(
                f"{where}.BatchSize: Lambda accepts 1 to {most} for {queue.logical_id}, got {event.batch_size}"
            )
        window = event.batching_window_seconds
        if not _within(window, BATCHING_WINDOW_RANGE) or window != int(window):
            raise TemplateError(
                f"{where}.MaximumBatchingWindowInSeconds: Lambda accepts whole seconds from 0 to 300, got {window:g}"
            )
        if queue.fifo and window:
            raise TemplateError(
                f"{where}.MaximumBatchingWindowInSeconds: Batching window is not supported for FIFO queues"
            )
        if event.batch_size > SQS_BATCH_SIZE_WITHOUT_WINDOW and window < 1:
            raise TemplateError(
                f"{where}: Maximum batch window in seconds must be greater than 0 if maximum batch size is greater "
                f"than 10 (BatchSize {event.batch_size}, MaximumBatchingWindowInSeconds {window:g})"
            )
        if event.maximum_concurrency is not None and not _within(event.maximum_concurrency, MAXIMUM_CONCURRENCY_RANGE):
            raise TemplateError(
                f"{where}.ScalingConfig.MaximumConcurrency: Lambda accepts 2 to 1000, got {event.maximum_concurrency}"
            )
    for schedule in function.schedule_events:
        problem = schedule_problem(schedule)
        if problem is not None:
            raise TemplateError(f"{lid}.Events.{schedule.name}: {problem}")


def schedule_problem(schedule: ScheduleEventSpec) -> str | None:
    """Why EventBridge refuses ``schedule``'s expression (None: it accepts it)."""
    expression = schedule.expression.strip()
    if expression.startswith("cron(") and expression.endswith(")"):
        fields = expression[5:-1].split()
        if len(fields) != 6:
            return f"Parameter ScheduleExpression is not valid: {expression!r} (cron needs six fields)"
        return None
    found = _RATE.match(expression)
    if found is None:
        return f"Parameter ScheduleExpression is not valid: {expression!r} (rate(value unit) or cron(...))"
    value, unit = found.group("value"), found.group("unit")
    if not value.isdigit() or int(value) < 1:
        return f"Parameter ScheduleExpression is not valid: {expression!r} (the value must be a positive whole number)"
    singular = set(_RATE_UNITS)
    plural = set(_RATE_UNITS.values())
    if unit not in singular | plural:
        return (
            f"Parameter ScheduleExpression is not valid: {expression!r} (units are minute(s), hour(s), day(s): "
            "a schedule fires at most once a minute)"
        )
    if (int(value) == 1) != (unit in singular):
        return f"Parameter ScheduleExpression is not valid: {expression!r} (1 takes a singular unit, more a plural one)"
    return None
