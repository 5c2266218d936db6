"""The one settlement module (issue 28: ``settle`` and ``giveback`` are one thing): each engine call
that settles a job outside a handler's report, in one shape — under the retry policy within the
caller's deadline, giving up logged where the engine's lease is the backstop. A handler's delivery
of a begin-leased engine is held through an outage until the engine takes it back; the poller and
the dead letter make a few quick tries. Virtual time throughout (the retry policy and the
settlement read ``time`` at each call)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from workerless._core import retry, settlement
from workerless._core.lease import ACTIVATION_LEASE, BEGIN_LEASE, LeasePolicy
from workerless._core.model import ActivatedJob, JobRef, Outcome
from workerless.errors import EngineUnavailableError, RejectedError
from workerless.testing import make_activated_job

from tests.unit.runtime_modules import runtime_module_paths

#: The gateway's visibility timeout of the begin-leased engine below (StageNext's 60 s).
RETURNS_AFTER = 60.0


class VirtualTime:
    """``time`` for the retry policy and the settlement: sleeping advances both clocks."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Engine:
    """An engine whose settling calls fail (retryably, or for good) the first ``failures`` times:
    each named in ``failing``, or every one when it names none."""

    lease: LeasePolicy
    failures: int = 0
    failing: frozenset[str] = frozenset()
    error: type[Exception] = EngineUnavailableError
    calls: list[str] = field(default_factory=list)
    granted: bool = True
    name: str = "settling"

    @property
    def lease_acquire(self) -> Engine | None:
        return None if self.lease.held(None) else self

    def _call(self, what: str) -> None:
        self.calls.append(what)
        if (not self.failing or what in self.failing) and self.calls.count(what) <= self.failures:
            raise self.error(f"{what} refused", engine=self.name)

    def begin(self, job: ActivatedJob) -> bool:
        self._call("begin")
        return self.granted

    def skip(self, ref: JobRef) -> None:
        self._call("skip")

    def release(self, job: ActivatedJob, reason: str) -> None:
        self._call("release")

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        self._call("report")


class Lines:
    """The settlement's logger: the lines it wrote, by level."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda message, **kwargs: self.lines.append((level, message))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualTime:
    virtual = VirtualTime()
    fake = SimpleNamespace(monotonic=virtual.monotonic, time=virtual.time, sleep=virtual.sleep)
    monkeypatch.setattr(retry, "time", fake)
    monkeypatch.setattr(settlement, "time", fake)
    return virtual


@pytest.fixture
def lines(monkeypatch: pytest.MonkeyPatch) -> Lines:
    recorder = Lines()
    monkeypatch.setattr(settlement, "logger", recorder)
    return recorder


def _job(clock: VirtualTime) -> ActivatedJob:
    return make_activated_job("charge-payment", activated_at=clock.now)


def test_a_held_delivery_is_tried_until_the_engine_takes_it_back_then_the_failure_is_logged(
    clock: VirtualTime, lines: Lines
) -> None:
    engine = Engine(BEGIN_LEASE.returning_after(RETURNS_AFTER), failures=1000)
    job = _job(clock)
    start = clock.now
    settlement.acknowledge(job, engine=engine, deadline=start + 600, hold=True)  # type: ignore[arg-type]
    tries = engine.calls.count("skip")
    assert tries > retry.CALLS.attempts  # type: ignore[operator]
    assert start + RETURNS_AFTER - retry.HELD.max_delay <= clock.now <= start + RETURNS_AFTER
    assert lines.lines == [("warning", "could not acknowledge the delivery; the engine hands it out again")]


def test_the_held_tries_stop_at_the_callers_deadline_first(clock: VirtualTime, lines: Lines) -> None:
    engine = Engine(BEGIN_LEASE.returning_after(RETURNS_AFTER), failures=1000)
    start = clock.now
    settlement.release(_job(clock), "not run", engine=engine, deadline=start + 10, hold=True)  # type: ignore[arg-type]
    assert clock.now <= start + 10
    assert lines.lines[-1][0] == "warning"  # the engine hands the delivery out again within its 60 s


def test_quick_tries_are_the_calls_policy_whatever_the_lease(clock: VirtualTime, lines: Lines) -> None:
    engine = Engine(BEGIN_LEASE.returning_after(RETURNS_AFTER), failures=1000)
    settlement.acknowledge(_job(clock), engine=engine, deadline=clock.now + 600, hold=False)  # type: ignore[arg-type]
    assert engine.calls == ["skip"] * retry.CALLS.attempts  # type: ignore[operator]
    assert [level for level, _ in lines.lines] == ["warning"]


def test_a_call_that_lands_after_a_retryable_failure_logs_nothing(clock: VirtualTime, lines: Lines) -> None:
    engine = Engine(BEGIN_LEASE.returning_after(RETURNS_AFTER), failures=2)
    assert settlement.begin(_job(clock), engine=engine, deadline=clock.now + 600) is True  # type: ignore[arg-type]
    assert engine.calls == ["begin"] * 3
    assert lines.lines == []


def test_an_acquire_that_keeps_failing_propagates(clock: VirtualTime, lines: Lines) -> None:
    engine = Engine(BEGIN_LEASE.returning_after(RETURNS_AFTER), failures=1000, error=RejectedError)
    with pytest.raises(RejectedError):
        settlement.begin(_job(clock), engine=engine, deadline=clock.now + 600)  # type: ignore[arg-type]
    assert engine.calls == ["begin"]  # a final error is not tried again


def test_a_release_given_up_is_an_error_where_the_job_waits_out_a_whole_lease(clock: VirtualTime, lines: Lines) -> None:
    engine = Engine(ACTIVATION_LEASE, failures=1000)
    settlement.release(_job(clock), "could not queue", engine=engine, deadline=clock.now + 600)  # type: ignore[arg-type]
    assert engine.calls == ["release"] * retry.CALLS.attempts  # type: ignore[operator]  # never held
    assert lines.lines == [
        ("error", "could not hand the job back; it returns when its lease (or the gateway's visibility) lapses")
    ]


def test_nothing_is_acknowledged_where_the_lease_began_at_activation(clock: VirtualTime, lines: Lines) -> None:
    engine = Engine(ACTIVATION_LEASE)
    settlement.hand_back(_job(clock), engine=engine, deadline=clock.now + 600, reason="lost")  # type: ignore[arg-type]
    assert engine.calls == []
    assert lines.lines == []


def test_a_begin_leased_delivery_handed_back_is_released_never_acknowledged(clock: VirtualTime, lines: Lines) -> None:
    engine = Engine(BEGIN_LEASE.returning_after(RETURNS_AFTER))
    settlement.hand_back(_job(clock), engine=engine, deadline=clock.now + 600, reason="lost")  # type: ignore[arg-type]
    assert engine.calls == ["release"]


def test_failing_for_good_acquires_first_and_acknowledges_a_refused_lease(clock: VirtualTime, lines: Lines) -> None:
    engine = Engine(BEGIN_LEASE.returning_after(RETURNS_AFTER), granted=False)
    settlement.fail_for_good(_job(clock), "too large", engine=engine, deadline=clock.now + 600)  # type: ignore[arg-type]
    assert engine.calls == ["begin", "skip"]  # no report for an execution that is not running


def test_failing_for_good_hands_back_a_job_whose_failure_the_engine_keeps_refusing(
    clock: VirtualTime, lines: Lines
) -> None:
    engine = Engine(
        BEGIN_LEASE.returning_after(RETURNS_AFTER), failures=1000, error=RejectedError, failing=frozenset({"report"})
    )
    settlement.fail_for_good(_job(clock), "too large", engine=engine, deadline=clock.now + 600)  # type: ignore[arg-type]
    assert engine.calls == ["begin", "report", "release"]  # requeued: never acknowledged without a result
    assert ("error", "handing the delivery back") in lines.lines


#: The engine calls that settle a job (the Engine Protocol's ``report`` and ``release``, lease
#: acquire's ``begin`` and ``skip``).
SETTLING_CALLS = frozenset({"report", "release", "begin", "skip"})


def _engine_calls(tree: ast.AST) -> list[str]:
    """The settling calls in ``tree`` made on an engine or its lease acquire (``engine.release(...)``,
    ``self.engine.report(...)``, ``acquire.skip(...)``)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target = node.func.value
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
        if node.func.attr in SETTLING_CALLS and name in {"engine", "acquire", "lease_acquire"}:
            found.append(node.func.attr)
    return found


def test_each_engine_settling_call_is_made_once_in_the_settlement_module() -> None:
    # The walk itself, on a made-up module: the engine's calls count, a claim's release does not.
    sample = ast.parse("engine.release(job, r)\nself.engine.report(ref, o)\nacquire.skip(ref)\nstore.release(k)\n")
    assert _engine_calls(sample) == ["release", "report", "skip"]

    paths = runtime_module_paths()
    elsewhere = {
        name: calls
        for name, path in paths.items()
        if not name.startswith(("workerless.engines", "workerless.testing")) and name != settlement.__name__
        if (calls := _engine_calls(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert elsewhere == {}, "settle through workerless._core.settlement"
    own = _engine_calls(ast.parse(paths[settlement.__name__].read_text(encoding="utf-8")))
    assert sorted(own) == sorted(SETTLING_CALLS)
