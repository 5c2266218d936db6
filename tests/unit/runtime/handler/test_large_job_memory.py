"""One large job must not stop a route (issue 26, item 2.1): what one invocation holds for a job at
the payload limit stays within its function's MemorySize, and the job after it still goes through.

Lambda kills an invocation whose memory passes its MemorySize: a poller killed while it decodes an
engine answer leaves every job of that answer leased and unrecorded (they lapse, spend an engine
retry, and the next poll takes them again: the route stops); a handler killed the same way goes to
the dead-letter queue after five visibility timeouts. So each test measures, with tracemalloc, the
peak of what the code under test allocates for a job of exactly WORKERLESS_MAX_PAYLOAD_BYTES (its
default: the limit the template deploys with) made of small fields (the costly shape to decode:
CPython builds an object per field), adds the runtime's own memory, and compares the sum with the
MemorySize template.yaml gives that function.

``BASELINE_MB``: the runtime's own memory, measured as the maxrss of CPython 3.12.1 after importing the
poller's and handlers' modules, the three engine adapters and building five boto3 clients and an
httpx client (73 MB; 75 MB under 3.11). The engine's answer streams in 64 KiB chunks, as it does
over a socket.
"""

from __future__ import annotations

import json
import re
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from moto import mock_aws
from workerless._core.claimcheck import PayloadRef, digest
from workerless._core.lease import ACTIVATION_LEASE
from workerless._core.model import ActivatedJob, JobRef, Outcome
from workerless._core.settings import Settings
from workerless._handler.delivery import Delivery
from workerless._poller.poller import Poller, PollReport
from workerless.aws.dynamo import JobStore
from workerless.engines import build_engine
from workerless.engines.base import MemoryState

TEMPLATE = Path(__file__).resolve().parents[4] / "template.yaml"
BASELINE_MB = 73
MIB = 1024 * 1024
BASE = "http://127.0.0.1:9"
VALUES = {
    "sheptra": {"SHEPTRA_TOKEN_ENDPOINT": "", "SHEPTRA_API_URL": BASE},
    "nodeflow": {"NF_URL": BASE, "NF_NAMESPACE": "default", "NF_API_KEY": "nf_key"},
    "stagenext": {"STAGENEXT_API_URL": BASE, "STAGENEXT_API_KEY": "sn-key"},
}
TAKE = {"sheptra": "/v1/jobs/activate", "nodeflow": "/lease", "stagenext": "/jobs/pull"}
ROUTE = "charge-payment"


def template_memory(pattern: str) -> int:
    """A MemorySize default read from template.yaml (the value a deploy gets)."""
    found = re.search(pattern, TEMPLATE.read_text())
    assert found, pattern
    return int(found.group(1))


def poller_memory() -> int:
    return template_memory(r"PollerMemorySize: \{Type: Number, Default: (\d+)")


def handler_memory() -> int:
    return template_memory(r"MemorySize: !FindInMap \[Routes, !Ref Route, MemorySize, DefaultValue: (\d+)\]")


def small_fields(size: int) -> dict[str, int]:
    """A flat object of small fields whose compact JSON is ``size`` bytes or a few bytes under."""
    variables = {f"f{i:07d}": i % 1000 for i in range(size // 16)}
    text = len(json.dumps(variables, separators=(",", ":")))
    i = len(variables)
    while text < size - 24:  # top up with fields of known width
        variables[f"g{i:07d}"] = 1
        text += len(f'"g{i:07d}":1,')
        i += 1
    assert size - 32 <= len(json.dumps(variables, separators=(",", ":"))) <= size
    return variables


class Chunked(httpx.SyncByteStream):
    """An answer arriving in 64 KiB chunks, as it does from a socket."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        for i in range(0, len(self.data), 64 * 1024):
            yield self.data[i : i + 64 * 1024]


def answer(engine: str, variables: list[dict[str, Any]]) -> list[bytes]:
    """The engine's take-work answers handing out one job per entry of ``variables``."""
    expires = "2030-01-01T00:00:00Z"
    if engine == "sheptra":
        jobs = [
            {"id": f"j{i}", "type": ROUTE, "retries": 3, "lockExpiresAt": expires, "variables": v}
            for i, v in enumerate(variables)
        ]
        return [json.dumps({"jobs": jobs}, separators=(",", ":")).encode()]
    if engine == "nodeflow":
        tasks = [
            {"taskId": f"j{i}", "workflowId": "w", "leaseToken": "lt", "leaseExpiresAt": expires, "input": v}
            for i, v in enumerate(variables)
        ]
        return [json.dumps({"tasks": tasks}, separators=(",", ":")).encode()]
    return [  # StageNext hands out one delivery per pull
        json.dumps(
            {"stageId": f"j{i}", "executionId": f"e{i}", "ackToken": f"a{i}", "attempt": 1, "input": v},
            separators=(",", ":"),
        ).encode()
        for i, v in enumerate(variables)
    ]


class Queues:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def in_flight(self, url: str) -> int:
        return 0

    def max_message_bytes(self, url: str) -> int:
        return MIB

    def send_batch(self, url: str, bodies: list[str]) -> list[Any]:
        self.sent.extend(bodies)
        return []

    def send(self, *args: Any, **kwargs: Any) -> None:
        return None


class Payloads:
    """The claim check's bucket, in memory: ``get`` hands out a fresh copy, as a read from S3 does."""

    enabled = True

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.reads = 0

    def put(self, key: str, data: bytes) -> PayloadRef:
        self.objects[key] = data
        return PayloadRef("bucket", key, len(data), digest(data))

    def get(self, ref: PayloadRef) -> bytes:
        self.reads += 1
        return bytes(memoryview(self.objects[ref.key]))


def poll_once(
    engine_name: str,
    variables: list[dict[str, Any]],
    *,
    answers: list[bytes] | None = None,
    max_in_flight: int = 10,
    cycles: int = 3,
    bodies: dict[str, bytes] | None = None,
) -> tuple[float, Queues, list[str], Settings]:
    """Poller cycles (at most ``cycles``) against ``engine_name`` until it has handed out those jobs
    (or the ready-made ``answers``): (traced peak in MB, the queue, the paths of every other engine
    call, the settings). ``bodies``: filled with each other call's request body, by path."""
    answers = answer(engine_name, variables) if answers is None else answers
    del variables
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/workers/bootstrap"):
            return httpx.Response(201, json={"workerId": "wrk_1", "sessionToken": "tok", "expiresInSeconds": 1000})
        if path.endswith(TAKE[engine_name]):
            if not answers:
                return httpx.Response(204)
            return httpx.Response(200, headers={"content-type": "application/json"}, stream=Chunked(answers.pop(0)))
        calls.append(path)
        if bodies is not None:
            bodies[path] = request.content
        return httpx.Response(200, json={"acquired": True, "leaseExpiresAt": "2030-01-01T00:00:00Z"})

    built = build_engine(engine_name, VALUES[engine_name], httpx.Client(transport=httpx.MockTransport(handle)))
    if engine_name == "stagenext":
        built = build_engine(
            engine_name, VALUES[engine_name], httpx.Client(transport=httpx.MockTransport(handle)), state=MemoryState()
        )
    routes = json.dumps([{"type": ROUTE, "queue": "q", "max": max_in_flight}])
    settings = Settings.from_env({"WORKERLESS_ROUTES": routes, "WORKERLESS_POLL_BUDGET_SECONDS": "0"})
    queues = Queues()
    poller = Poller(settings, built, queues, sleep=lambda s: None, payloads=Payloads())
    tracemalloc.start()
    try:
        for _ in range(cycles):  # StageNext pulls one at a time, within a time budget: a slow pull ends a cycle
            poller.cycle(PollReport(), deadline=time.monotonic() + 600)
            if not answers:
                break
        peak = tracemalloc.get_traced_memory()[1] / MIB
    finally:
        tracemalloc.stop()
    return peak, queues, calls, settings


def limit() -> int:
    """WORKERLESS_MAX_PAYLOAD_BYTES as a deployed function has it by default."""
    return Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(poller_memory())}).max_payload_bytes


@pytest.mark.parametrize("engine_name", ["sheptra", "nodeflow", "stagenext"])
def test_a_poller_handed_a_job_at_the_payload_limit_stays_within_its_memory_and_the_next_job_goes_through(
    engine_name: str,
) -> None:
    """GIVEN an engine answer holding a job of small fields at WORKERLESS_MAX_PAYLOAD_BYTES, then a
    small job THEN one poller cycle's traced peak plus the runtime's baseline is within the poller's
    MemorySize, and both jobs are queued (the large one through the claim check)."""
    peak, queues, _, _ = poll_once(engine_name, [small_fields(limit()), {"orderId": "next"}])

    assert peak + BASELINE_MB <= poller_memory(), f"{peak:.0f} MB traced + {BASELINE_MB} MB > {poller_memory()} MB"
    messages = [json.loads(body) for body in queues.sent]
    assert [m["ref"]["job_id"] for m in messages] == ["j0", "j1"], "the job after the large one is dispatched"
    assert messages[0]["payload"]["bytes"] > limit() - 64, "the large job went through the claim check whole"
    assert messages[1]["variables"] == {"orderId": "next"}


@pytest.mark.parametrize("engine_name", ["sheptra", "nodeflow"])
def test_a_job_over_the_limit_is_failed_naming_the_limit_without_being_held(engine_name: str) -> None:
    """GIVEN an answer holding a job twice the limit, then a small job THEN the poller never holds
    the large one whole (it reads at most the limit of it before it knows), fails it at the engine
    naming its size and the limit, and queues the small one."""
    over = 2 * limit()
    peak, queues, calls, _ = poll_once(engine_name, [small_fields(over), {"orderId": "next"}])

    assert peak + BASELINE_MB <= poller_memory()
    assert peak < 0.6 * over / MIB, f"{peak:.0f} MB traced for a {over / MIB:.0f} MiB job"
    assert [json.loads(b)["ref"]["job_id"] for b in queues.sent] == ["j1"]
    failed = [p for p in calls if "j0" in p]
    assert failed and failed[-1].endswith(("/fail", "/report")), calls


def test_jobs_past_one_answers_budget_are_handed_back_for_the_next_poll() -> None:
    """GIVEN an answer of more jobs at the limit than one answer's budget holds THEN the poller
    queues what fits, hands the rest back with their retries unchanged (no backoff), and stays
    within its memory."""
    size = limit()
    count = Settings.from_env({}).answer_budget_bytes // size + 2
    jobs = [{"blob": "x" * (size - 16)} for _ in range(count)]
    peak, queues, calls, settings = poll_once("sheptra", jobs)

    queued = [json.loads(b)["ref"]["job_id"] for b in queues.sent]
    assert peak + BASELINE_MB <= poller_memory()
    assert 1 <= len(queued) < count and len(queued) * size <= settings.answer_budget_bytes
    handed_back = sorted(p.split("/")[-2] for p in calls if p.endswith("/fail"))
    assert handed_back == sorted(f"j{i}" for i in range(count) if f"j{i}" not in queued)


def pulls(inputs: list[bytes]) -> list[bytes]:
    """StageNext pull answers, one delivery per input given as its JSON text (built without
    decoding it: a test holding ten decoded jobs at the limit would need gigabytes itself)."""
    return [
        b'{"stageId":"j%d","executionId":"e%d","ackToken":"a%d","attempt":1,"input":%s}' % (i, i, i, text)
        for i, text in enumerate(inputs)
    ]


def test_a_stagenext_cycle_pulling_several_deliveries_at_the_limit_stays_within_its_memory() -> None:
    """GIVEN more StageNext deliveries at WORKERLESS_MAX_PAYLOAD_BYTES (small fields) than one
    cycle's budget holds, a route with room for all of them, then a small one THEN no poller cycle
    holds more than the poller's MemorySize allows (a cycle stops pulling before a delivery that
    might not fit), and the route keeps moving: every delivery is queued, in order, none failed
    or handed back."""
    size = limit()
    count = Settings.from_env({}).answer_budget_bytes // size + 2
    text = json.dumps(small_fields(size), separators=(",", ":")).encode()
    answers = pulls([text] * count + [b'{"orderId":"next"}'])
    del text
    peak, queues, calls, _ = poll_once("stagenext", [], answers=answers, max_in_flight=3 * count, cycles=count)

    assert peak + BASELINE_MB <= poller_memory(), f"{peak:.0f} MB traced + {BASELINE_MB} MB > {poller_memory()} MB"
    messages = [json.loads(body) for body in queues.sent]
    assert [m["ref"]["job_id"] for m in messages] == [f"j{i}" for i in range(count + 1)]
    assert all(m["payload"]["bytes"] > size - 64 for m in messages[:count]), "each went through the claim check"
    assert messages[count]["variables"] == {"orderId": "next"}
    assert not [p for p in calls if p.endswith(("/result", "/ack"))], calls


@pytest.mark.parametrize("encoded", [False, True], ids=["object", "json-string"])
def test_a_stagenext_delivery_over_the_limit_is_failed_naming_the_limit_without_being_held(encoded: bool) -> None:
    """GIVEN a StageNext delivery twice the limit (its input a JSON object, or a JSON string
    encoding one), then a small one THEN the poller never holds the large one whole, fails it at
    the engine (lease acquire, a terminal failed result naming its size and the limit, then the
    ack), and queues the small one."""
    over = 2 * limit()
    text = json.dumps(small_fields(over), separators=(",", ":"))
    raw = json.dumps(text).encode() if encoded else text.encode()
    answers = pulls([raw, b'"{\\"orderId\\":\\"next\\"}"' if encoded else b'{"orderId":"next"}'])
    del text, raw
    bodies: dict[str, bytes] = {}
    peak, queues, calls, _ = poll_once("stagenext", [], answers=answers, bodies=bodies)

    assert peak + BASELINE_MB <= poller_memory()
    assert peak < 0.6 * over / MIB, f"{peak:.0f} MB traced for a {over / MIB:.0f} MiB job"
    messages = [json.loads(b) for b in queues.sent]
    assert [(m["ref"]["job_id"], m["variables"]) for m in messages] == [("j1", {"orderId": "next"})]
    assert [p for p in calls if "j0" in p] == ["/stages/j0/lease/acquire", "/stages/j0/result"], calls
    result = json.loads(bodies["/stages/j0/result"])
    assert (result["status"], result["retryable"]) == ("failed", False)
    assert f"is {over - 32}" in result["errorMessage"] or "WORKERLESS_MAX_PAYLOAD_BYTES" in result["errorMessage"]
    assert "WORKERLESS_MAX_PAYLOAD_BYTES" in result["errorMessage"] and str(limit()) in result["errorMessage"]


# ------------------------------------------------------------------------------------------------
# The handler side: a claim-checked job read, run and its result stored.


class Engine:
    name = "model"
    lease = ACTIVATION_LEASE
    lease_acquire = task_logs = liveness = None

    def __init__(self) -> None:
        self.reports: dict[str, Outcome] = {}

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        self.reports[ref.job_id] = outcome

    def release(self, job: ActivatedJob, reason: str) -> None:
        return None


class Context:
    aws_request_id = "req"

    def get_remaining_time_in_millis(self) -> int:
        return 120_000


@pytest.fixture
def store() -> Iterator[JobStore]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="jobs",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield JobStore("jobs", ttl_seconds=3600, client=client)


def deliver(
    store: JobStore, engine: Engine, payloads: Payloads, job_id: str, data: bytes, fn: Callable[[Any], Any]
) -> float:
    """One delivery of a job whose variables (``data``) are in the claim check; its traced peak in MB."""
    ref = payloads.put(f"jobs/{ROUTE}/{job_id}", data)
    job = ActivatedJob(JobRef("model", job_id, ROUTE, "r3"), {}, time.time() + 60, time.time(), retries=3, payload=ref)
    del data
    tracemalloc.start()
    try:
        Delivery(
            job, fn, engine=engine, store=store, message_id=f"m-{job_id}", context=Context(), payloads=payloads
        ).deliver()
        return tracemalloc.get_traced_memory()[1] / MIB
    finally:
        tracemalloc.stop()


def test_a_handler_given_a_job_at_the_payload_limit_stays_within_its_memory_and_runs_the_next(
    store: JobStore,
) -> None:
    """GIVEN a claim-checked job of small fields at WORKERLESS_MAX_PAYLOAD_BYTES, then a small one
    THEN reading it from the bucket, decoding it, running the handler and storing its result peak
    within the handler's MemorySize less the runtime's baseline, and both jobs complete."""
    engine, payloads = Engine(), Payloads()
    size = Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(handler_memory())}).max_payload_bytes
    data = json.dumps(small_fields(size), separators=(",", ":")).encode()

    peak = deliver(store, engine, payloads, "big", data, lambda job: {"fields": len(job.variables)})
    deliver(store, engine, payloads, "next", b'{"orderId":"next"}', lambda job: {"order": job.variables["orderId"]})

    assert peak + BASELINE_MB <= handler_memory(), f"{peak:.0f} MB traced + {BASELINE_MB} MB > {handler_memory()} MB"
    assert engine.reports["big"].kind == "complete" and engine.reports["big"].variables["fields"] > 100_000
    assert engine.reports["next"].variables == {"order": "next"}


def test_a_handler_never_reads_a_job_over_its_own_limit_and_fails_it_naming_the_limit(
    store: JobStore,
) -> None:
    """GIVEN a claim-checked job 1 MiB over the handler's limit (a route whose MemorySize is below
    the poller's) THEN the handler neither reads nor runs it: it fails it terminally, naming its
    size and the limit."""
    engine, payloads = Engine(), Payloads()
    size = Settings.from_env({}).max_payload_bytes + MIB
    ran: list[str] = []

    data = json.dumps({"blob": "x" * (size - 11)}).encode()
    peak = deliver(store, engine, payloads, "big", data, lambda job: ran.append("big"))

    outcome = engine.reports["big"]
    assert (outcome.kind, outcome.retries, ran, payloads.reads) == ("fail", 0, [], 0)
    assert f"is {len(data)} bytes" in (outcome.message or "") and "WORKERLESS_MAX_PAYLOAD_BYTES" in (
        outcome.message or ""
    )
    assert peak < 1
