"""Each function's role grants exactly what its code calls: measured, not read from comments.

One bounded pipeline scenario per engine runs template.yaml under local mode's IAM check
(:mod:`workerless_devkit.local.iam`) with the engine values in an embedded Secrets Manager secret, as
deployed. Each scenario takes the failure paths that make the rarer calls, on purpose:

- a charge that can never succeed (a terminal failure is reported);
- a report that runs past a lease, whose first lease extension is refused (409: the heartbeat marks
  the job lost, the handler's lease check sees it, the engine hands the job out again);
- a charge, a receipt and a report whose report is refused past the handler's quick retries (an
  engine outage): the heartbeat re-sends each and deletes its job message (one per job queue);
- a heartbeat ticket SQS refuses to carry on (the test refuses the heartbeat's first two sends to
  its own queue): the failed ticket's message is made visible again in a third of a lease;
- StageNext: a stage whose lease acquire fails every try (the claim is given back: issue 10, 2.1);
- a job activated outside the topology and put straight into the job dead-letter queue, as SQS's redrive
  puts a message whose handler never claimed it: the dead-letter function fails it at the engine
  and writes its record (the PutItem of a job with none).

The check records every (function, action, resource) it authorised. Then, per function:

- no call was refused (a new boto3 call without a grant fails here);
- every (action, resource) pair of every Allow statement of the role was used (a grant nothing uses
  fails here), and for an Allow held by ``dynamodb:LeadingKeys``, each of its key patterns was met
  by a key the function touched (a handler's ``job#<type>#*``, the poller's
  ``state#*``). "Used" is what the function's code called, plus what Lambda itself does with the
  role (the SQS event source mapping's ReceiveMessage / DeleteMessage / GetQueueAttributes on each
  event queue, the runtime's log writes), plus what every container calls while building and using
  the engine adapter (the secret, the engines' shared state): in Lambda each function's container
  makes those calls; in one local process only the first function to need them does.

This replaces reading the action lists from template comments (tests/functional/project/test_template.py).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from workerless._core.model import Demand
from workerless._core.settings import parse_env_text
from workerless.aws.sqs import QueueError, Queues
from workerless.engines import ENGINE_NAMES, build_engine
from workerless_devkit.devtools.scaffold import stem, template_job_types
from workerless_devkit.local import LocalTopology
from workerless_devkit.local.iam.enforce import Grant, Refusal
from workerless_devkit.local.iam.policy import action_matches, resource_matches
from workerless_devkit.local.iam.roles import FunctionRole
from workerless_devkit.local.loop import current_scope
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.pipeline import FINAL, TEMPLATE, job_timings, route_timings

pytestmark = pytest.mark.slow

ENGINES = ENGINE_NAMES
#: The template's job types, read from its route loop: the scenario runs the three examples' failure
#: paths, and a job of every other type (a scaffolded one) with its report owed, so that each route's
#: grants are used.
JOB_TYPES = template_job_types(TEMPLATE.read_text(encoding="utf-8"))
EXAMPLES = ("charge-payment", "send-receipt", "generate-report")
#: Each scenario settles in about 20 s here; the bound keeps three of them inside the test timeout.
SCENARIO_SECONDS = 75


@dataclass
class Run:
    """What one engine's scenario left: the grants, refusals, roles and platform needs."""

    engine: str
    grants: frozenset[Grant]
    refusals: list[Refusal]
    roles: dict[str, FunctionRole]
    platform: dict[str, list[tuple[str, Any]]]
    invocations: dict[str, int]
    states: dict[str, str] = field(default_factory=dict)
    #: The failure paths the scenario must have taken, and whether it did.
    paths: dict[str, bool] = field(default_factory=dict)


def _fault(url: str, path: str, **fault: Any) -> None:
    httpx.post(f"{url}/_admin/faults", json={"method": "POST", "path": path, **fault}).raise_for_status()


def _activate_one(engine: str, env_file: Path, job_type: str) -> str:
    """Activate one job of ``job_type`` outside the topology (a standalone adapter), as a poller
    would: its SQS message, for the test to put in a dead-letter queue as SQS's redrive does."""
    values = parse_env_text(env_file.read_text(encoding="utf-8"))
    with httpx.Client(timeout=10) as client:
        adapter = build_engine(engine, values, client)
        try:
            activated = adapter.activate([Demand(job_type, 1)], 60)
        finally:
            adapter.close()
    assert len(activated) == 1, activated
    return activated[0].to_message()


class _RefuseHeartbeatTickets:
    """The heartbeat's first ``times`` sends to its own queue refused, as SQS refusing them would be:
    :meth:`install` puts :meth:`send` in place of ``Queues.send``."""

    def __init__(self, times: int) -> None:
        self.left = times

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = Queues.send

        def send(queues: Queues, queue_url: str, body: Any, *, delay_seconds: int = 0) -> None:
            scope = current_scope()
            heartbeat = scope is not None and scope.function_id == "HeartbeatFunction"
            if self.left and heartbeat and "Heartbeat" in queue_url:
                self.left -= 1
                raise QueueError("SQS send_message failed: InternalError (refused by the test)")
            original(queues, queue_url, body, delay_seconds=delay_seconds)

        monkeypatch.setattr(Queues, "send", send)


def _scenario(engine: str, start: EmulatorFactory, monkeypatch: pytest.MonkeyPatch) -> Run:
    running = start(engine, lease_seconds=5) if engine == "stagenext" else start(engine)
    emulator, server, env_file = running.emulator, running.server, running.env_file
    assert env_file is not None
    seen: list[tuple[str, str]] = []

    def listen(job_type: str, event: str, fields: dict[str, Any]) -> None:
        seen.append((event, str(fields.get("job_id"))))

    create = emulator.create_job
    # Created and activated first and alone, so that the standalone activation takes this one.
    dead = create("charge-payment", {"orderId": "o0", "amount": 5})
    dead_message = _activate_one(engine, env_file, "charge-payment")
    charge = create("charge-payment", {"orderId": "o1", "amount": 12})
    declined = create("charge-payment", {"orderId": "o2", "amount": 0})
    receipt = create("send-receipt", {"orderId": "o3"})
    # Longer than a lease: it cannot finish before the heartbeat's first extension.
    report = create("generate-report", {"seconds": 6})
    others = [create(t, {"orderId": f"o-{t}"}) for t in JOB_TYPES if t not in EXAMPLES]
    jobs = [charge, declined, receipt, report, *others]
    # Every try of one delivery's report (the retry policy tries 4 times) of a job of each type:
    # each report is left owed, for the heartbeat. The report's first extension: 409.
    owed = [charge, receipt, report, *others]
    if engine == "sheptra":
        base = f"/cells/{emulator.cell}/v1/jobs"
        for job in owed:
            _fault(server.url, f"{base}/{job}/complete", status=503, times=4)
        _fault(server.url, f"{base}/{report}/extend-lease", status=409, times=1)
    elif engine == "nodeflow":
        base = "/v1/ns/default/tasks"
        for job in owed:
            _fault(server.url, f"{base}/{job}/report", status=503, times=4)
        _fault(server.url, f"{base}/{report}/heartbeat", status=409, times=1)
    else:
        acquire_fails = create("send-receipt", {"orderId": "o4"}, retries=3)
        jobs.append(acquire_fails)
        for job in owed:
            _fault(server.url, f"/stages/{job}/result", status=503, times=4)
        _fault(server.url, f"/stages/{report}/lease/renew", status=409, times=1)
        _fault(server.url, f"/stages/{acquire_fails}/lease/acquire", status=503, times=4)
    # The heartbeat's send and its one retry, for one ticket.
    refuse = _RefuseHeartbeatTickets(times=2)
    refuse.install(monkeypatch)

    def state(job_id: str) -> str:
        return str(emulator.job_state(job_id)["state"])

    topology = LocalTopology(
        TEMPLATE,
        env_file,
        parameters={
            "EngineName": engine,
            "LeaseSeconds": "5",
            "TickSeconds": "1",
            "MaxReceiveCount": "2",
            **job_timings(10),
        },
        route_settings=route_timings(10),
        schedule_seconds=1,
        engine_secret=True,
        listeners=(listen,),
    )
    with topology as topo:
        assert topo.iam is not None, "local mode enforces IAM by default"
        # A job whose handler never claimed it, dead-lettered (the test plays SQS's redrive).
        topo.client("sqs").send_message(QueueUrl=topo.queue_url("JobDeadLetterQueue"), MessageBody=dead_message)

        def job_queues_empty() -> bool:
            depths = topo.queue_depths()
            return all(depths[q].visible + depths[q].in_flight == 0 for q in (f"{stem(t)}Queue" for t in JOB_TYPES))

        topo.run_until(
            lambda: (
                all(state(j) in FINAL for j in jobs)
                and ("dead_lettered", dead) in seen
                and any(event == "lease_lost" and job == report for event, job in seen)
                and all(("report_owed", j) in seen for j in owed)
                and refuse.left == 0
                and job_queues_empty()
            ),
            max_seconds=SCENARIO_SECONDS,
        )
        enforcer = topo.iam
        return Run(
            engine=engine,
            grants=enforcer.grants,
            refusals=enforcer.refusals,
            roles=enforcer.roles,
            platform=enforcer.platform_needs(topo.template),
            invocations=topo.invocations,
            states={j: state(j) for j in jobs},
            paths={
                "dead letter settled": ("dead_lettered", dead) in seen,
                "heartbeat lease lost": any(e == "lease_lost" and j == report for e, j in seen),
                "reports owed, settled by the heartbeat": all(("report_owed", j) in seen for j in owed)
                and job_queues_empty(),
                "a heartbeat ticket refused": refuse.left == 0,
            },
        )


@pytest.fixture(scope="module")
def runs(workerless_module_emulator: EmulatorFactory) -> dict[str, Run]:
    found = {}
    for engine in ENGINES:
        with pytest.MonkeyPatch.context() as monkeypatch:
            found[engine] = _scenario(engine, workerless_module_emulator, monkeypatch)
    return found


@pytest.mark.parametrize("engine", ENGINES)
def test_the_scenario_took_its_paths_and_no_call_was_refused(runs: dict[str, Run], engine: str) -> None:
    """GIVEN the engine's scenario WHEN it ran under the IAM check THEN every job is final, every
    function ran, the dead-letter path was taken, and no AWS call was refused."""
    run = runs[engine]
    assert run.refusals == [], "\n".join(r.message for r in run.refusals)
    assert all(run.paths.values()), run.paths
    assert all(s in FINAL for s in run.states.values()), run.states
    assert set(run.invocations) == set(run.roles), f"functions never invoked: {set(run.roles) - set(run.invocations)}"


def _used(function: str, run: Run) -> set[tuple[str, str, tuple[str, ...]]]:
    """(action, resource, partition keys touched) of every call the function (or its container) made."""
    used: set[tuple[str, str, tuple[str, ...]]] = set()
    for grant in run.grants:
        # Container calls: every invoked function's container makes them (see the module docstring).
        if grant.function == function or (grant.origin == "container" and function in run.invocations):
            used.add((grant.action, grant.resource, grant.keys))
    used |= {(need.action, need.resource, ()) for _, need in run.platform.get(function, [])}
    return used


#: The claim check's S3 grants (Sid ClaimCheck*): used only by jobs and results too large for SQS or
#: DynamoDB, which these scenarios do not make; tests/functional/runtime/core/test_claim_check.py runs those under
#: the same IAM check (no call refused, each grant it exercises recorded). ClaimCheckListing is used
#: only when an object is missing: tests/functional/runtime/core/test_claim_check_missing.py.
CLAIM_CHECK_SIDS = ("ClaimCheckJobs", "ClaimCheckResults", "ClaimCheckListing")
#: A handler's hand-back of a job its batch has no time left to finish (ChangeMessageVisibility on its
#: own queue, Sid HandBackJobs): these scenarios' batches never run out of time;
#: tests/functional/runtime/handler/test_handler_batch_time.py makes handlers hand jobs back.
HAND_BACK_SIDS = ("HandBackJobs",)
#: The poller's fence of an abandoned batch (PutItem of job records, Sid TrackedJobs) runs only when an
#: invocation takes over a dead one's lock; tests/unit/runtime/poller/test_poller_slow_dispatch.py exercises it.
FENCE = ("TrackedJobs", "dynamodb:PutItem")
#: A handler's GetItem of its own type's records is job.lease_lost()'s read (the lease check): of
#: the examples only generate-report asks it, so another route's role is not held to having used it.
LEASE_CHECK = ("JobRecords", "dynamodb:GetItem")


def _pairs(role: FunctionRole) -> Iterator[tuple[str, str, int, str, str | None]]:
    """(statement, action pattern, resource index, resource pattern, partition key pattern) of every
    Allow (but the claim check's: see CLAIM_CHECK_SIDS). An Allow held by ``dynamodb:LeadingKeys``
    gives one per key pattern (each must have been used); any other condition is unexpected here."""
    for statement in role.statements:
        if statement.sid in CLAIM_CHECK_SIDS + HAND_BACK_SIDS or statement.effect != "Allow":
            continue
        lease_check = role.role_id.startswith(tuple(stem(t) for t in JOB_TYPES if t != "generate-report"))
        patterns: tuple[str | None, ...] = (None,)
        if statement.conditional:
            (condition,) = statement.conditions
            assert condition.key.lower() == "dynamodb:leadingkeys", statement.source
            patterns = condition.values
        for action in statement.actions:
            if lease_check and (statement.sid, action) == LEASE_CHECK:
                continue
            if (statement.sid, action) == FENCE:
                continue
            for index, resource in enumerate(statement.resources):
                for pattern in patterns:
                    yield statement.source, action, index, resource, pattern


def _covers(action: str, resource: str, pattern: str | None, used: set[tuple[str, str, tuple[str, ...]]]) -> bool:
    return any(
        action_matches(action, a)
        and resource_matches(resource, r)
        and (pattern is None or any(fnmatch.fnmatchcase(k, pattern) for k in keys))
        for a, r, keys in used
    )


FUNCTIONS = [
    "PollerFunction",
    "HeartbeatFunction",
    "DeadLetterFunction",
    "chargepaymentFunction",
    "sendreceiptFunction",
    "generatereportFunction",
]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_grant_of_the_role_is_used(runs: dict[str, Run], function: str) -> None:
    """GIVEN the three scenarios WHEN the role's Allow statements are read pair by pair (each action
    pattern with each resource pattern) THEN each pair covers something the function used in one of
    them: the role grants nothing its code, its event sources, its logs or its engine adapter does
    not need. (A resource is compared within its own run: the secret's ARN differs per run.)"""
    unused: set[tuple[str, str, int, str]] | None = None
    for run in runs.values():
        role = run.roles[function]
        assert all(not s.not_actions and not s.not_resources for s in role.statements), "NotAction/NotResource"
        used = _used(function, run)
        here = {
            (source, action, index, resource, pattern)
            for source, action, index, resource, pattern in _pairs(role)
            if not _covers(action, resource, pattern, used)
        }
        # Pairs are keyed without the resource text, which may differ per run (the secret ARN).
        keys = {(source, action, index, pattern) for source, action, index, _, pattern in here}
        unused = here if unused is None else {pair for pair in unused if (pair[0], pair[1], pair[2], pair[4]) in keys}
    assert unused is not None
    listing = sorted(
        f"{source}: {action} on {resource}" + (f" (keys {pattern})" if pattern else "")
        for source, action, _, resource, pattern in unused
    )
    assert listing == [], f"{function}'s role grants what nothing used:\n" + "\n".join(listing)
