"""What the end-to-end pipeline tests share: the real template run by local mode with test-sized
timings, a listener on the pipeline's lifecycle events, and a bounded wait for jobs to settle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from workerless.local import LocalTopology

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
FINAL = {"completed", "failed", "thrown"}

Events = list[tuple[str, str, dict[str, Any]]]


def topology(
    env_file: Path,
    *,
    visibility_seconds: int,
    template: Path = TEMPLATE,
    max_in_flight: int | None = None,
) -> LocalTopology:
    """The template with test-sized timings: a 5 s lease makes "several lease lengths" a matter of
    seconds, a 1 s tick and schedule keep pickup fast, and the SQS visibility timeout is short but
    longer than any handler run in the test (as the template's 6x rule keeps it)."""
    parameters = {"LeaseSeconds": "5", "TickSeconds": "1"}
    if max_in_flight is not None:
        parameters["MaxInFlight"] = str(max_in_flight)
    return LocalTopology(
        template, env_file, parameters=parameters, visibility_seconds=visibility_seconds, schedule_seconds=1
    )


def wait_final(topo: LocalTopology, state: Callable[[str], dict[str, Any]], ids: list[str], seconds: float) -> None:
    """Run until every job's ``state(id)["state"]`` is final; fail naming the ones that are not."""
    done = topo.run_until(lambda: all(state(i)["state"] in FINAL for i in ids), max_seconds=seconds)
    states = {i: state(i)["state"] for i in ids}
    assert done, f"jobs not final after {seconds} s: {states}"
