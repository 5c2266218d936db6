"""The chaos harness's own parts that decide what a run proves: the fault plan's dice and the
explanation printed for a job that did not finish."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from workerless_devkit.chaos.inject import ChaosState
from workerless_devkit.chaos.ledger import Ledger
from workerless_devkit.chaos.plan import Fault, FaultPlan, Recorder
from workerless_devkit.chaos.run import RunConfig, RunResult, explain, start_emulator


def test_sure_fires_the_first_chances_of_each_armed_kind_then_rolls() -> None:
    """GIVEN a kind armed at a rate that (with this seed) never fires and sure=2
    THEN its first two chances fire and later ones do not; a kind not armed never fires and is not
    counted as having had a chance."""
    plan = FaultPlan({Fault.ENGINE_503: 1e-9}, seed=3, sure=2)

    fired = [plan.roll(Fault.ENGINE_503) for _ in range(5)]

    assert fired == [True, True, False, False, False]
    assert plan.roll(Fault.ENGINE_500) is False
    assert plan.chances() == {"engine_503": 5}


def test_sure_respects_a_kinds_budget() -> None:
    plan = FaultPlan({Fault.SQS_ERROR: 1e-9}, sure=3, limits={Fault.SQS_ERROR: 1})

    assert [plan.roll(Fault.SQS_ERROR) for _ in range(3)] == [True, False, False]


def _result(jobs: dict[str, dict[str, Any]], recorder: Recorder, *, late: tuple[str, ...] = ()) -> RunResult:
    state = ChaosState(plan=FaultPlan(), recorder=recorder, ledger=Ledger(), lease_seconds=5)
    state.activations["stg_1"] = ["stagenext#stg_1#exe_a"]
    # explain() reads only the ids of the jobs past their deadline from the figures.
    figures: Any = SimpleNamespace(stuck_jobs=list(late))
    return RunResult(figures, state, jobs, {}, emulator=None)


#: Issue 26, section 1: AWS's bad days, each a fault the chaos suite injects.
SECTION_1 = {
    Fault.LAMBDA_OUT_OF_MEMORY,
    Fault.LAMBDA_THROTTLE,
    Fault.DYNAMODB_THROTTLE,
    Fault.DYNAMODB_ERROR,
    Fault.DYNAMODB_WRITE_LOST,
    Fault.SQS_BATCH_ERROR,
    Fault.SQS_BATCH_PARTIAL,
    Fault.SQS_BATCH_LOST,
    Fault.S3_ERROR,
    Fault.SSM_ERROR,
    Fault.SECRETS_ERROR,
    Fault.SQS_COUNT_LAG,
    Fault.SCHEDULE_DRIFT,
}


def test_the_mixed_run_arms_every_fault_of_awss_bad_days() -> None:
    """GIVEN `make chaos`'s plan (FaultPlan.mixed) THEN every fault of issue 26's section 1 has a
    positive rate, so its figures include it (before, SQS's lagging counts were armed only by the
    one-of-each test, never by the mixed run whose figures docs/guarantees.md quotes)."""
    rates = FaultPlan.mixed(seed=1).rates
    assert {kind for kind in SECTION_1 if rates.get(kind, 0.0) <= 0.0} == set()


def test_the_mixed_run_always_arms_lagging_counts() -> None:
    """SQS's counts lag on every day, not on some: the run's one roll for it fires on every seed."""
    assert all(FaultPlan.mixed(seed=seed).roll(Fault.SQS_COUNT_LAG) for seed in range(1, 6))


def test_explain_tells_the_story_of_each_job_that_is_not_final_in_time_order() -> None:
    recorder = Recorder()
    recorder.note(Fault.ENGINE_401, job_ids=["stg_1"], where="SendReceiptFunction:begin")
    at = recorder.injections[0].at
    jobs = {
        "stg_1": {
            "type": "send-receipt",
            "state": "ready",
            "history": [
                {"event": "delivered", "at": at - 0.5},
                {"event": "renew_refused", "at": at + 1.0, "reason": "not_running"},
            ],
        },
        "stg_2": {"type": "send-receipt", "state": "completed", "history": [{"event": "created", "at": at}]},
    }

    text = explain(_result(jobs, recorder))

    lines = text.splitlines()
    assert lines[0] == "job stg_1 (send-receipt) is ready:"
    assert "delivered" in lines[1] and lines[1].strip().startswith("-0.50")
    assert "FAULT engine_401 at SendReceiptFunction:begin" in lines[2]
    assert "renew_refused" in lines[3] and "not_running" in lines[3]
    assert lines[4] == "  activations: ['stagenext#stg_1#exe_a']"
    assert "stg_2" not in text, "a final job needs no explanation"


def test_explain_also_tells_the_story_of_a_job_final_past_its_deadline() -> None:
    """GIVEN a job completed, but later than the run's deadline (counted as stuck)
    THEN explain() tells its story too, marked late: a figure that fails must come with its cause."""
    recorder = Recorder()
    recorder.note(Fault.SQS_ERROR, job_ids=["stg_1"], where="PollerFunction:send")
    at = recorder.injections[0].at
    jobs = {
        "stg_1": {"type": "send-receipt", "state": "completed", "history": [{"event": "completed", "at": at + 95}]},
        "stg_2": {"type": "send-receipt", "state": "completed", "history": [{"event": "completed", "at": at + 1}]},
    }

    text = explain(_result(jobs, recorder, late=("stg_1",)))

    lines = text.splitlines()
    assert lines[0] == "job stg_1 (send-receipt) is completed (late):"
    assert "FAULT sqs_error at PollerFunction:send" in lines[1]
    assert "completed" in lines[2] and lines[2].strip().startswith("95.00")
    assert "stg_2" not in text


def test_a_second_completed_run_counts_as_a_duplicate_only_under_the_same_lease() -> None:
    """GIVEN node-flow's key (the task id) completed under one lease, then again under the lease
    the engine re-handed after the first lapsed, and another key completed twice under one lease
    THEN only the second is a duplicate completion; the first is a re-run after a lapse."""
    ledger = Ledger()
    ledger.completed("nodeflow#t1", "t1", lease="aaaa")
    ledger.completed("nodeflow#t1", "t1", lease="bbbb")
    ledger.completed("nodeflow#t2", "t2", lease="cccc")
    ledger.completed("nodeflow#t2", "t2", lease="cccc")

    assert ledger.duplicate_completions == 1
    assert ledger.duplicated_keys() == ["nodeflow#t2"]
    assert ledger.reruns_after_lapse == 1


def test_without_a_lease_fingerprint_every_run_of_a_key_is_one_attempt() -> None:
    """StageNext's key names the execution; two gateway deliveries of it are one attempt."""
    ledger = Ledger()
    ledger.completed("stagenext#s1#exe_a", "s1")
    ledger.completed("stagenext#s1#exe_a", "s1")

    assert ledger.duplicate_completions == 1
    assert ledger.reruns_after_lapse == 0


def test_a_lapse_costs_from_the_last_grant_or_extension_to_the_next_lease() -> None:
    """GIVEN a node-flow task leased at 10, extended at 12, lapsed at 17 and leased again at 20, and a
    Sheptra job whose lease lapsed at 9 (activated at 1) with no lease after it until its end at 30
    THEN two lapses, the worst costing 29 s (1 → 30); the node-flow one cost 8 s (12 → 20)."""
    from workerless_devkit.chaos.run import lease_lapses

    nodeflow = {
        "history": [
            {"at": 10.0, "event": "leased"},
            {"at": 12.0, "event": "heartbeat"},
            {"at": 17.0, "event": "lease_expired"},
            {"at": 20.0, "event": "leased"},
            {"at": 22.0, "event": "completed"},
        ]
    }
    sheptra = {
        "history": [
            {"at": 1.0, "event": "activated"},
            {"at": 9.0, "event": "lease-lapsed"},
            {"at": 30.0, "event": "incident"},
        ]
    }

    assert lease_lapses({"t": nodeflow}) == (1, 8.0)
    assert lease_lapses({"t": nodeflow, "j": sheptra}) == (2, 29.0)
    assert lease_lapses({"none": {"history": [{"at": 1.0, "event": "activated"}]}}) == (0, 0.0)


def test_a_batch_or_ticket_names_its_jobs_for_the_recorder() -> None:
    """Faults on a job batch, a heartbeat ticket or a BatchGetItem are traced to the jobs they hit."""
    import json

    from workerless_devkit.chaos.services import job_ids_of_call

    batch = {"Entries": [{"Id": "0", "MessageBody": json.dumps({"ref": {"job_id": "j1"}})}]}
    ticket = {"MessageBody": json.dumps({"jobs": [{"ref": {"job_id": "j2"}}]})}
    batch_get = {
        "RequestItems": {
            "t": {"Keys": [{"pk": {"S": "job#charge-payment#sheptra#j3#r1"}}, {"pk": {"S": "state#poller-lock"}}]}
        }
    }

    assert job_ids_of_call("sqs", batch) == ["j1"]
    assert job_ids_of_call("sqs", ticket) == ["j2"]
    assert job_ids_of_call("dynamodb", batch_get) == ["j3"]
    assert job_ids_of_call("dynamodb", {"Key": {"pk": {"S": "job#charge-payment#sheptra#j4"}}}) == ["j4"]
    assert job_ids_of_call("s3", batch) == []


def test_a_chaos_topologys_engine_has_its_polls_watched() -> None:
    """GIVEN a chaos topology's wiring WHEN its engine polls THEN the topology's PollWatch sees the
    poll in progress (issue 26: ChaosTopology replaced LocalTopology's wiring and had none, so a
    chaos run could be called idle in the middle of a poll)."""
    import threading

    from workerless.engines.decorator import EngineDecorator
    from workerless.testing import FakeEngine
    from workerless_devkit.chaos.topology import ChaosTopology
    from workerless_devkit.local.engine_health import EngineHealth
    from workerless_devkit.local.library import LibraryAttachments
    from workerless_devkit.local.polls import PollWatch

    topo = ChaosTopology.__new__(ChaosTopology)  # only what new_wiring reads: no template loaded
    topo.chaos = ChaosState(plan=FaultPlan(), recorder=Recorder(), ledger=Ledger(), lease_seconds=5)
    topo.polls = PollWatch(lambda: None)
    topo._library = LibraryAttachments(EngineHealth(), lambda: None)
    inside, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    class Slow(FakeEngine):
        def activate(self, demands: Any, lease_seconds: int) -> Any:
            inside.set()
            release.wait(30)
            return []

    decorator = topo.new_wiring()._decorator
    assert decorator is not None
    engine = decorator(Slow())
    chain: list[str] = []
    layer = engine
    while isinstance(layer, EngineDecorator):
        chain.append(type(layer).__name__)
        layer = layer.inner
    assert "ChaosEngine" in chain, f"the chaos faults are still injected: {chain}"
    poll = threading.Thread(target=lambda: engine.activate([], 5))
    poll.start()
    assert inside.wait(30)
    seen.append(topo.polls.in_progress)
    release.set()
    poll.join(30)
    assert seen == [True], "the poll in progress was not seen by the topology's poll watch"
    assert not topo.polls.in_progress


def test_a_chaos_run_can_model_a_stagenext_broker_that_requeues_at_the_tail() -> None:
    """`--stagenext-requeue back` (RunConfig.stagenext_requeue) reaches the StageNext emulator; the
    default is the original place, as RabbitMQ requeues."""
    for position in ("back", "original"):
        emulator = start_emulator("stagenext", lease_seconds=5, stagenext_requeue=position)
        try:
            assert emulator.emulator.requeue_position == position
        finally:
            emulator.stop()
    assert RunConfig(engine="stagenext").stagenext_requeue == "original"
