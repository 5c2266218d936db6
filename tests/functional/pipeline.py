"""What the end-to-end pipeline tests share: the real template run by local mode with test-sized
timings (passed as template parameters), a listener on the pipeline's lifecycle events, and a
bounded wait for jobs to settle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workerless_devkit.local import LocalTopology
from workerless_devkit.local.template import route_timing_settings

if TYPE_CHECKING:
    from workerless.observability import Listener

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
FINAL = {"completed", "failed", "thrown"}


class Events(list[tuple[str, str, dict[str, Any]]]):
    """The lifecycle events a run recorded, (job type, event, fields), and the listener recording
    them: give it to the run's wiring (``LocalTopology(listeners=(events,))``, :func:`topology`'s
    ``listeners``, ``Hooks(lifecycle_listeners=(events,))``)."""

    def __call__(self, job_type: str, event: str, fields: dict[str, Any]) -> None:
        self.append((job_type, event, fields))


def job_timings(seconds: int) -> dict[str, str]:
    """Template parameters that make a failed job delivery come back after ``seconds`` instead of the
    template's 720 s: the job queues' visibility timeout, and the handlers' Timeout equal to it, the
    most Lambda allows (a function's timeout may not exceed its queue's visibility). A route with its
    own timings (generatereport: 900 s / 5400 s in its Mappings.Routes line) takes them from
    :func:`route_timings`. Keep ``seconds`` well above the longest handler run of the test: local mode
    abandons an invocation at its Timeout, as Lambda does."""
    value = str(seconds)
    return {"HandlerTimeout": value, "JobQueueVisibilityTimeout": value}


def route_timings(seconds: int, template: Path = TEMPLATE) -> dict[str, dict[str, int]]:
    """:func:`job_timings` for the routes that set their own Timeout and VisibilityTimeout (LocalTopology's
    ``route_settings``)."""
    return route_timing_settings(template, timeout=seconds, visibility=seconds)


def topology(
    env_file: Path,
    *,
    job_visibility_seconds: int,
    template: Path = TEMPLATE,
    max_in_flight: int | None = None,
    listeners: Sequence[Listener] = (),
) -> LocalTopology:
    """The template with test-sized timings, all template parameters but the schedule's: a 5 s lease
    makes "several lease lengths" a matter of seconds, a 1 s tick keeps pickup fast, and the job
    queues' visibility (with the handlers' timeouts) is :func:`job_timings` and :func:`route_timings`.
    The 1-minute watchdog fires every second (``schedule_seconds``, the one departure from the template: EventBridge
    cannot express it)."""
    parameters = {"LeaseSeconds": "5", "TickSeconds": "1", **job_timings(job_visibility_seconds)}
    if max_in_flight is not None:
        parameters["MaxInFlight"] = str(max_in_flight)
    return LocalTopology(
        template,
        env_file,
        parameters=parameters,
        route_settings=route_timings(job_visibility_seconds, template),
        schedule_seconds=1,
        listeners=listeners,
    )


def wait_final(topo: LocalTopology, state: Callable[[str], dict[str, Any]], ids: list[str], seconds: float) -> None:
    """Run until every job's ``state(id)["state"]`` is final; fail naming the ones that are not."""
    done = topo.run_until(lambda: all(state(i)["state"] in FINAL for i in ids), max_seconds=seconds)
    states = {i: state(i)["state"] for i in ids}
    assert done, f"jobs not final after {seconds} s: {states}"


def more_polls(topo: LocalTopology, polls: int = 2, seconds: float = 120) -> None:
    """Run until the poller has been invoked ``polls`` more times: "a few more polls" as an event, not
    a guess at how long they take on this machine."""
    start = topo.invocations.get("PollerFunction", 0)
    done = topo.run_until(lambda: topo.invocations.get("PollerFunction", 0) >= start + polls, max_seconds=seconds)
    assert done, f"the poller was not invoked {polls} more times within {seconds} s"


def wait_counted(topo: LocalTopology, expected: dict[str, dict[str, int]], seconds: float) -> dict[str, dict[str, int]]:
    """Run until the local summary has counted at least ``expected`` ({job type: {event: n}}); return it.

    The engine shows a job final as soon as it accepts the report; the handler records the outcome
    (and, on StageNext, acknowledges the delivery) only after that call returns. A test that reads
    the summary, the acks or the in-flight count waits for this, not for the engine's state.
    """

    def counted() -> bool:
        summary = topo.summary
        return all(summary.count(t, e) >= n for t, events in expected.items() for e, n in events.items())

    done = topo.run_until(counted, max_seconds=seconds, poll_seconds=0.05)
    summary = topo.summary.as_dict()
    assert done, f"the summary did not count {expected} within {seconds} s: {summary}"
    return summary


def template_variant(
    tmp_path: Path, replacements: dict[str, str] | None = None, *, handlers: dict[str, Path] | None = None
) -> Path:
    """A copy of the real template.yaml in tmp_path with each ``old -> new`` applied (each ``old``
    must occur exactly once), and ``handlers`` ({job type: directory}) as those routes' code.

    The route loop's ``CodeUri: functions/${Route}/`` is one line for every route, so a route's code
    is swapped in the tree, not the text: the copy's functions/ links each of the repository's
    function directories, except a ``handlers`` type's, which links its directory instead (local
    mode resolves the link, so tracebacks name the real file)."""
    text = TEMPLATE.read_text(encoding="utf-8")
    for old, new in (replacements or {}).items():
        assert text.count(old) == 1, f"template.yaml no longer has exactly one {old!r}"
        text = text.replace(old, new)
    functions = tmp_path / "functions"
    functions.mkdir()
    real = {d.name: d for d in (ROOT / "functions").iterdir() if d.is_dir()}
    # A route's directory is its name: the type's letters and digits (template.yaml's &Routes).
    swapped = {job_type.replace("-", ""): directory for job_type, directory in (handlers or {}).items()}
    for route in swapped:
        assert route in real, f"no functions/{route} in the repository to stand in for"
    for name, directory in real.items():
        (functions / name).symlink_to(swapped.get(name, directory), target_is_directory=True)
    path = tmp_path / "template.yaml"
    path.write_text(text, encoding="utf-8")
    return path
