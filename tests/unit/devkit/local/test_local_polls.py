"""Local mode's poll watch (issue 26, 2.8): a run never ends in the middle of a poll, nor while the
latest poll failed once the engine had answered; a poll that took jobs makes its invocation work
before it ends."""

from __future__ import annotations

import threading

import pytest
from workerless._core.model import Demand
from workerless.errors import EngineUnavailableError
from workerless.testing import FakeEngine
from workerless_devkit.local.polls import PollWatch


def test_a_poll_in_progress_holds_the_run_until_one_begun_since_the_quiet_came_back_empty() -> None:
    watch = PollWatch(taken=lambda: None)
    engine = FakeEngine()
    watched = watch.decorate(engine)
    inside = threading.Event()
    release = threading.Event()
    seen: list[bool] = []

    def slow(*_: object) -> list[object]:
        inside.set()
        release.wait(5)
        return []

    engine.activate = slow  # type: ignore[method-assign]
    quiet_since = -1.0
    poll = threading.Thread(target=lambda: watched.activate([Demand("t", 1)], 60))
    poll.start()
    assert inside.wait(5)
    seen.append(watch.settled_since(quiet_since))  # the first poll is in progress: not settled
    release.set()
    poll.join()
    seen.append(watch.settled_since(quiet_since))  # it came back empty
    assert seen == [False, True]


def test_a_failed_poll_after_an_answer_holds_the_run_until_a_poll_succeeds() -> None:
    watch = PollWatch(taken=lambda: None)
    engine = FakeEngine()
    watched = watch.decorate(engine)
    assert watched.activate([Demand("t", 1)], 60) == []
    assert watch.settled_since(0.0)

    def down(*_: object) -> list[object]:
        raise EngineUnavailableError("503", engine="fake", status=503)

    engine.activate = down  # type: ignore[method-assign]
    with pytest.raises(EngineUnavailableError):
        watched.activate([Demand("t", 1)], 60)
    assert not watch.settled_since(0.0)
    del engine.activate
    assert watched.activate([Demand("t", 1)], 60) == []
    assert watch.settled_since(0.0)


def test_an_engine_that_never_answered_does_not_hold_the_run() -> None:
    watch = PollWatch(taken=lambda: None)
    engine = FakeEngine()

    def down(*_: object) -> list[object]:
        raise EngineUnavailableError("connection refused", engine="fake")

    engine.activate = down  # type: ignore[method-assign]
    with pytest.raises(EngineUnavailableError):
        watch.decorate(engine).activate([Demand("t", 1)], 60)
    assert watch.settled_since(0.0)


def test_a_poller_invocation_against_an_engine_that_never_answered_does_not_hold_the_run() -> None:
    """GIVEN a poller invocation in progress whose polls fail, the engine never having answered one
    (nothing listening at its URL) THEN once a poll begun since the quiet failed, the run may end
    (engine_health fails it naming the URL); a failure from before the quiet says nothing."""
    watch = PollWatch(taken=lambda: None)
    engine = FakeEngine()

    def down(*_: object) -> list[object]:
        raise EngineUnavailableError("connection refused", engine="fake")

    engine.activate = down  # type: ignore[method-assign]
    with watch.invocation():
        assert not watch.settled_since(0.0), "not polled yet: a poll in progress"
        with pytest.raises(EngineUnavailableError):
            watch.decorate(engine).activate([Demand("t", 1)], 60)
        assert watch.settled_since(0.0), "its poll failed since the quiet, the engine never answered"
        assert not watch.settled_since(float("inf")), "a failure from before the quiet says nothing"


def test_a_poll_that_took_jobs_is_made_work_before_it_ends() -> None:
    order: list[str] = []
    watch = PollWatch(taken=lambda: order.append(f"taken while polling={watch.settled_since(1e18) is False}"))
    engine = FakeEngine()
    engine.add_job("t", {})
    jobs = watch.decorate(engine).activate([Demand("t", 1)], 60)
    assert len(jobs) == 1
    assert order == ["taken while polling=True"]


def test_a_poller_invocation_before_its_poll_holds_the_run_until_it_ends_or_polls_empty() -> None:
    """GIVEN a poller invocation still in its cold start (no poll made yet: under CPU load longer
    than the quiet window) THEN the run is not settled; once its poll came back empty it is, and
    once it ended it is (issue 26: a run ended before its first poll with every job at the engine)."""
    watch = PollWatch(taken=lambda: None)
    engine = FakeEngine()
    watched = watch.decorate(engine)
    quiet_since = 0.0
    with watch.invocation():
        assert not watch.settled_since(quiet_since), "a poller invocation not yet polled is a poll in progress"
        watched.activate([Demand("t", 1)], 60)  # the engine has nothing
        assert watch.settled_since(quiet_since), "its poll came back empty since the quiet began"
    assert watch.settled_since(float("inf")), "ended: nothing in progress"
    with watch.invocation():
        assert not watch.settled_since(float("inf")), "an empty poll from before the quiet says nothing"
