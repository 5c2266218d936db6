"""What the end-to-end pipeline tests share: the real template run by local mode with test-sized
timings (passed as template parameters), a listener on the pipeline's lifecycle events, and a
bounded wait for jobs to settle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from workerless.local import LocalTopology

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
FINAL = {"completed", "failed", "thrown"}

Events = list[tuple[str, str, dict[str, Any]]]


def job_timings(seconds: int) -> dict[str, str]:
    """Template parameters that make a failed job delivery come back after ``seconds`` instead of the
    template's 720 s (5400 s for generate-report): each job queue's visibility timeout, and each
    handler's Timeout equal to it, the most Lambda allows (a function's timeout may not exceed its
    queue's visibility). Keep ``seconds`` well above the longest handler run of the test: local mode
    abandons an invocation at its Timeout, as Lambda does."""
    value = str(seconds)
    return {
        "HandlerTimeout": value,
        "JobQueueVisibilityTimeout": value,
        "GenerateReportTimeout": value,
        "GenerateReportVisibilityTimeout": value,
    }


def topology(
    env_file: Path,
    *,
    job_visibility_seconds: int,
    template: Path = TEMPLATE,
    max_in_flight: int | None = None,
) -> LocalTopology:
    """The template with test-sized timings, all template parameters but the schedule's: a 5 s lease
    makes "several lease lengths" a matter of seconds, a 1 s tick keeps pickup fast, and the job
    queues' visibility (with the handlers' timeouts) is :func:`job_timings`. The 1-minute watchdog
    fires every second (``schedule_seconds``, the one departure from the template: EventBridge
    cannot express it)."""
    parameters = {"LeaseSeconds": "5", "TickSeconds": "1", **job_timings(job_visibility_seconds)}
    if max_in_flight is not None:
        parameters["MaxInFlight"] = str(max_in_flight)
    return LocalTopology(template, env_file, parameters=parameters, schedule_seconds=1)


def wait_final(topo: LocalTopology, state: Callable[[str], dict[str, Any]], ids: list[str], seconds: float) -> None:
    """Run until every job's ``state(id)["state"]`` is final; fail naming the ones that are not."""
    done = topo.run_until(lambda: all(state(i)["state"] in FINAL for i in ids), max_seconds=seconds)
    states = {i: state(i)["state"] for i in ids}
    assert done, f"jobs not final after {seconds} s: {states}"
