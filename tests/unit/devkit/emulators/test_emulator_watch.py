"""The emulators' state watch: every change of a job's state reaches the listeners, once, in order;
LeasedPeak keeps the highest count of jobs leased and not final per type."""

from __future__ import annotations

from typing import Any

from workerless_devkit.emulators import sheptra, stagenext
from workerless_devkit.emulators.watch import LeasedPeak, StateWatch


def test_listeners_hear_each_change_once_and_stop_hearing_when_unsubscribed() -> None:
    watch, heard = StateWatch(), []
    stop = watch.subscribe(lambda *change: heard.append(change))

    watch.note("t", "j1", "ready")
    watch.note("t", "j1", "ready")  # no change: not told again
    watch.note("t", "j1", "leased")
    stop()
    watch.note("t", "j1", "completed")

    assert heard == [("t", "j1", None, "ready"), ("t", "j1", "ready", "leased")]


def test_leased_peak_counts_per_type_and_keeps_the_highest() -> None:
    peak = LeasedPeak()
    for job in ("a", "b", "c"):
        peak("t", job, "ready", "leased")
    peak("t", "a", "leased", "completed")
    peak("u", "x", None, "leased")
    peak("t", "d", "ready", "leased")

    assert peak.highest == {"t": 3, "u": 1}
    assert peak.now == {"t": 3, "u": 1}
    assert peak.peaks["t"].job_id == "c"
    assert peak.changes == 6


def _collector(into: list[tuple[object, ...]]) -> Any:
    return lambda *change: into.append(change)


def test_an_emulator_tells_its_watch_of_a_new_job() -> None:
    for emulator in (sheptra.create(auth=False), stagenext.create()):
        peak = LeasedPeak()
        heard: list[tuple[object, ...]] = []
        emulator.watch.subscribe(peak)
        emulator.watch.subscribe(_collector(heard))
        job_id = emulator.create_job("charge-payment", {"amount": 1})
        assert heard[-1] == ("charge-payment", job_id, None, "ready")
        assert peak.highest == {"charge-payment": 0}
