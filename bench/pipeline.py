"""An in-process, single-threaded run of the whole pipeline: poller → SQS → handler → engine, and
the heartbeat — the library's real entry points (``workerless.entrypoints``, ``job_handler``) on
in-memory fakes of botocore (:mod:`bench.fakes`) and of the engine's transport
(:func:`workerless_devkit.emulators.http.mock_transport` in front of a real emulator's router).

The driver plays Lambda's part: it invokes the poller (and the dead-letter function's scheduled
drain), runs each route's SQS event source (receive up to BatchSize, invoke, delete what succeeded)
and the heartbeat queue's, and times the
CPU of every invocation net of the CPU spent inside the fakes and the emulator.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.fakes import FakeDynamo, FakeSqs, Meter

TABLE = "bench-jobs"
HEARTBEAT_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/heartbeat"
TICKER_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/ticker"
DEAD_LETTER_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/job-dead-letters"
FAKE_BASE_URL = "http://127.0.0.1:9"  # never dialled: the mock transport answers in-process


def queue_url(job_type: str) -> str:
    return f"https://sqs.us-east-1.amazonaws.com/123456789012/{job_type}"


@dataclass
class Context:
    function_name: str
    remaining_ms: int = 60_000
    memory_limit_in_mb: int = 256
    aws_request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:bench"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class VirtualClock:
    """``time.time`` plus an offset the driver moves forward (tickets, leases) without sleeping."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._real = time.time

    def __call__(self) -> float:
        return self._real() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@contextlib.contextmanager
def patched_time(clock: VirtualClock) -> Iterator[None]:
    """Make every ``time.time()`` in the process read the virtual clock (the pipeline, the emulators).
    Re-entrant: inside a block already reading ``clock`` it changes nothing."""
    real = time.time
    if real is clock:
        yield
        return
    time.time = clock  # type: ignore[assignment]
    try:
        yield
    finally:
        time.time = real  # type: ignore[assignment]


class CountingSink:
    """A write-only stream that counts the bytes (CloudWatch Logs bills ingestion) and, of the EMF
    lines among them, every custom metric (name x dimension set with its values) and the hour of
    ``time.time()`` (the virtual clock in a billable run) in which it was published: CloudWatch bills
    each custom metric for every hour in which it is published."""

    def __init__(self) -> None:
        self.bytes = 0
        self.lines = 0
        self.metric_hours: set[tuple[int, str]] = set()
        self._pending = ""

    def write(self, text: str) -> int:
        self.bytes += len(text.encode())
        self.lines += text.count("\n")
        if '"_aws"' in text or self._pending:
            self._pending += text
            *complete, self._pending = self._pending.split("\n")
            for line in complete:
                self._metrics(line)
        return len(text)

    def _metrics(self, line: str) -> None:
        if '"_aws"' not in line:
            return
        try:
            doc = json.loads(line)
            spec = doc["_aws"]["CloudWatchMetrics"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            return
        hour = int(time.time() // 3600)
        for metric in spec["Metrics"]:
            for dimensions in spec["Dimensions"]:
                values = ",".join(f"{d}={doc.get(d)}" for d in dimensions)
                self.metric_hours.add((hour, f"{spec['Namespace']}/{metric['Name']}[{values}]"))

    def metrics_between(self, start_hour: int, end_hour: int) -> dict[int, set[str]]:
        """The custom metrics published in each hour bucket from ``start_hour`` to ``end_hour``."""
        out: dict[int, set[str]] = {}
        for hour, name in self.metric_hours:
            if start_hour <= hour <= end_hour:
                out.setdefault(hour, set()).add(name)
        return out

    def flush(self) -> None:
        return None


#: What Powertools' inject_lambda_context puts on an entry point's lines (its lambda_context model).
_LAMBDA_CONTEXT_KEYS = ("cold_start", "function_name", "function_memory_size", "function_arn", "function_request_id")

#: Everything the library logged or printed (logs, EMF metrics) inside quiet_logs(), process-wide.
LOG_SINK = CountingSink()


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep the library's JSON logs and metrics (formatted at INFO as in Lambda: that CPU counts) off the terminal."""
    import workerless.observability  # noqa: F401 - builds the library's logger and its handler

    sink = LOG_SINK
    handlers = [h for h in logging.getLogger("workerless").handlers if isinstance(h, logging.StreamHandler)]
    saved = [h.stream for h in handlers]
    for h in handlers:
        h.setStream(sink)
    try:
        # Powertools Metrics prints its EMF blobs to stdout (CloudWatch picks them up in Lambda).
        with contextlib.redirect_stdout(sink):
            yield
    finally:
        for h, stream in zip(handlers, saved, strict=True):
            h.setStream(stream)


class TimedTransport(httpx.BaseTransport):
    """The emulator's in-process transport, with the CPU spent answering (the engine's, not ours) metered."""

    def __init__(self, router: Any, meter: Meter | None = None) -> None:
        from workerless_devkit.emulators.http import mock_transport

        self._inner = mock_transport(router)
        self._meter = meter
        self.cpu = 0.0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._meter is not None:
            self._meter.calls_by_caller[f"{self._meter.caller}:engine"] += 1
        start = time.thread_time()
        try:
            return self._inner.handle_request(request)
        finally:
            self.cpu += time.thread_time() - start


def emulator_for(engine: str) -> Any:
    """``engine``'s emulator, not served: the bench reaches its router in process (mock_transport)."""
    from workerless_devkit.emulators import create

    return create(engine)


@dataclass
class Invocations:
    count: Counter[str] = field(default_factory=Counter)
    cpu: Counter[str] = field(default_factory=Counter)  # net CPU seconds (fakes and emulator excluded)
    wall: Counter[str] = field(default_factory=Counter)
    #: virtual seconds a function spent paused (the lingering poller's sleeps): billed duration all the same
    paused: Counter[str] = field(default_factory=Counter)


class Pipeline:
    """One deployment's functions on fakes. ``handlers`` maps job type → ``fn(job) -> dict``."""

    def __init__(
        self,
        engine: str,
        handlers: dict[str, Callable[[Any], Any]],
        *,
        max_in_flight: int = 10,
        lease_seconds: int = 60,
        batch_size: int = 5,
        poll_budget_seconds: float = 0.0,
        tick_seconds: int = 0,
        clock: VirtualClock | None = None,
        sqs_client: Any = None,
        dynamodb_client: Any = None,
        virtual_poller: bool = False,
        sqs_lag_seconds: float = 0.0,
    ) -> None:
        """``sqs_lag_seconds``: WORKERLESS_SQS_LAG_SECONDS, how long the poller counts what it sent as
        in flight on top of SQS's count. 0 by default: the fakes (and moto) count exactly. A driver
        that moves the virtual clock as a deployment would (the virtual poller's stream) passes the
        deployed value."""
        self.engine_name = engine
        self.clock = clock or VirtualClock()
        self.meter = Meter()
        # Real boto3 clients (moto) may replace the fakes: bench.moto_check cross-checks the meters.
        self.sqs: Any = sqs_client or FakeSqs(self.meter, clock=self.clock, visibility=720)
        self.dynamo: Any = dynamodb_client or FakeDynamo(self.meter)
        self.emulator = emulator_for(engine)
        self.transport = TimedTransport(self.emulator.router, self.meter)
        self.batch_size = batch_size
        self.invocations = Invocations()
        self.job_types = list(handlers)
        routes = [{"type": t, "queue": queue_url(t), "max": max_in_flight} for t in handlers]
        self.env = {
            "WORKERLESS_ENGINE": engine,
            "WORKERLESS_TABLE": TABLE,
            "WORKERLESS_ROUTES": json.dumps(routes),
            "WORKERLESS_HEARTBEAT_QUEUE_URL": HEARTBEAT_URL,
            "WORKERLESS_TICKER_QUEUE_URL": TICKER_URL,
            "WORKERLESS_DEAD_LETTER_QUEUE_URL": DEAD_LETTER_URL,
            "WORKERLESS_TICK_SECONDS": str(tick_seconds),
            "WORKERLESS_LEASE_SECONDS": str(lease_seconds),
            "WORKERLESS_POLL_BUDGET_SECONDS": str(poll_budget_seconds),
            "WORKERLESS_SQS_LAG_SECONDS": str(sqs_lag_seconds),
            "POWERTOOLS_SERVICE_NAME": "workerless",
        }
        self._handler_fns = handlers
        self._lambda_handlers: dict[str, Callable[[dict[str, Any], Any], dict[str, Any]]] = {}
        self._saved_env: dict[str, str | None] = {}
        #: The shipped poller lingers (pauses LINGER_PAUSE_SECONDS between polls while work flows). With
        #: ``virtual_poller`` its clock is the virtual one and a pause advances it and calls ``on_pause``,
        #: where the driver lets the rest of the deployment run (arrivals, handlers, heartbeat) — the
        #: single-threaded stand-in for what happens concurrently while a real poller sleeps.
        self.virtual_poller = virtual_poller
        self.on_pause: Callable[[], None] | None = None
        self._descendants_cpu = 0.0

    # -- setup ------------------------------------------------------------------------------------
    def __enter__(self) -> Pipeline:
        from workerless import job_handler, runtime
        from workerless._core.settings import get_settings
        from workerless.aws.dynamo import DynamoState, JobStore
        from workerless.aws.sqs import Queues
        from workerless.engines import build_engine, new_http_client
        from workerless.wiring import Wiring

        for key, value in self.env.items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = value
        runtime.reset()
        settings = get_settings()
        store = JobStore(TABLE, ttl_seconds=settings.record_ttl_seconds, client=self.dynamo)
        client = new_http_client(10, transport=self.transport)  # the client as shipped, in front of the emulator
        values = self.emulator.engine_values(FAKE_BASE_URL)
        # The deployment's wiring, on fakes: every function of it shares one (one container each in
        # AWS; the benchmark's functions run in this process). The virtual poller's clock and pauses
        # are the wiring's: a pause advances the virtual clock and lets the rest of the deployment run.
        virtual = self.virtual_poller
        wiring = Wiring(
            store=store,
            queues=Queues(client=self.sqs),
            engine=build_engine(self.engine_name, values, client, state=DynamoState(store)),
            clock=self.monotonic if virtual else time.monotonic,
            sleep=(lambda seconds: self._pause("poller", seconds)) if virtual else time.sleep,
        )
        runtime.reset(wiring)
        for job_type, fn in self._handler_fns.items():
            self._lambda_handlers[job_type] = job_handler(job_type)(fn)
        return self

    def __exit__(self, *exc: object) -> None:
        from workerless import runtime

        runtime.reset()
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def monotonic(self) -> float:
        """The poller's clock under ``virtual_poller``: monotonic time plus the virtual offset."""
        return time.monotonic() + self.clock.offset

    def _pause(self, function: str, seconds: float) -> None:
        self.clock.advance(seconds)
        self.invocations.paused[function] += seconds
        caller = self.meter.caller
        try:
            if self.on_pause is not None:
                self.on_pause()
        finally:
            self.meter.caller = caller

    # -- invocations --------------------------------------------------------------------------------
    def _invoke(self, function: str, call: Callable[[], Any]) -> Any:
        # Invocations nest when a virtual poller's pause runs the handlers: each counts only its own CPU.
        caller = self.meter.caller
        self.meter.caller = function
        fake0, engine0, nested0 = self.meter.fake_cpu, self.transport.cpu, self._descendants_cpu
        # Each function is a process of its own in Lambda: a handler's lines carry no other function's
        # Lambda-context keys (the entry points' inject_lambda_context; a handler batch injects none),
        # and the invocation it interrupted gets its own back.
        from workerless.observability import logger

        keys = logger.registered_formatter.log_format
        saved = dict(keys)
        if function not in ("poller", "heartbeat", "deadletter"):
            for key in _LAMBDA_CONTEXT_KEYS:
                keys.pop(key, None)
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        try:
            return call()
        finally:
            keys.clear()
            keys.update(saved)
            cpu = time.thread_time() - cpu0
            net = (
                cpu - (self.meter.fake_cpu - fake0) - (self.transport.cpu - engine0) - (self._descendants_cpu - nested0)
            )
            self._descendants_cpu += net
            self.invocations.count[function] += 1
            self.invocations.wall[function] += time.perf_counter() - wall0
            self.invocations.cpu[function] += net
            self.meter.caller = caller if caller != "?" else "esm"

    def poll(self, event: dict[str, Any] | None = None) -> dict[str, Any]:
        from workerless import entrypoints

        result: dict[str, Any] = self._invoke("poller", lambda: entrypoints.poller(event or {}, Context("poller")))
        return result

    def drain_dead_letters(self) -> dict[str, Any]:
        """The dead-letter function's scheduled run (template.yaml: a Schedule, no event source)."""
        from workerless import entrypoints

        event = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
        result: dict[str, Any] = self._invoke(
            "deadletter", lambda: entrypoints.deadletter(event, Context("deadletter"))
        )
        return result

    def _event(self, url: str, max_messages: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.meter.caller = "esm"
        answer = self.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=max_messages, MessageSystemAttributeNames=["All"]
        )
        messages = answer.get("Messages") or []
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:" + url.rsplit("/", 1)[-1],
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
        return {"Records": records}, messages

    def _settle(self, url: str, event: dict[str, Any], response: dict[str, Any]) -> None:
        failed = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures", [])}
        done = [r for r in event["Records"] if r["messageId"] not in failed]
        if done:
            self.meter.caller = "esm"
            self.sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(done)]
            )

    def drain_route(self, job_type: str) -> int:
        """Run the route's event source until its queue has nothing visible; returns jobs handled."""
        url = queue_url(job_type)
        handled = 0
        for _ in range(100_000):
            event, _messages = self._event(url, self.batch_size)
            if not event["Records"]:
                break
            handler = self._lambda_handlers[job_type]
            response = self._invoke(job_type, lambda h=handler, e=event: h(e, Context(job_type, remaining_ms=120_000)))
            self._settle(url, event, response)
            handled += len(event["Records"])
        return handled

    def drain_routes(self) -> int:
        return sum(self.drain_route(t) for t in self.job_types)

    def pump_heartbeat(self) -> int:
        """Deliver every heartbeat ticket that is due now (batch of 10, as the template's event)."""
        from workerless import entrypoints

        delivered = 0
        for _ in range(10_000):
            event, _messages = self._event(HEARTBEAT_URL, 10)
            if not event["Records"]:
                break
            response = self._invoke("heartbeat", lambda e=event: entrypoints.heartbeat(e, Context("heartbeat")))
            self._settle(HEARTBEAT_URL, event, response)
            delivered += len(event["Records"])
        return delivered

    def engine_stats(self) -> dict[str, int]:
        return dict(self.emulator.router.stats)

    def create_jobs(self, job_type: str, n: int, variables: dict[str, Any] | None = None) -> list[str]:
        return [self.emulator.create_job(job_type, dict(variables or {"n": i})) for i in range(n)]
