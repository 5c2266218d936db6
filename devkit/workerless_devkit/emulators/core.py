"""What every engine emulator shares; each engine's module adds only its wire protocol on top.

- :class:`Clock`: wall time plus every :meth:`Clock.advance`, and the one lock and condition
  variable the emulator's state lives under (a long poll waits on it; an advance, a new job or a
  close wakes it).
- :class:`JobRegistry`: the jobs (or tasks, or stages) by id in creation order, each with its
  history of ``{"at", "event", ...}`` entries, and the :class:`StateWatch` that hears of every change.
- :class:`EngineEmulator`: the base class: clock, registry, the :class:`Router` with its request
  stats and fault injection (``/_admin/stats``, ``/_admin/faults``), the shared admin routes
  (``/_admin/clock``, ``/_admin/jobs``), ``serve()`` and ``load_jobs()``.
- :func:`read_jobs` / :func:`parse_jobs`: the one jobs-file format ``workerless emulate ENGINE
  --jobs FILE`` reads for every engine (:class:`JobSpec`).

The jobs file is JSON: a list of jobs (or ``{"jobs": [...]}``, or a single job object). A job is
``{"type": "charge-payment", "variables": {...}, "retries": 3}``: ``type`` is required (the job
type, node-flow's taskDefName, StageNext's handler queue), ``variables`` defaults to ``{}``,
``retries`` to 3. Any other key is engine-specific (Sheptra ``tenantId``, ``instanceId``,
``elementId``, ``traceparent``; node-flow ``domain``, ``workflowId``, ``refName``,
``traceparent``; StageNext ``application``) and an engine ignores the keys it does not know, so
one file serves every engine.

Example:
    >>> [spec.type for spec in parse_jobs('[{"type": "charge", "variables": {"a": 1}}, {"type": "ship"}]')]
    ['charge', 'ship']
    >>> parse_jobs('{"type": "ship", "retries": 1, "domain": "eu"}')[0].extra
    {'domain': 'eu'}
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from workerless_devkit.emulators.http import EmulatorServer, HTTPProblem, Request, Response, Router, json_response
from workerless_devkit.emulators.watch import StateWatch

__all__ = [
    "DEFAULT_RETRIES",
    "Clock",
    "EngineEmulator",
    "JobRegistry",
    "JobSpec",
    "iso_millis",
    "parse_jobs",
    "pick",
    "read_jobs",
    "specs_of",
]

#: Attempts a job gets when its spec names none (every emulator's ``create_job`` default).
DEFAULT_RETRIES = 3

# The names the jobs file accepts for the two common fields, the first the documented one: the
# others are what node-flow's and Sheptra's own files used before there was one format.
_TYPE_KEYS = ("type", "taskDefName", "jobType", "job_type")
_VARIABLES_KEYS = ("variables", "input")


def iso_millis(epoch: float) -> str:
    """ISO 8601 UTC with milliseconds and a ``Z`` suffix (Sheptra's ``lockExpiresAt``, node-flow's
    timestamps)."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Clock:
    """An emulator's clock (epoch seconds): wall time plus every :meth:`advance`.

    It also holds the emulator's one lock (reentrant) and the condition variable on it: state
    changes happen under ``lock``; a long poll waits on ``changed``; :meth:`advance` runs the
    emulator's sweeps (``on_advance``) under the lock and then wakes every waiter, so a lease
    lapses or a backoff ends for a parked poll without anyone sleeping.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.offset = 0.0
        self._sweeps: list[Callable[[], None]] = []

    def now(self) -> float:
        """Wall time plus every advance so far."""
        return time.time() + self.offset

    def on_advance(self, sweep: Callable[[], None]) -> None:
        """Run ``sweep`` (under the lock) after every advance, before the waiters wake."""
        self._sweeps.append(sweep)

    def advance(self, seconds: float) -> None:
        """Move the clock forward: leases lapse, backoffs end and tokens expire without sleeping."""
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        with self.changed:
            self.offset += float(seconds)
            for sweep in self._sweeps:
                sweep()
            self.changed.notify_all()

    def reset(self) -> None:
        """Back to wall time (an emulator's ``reset``)."""
        with self.changed:
            self.offset = 0.0
            self.changed.notify_all()

    def wake(self) -> None:
        """Wake every waiter now (a new job, a close, a cell move)."""
        with self.changed:
            self.changed.notify_all()


J = TypeVar("J")


class JobRegistry(Generic[J]):
    """An emulator's jobs by id, in creation order, with the watch that hears of every change.

    Each engine keeps its own job record (a Sheptra job, a node-flow task, a StageNext stage) with
    a ``history`` list; :meth:`record` appends one entry stamped on the emulator's clock.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        #: Every change of a job's state, as it happens (workerless_devkit.emulators.watch).
        self.watch = StateWatch()
        self._jobs: dict[str, J] = {}
        self._seq = 0

    def next_seq(self) -> int:
        """The next creation sequence number (1, 2, ...): what "oldest first" orders by."""
        self._seq += 1
        return self._seq

    def add(self, job_id: str, job: J) -> J:
        self._jobs[job_id] = job
        return job

    def get(self, job_id: str) -> J | None:
        return self._jobs.get(job_id)

    def __getitem__(self, job_id: str) -> J:
        return self._jobs[job_id]

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __iter__(self) -> Iterator[J]:
        return iter(list(self._jobs.values()))

    def __len__(self) -> int:
        return len(self._jobs)

    def values(self) -> list[J]:
        """Every job, in creation order."""
        return list(self._jobs.values())

    def clear(self) -> None:
        """Forget every job (the sequence goes on: ids stay unique across a reset)."""
        self._jobs.clear()

    def record(self, history: list[dict[str, Any]], event: str, **data: Any) -> dict[str, Any]:
        """Append ``{"at": now, "event": event, **data}`` to ``history``; returns the entry."""
        entry = {"at": self.clock.now(), "event": event, **data}
        history.append(entry)
        return entry


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a jobs file or of ``POST /_admin/jobs``: its type, variables, retries, and the
    engine-specific keys (``extra``, as written in the file)."""

    type: str
    variables: dict[str, Any] = field(default_factory=dict)
    retries: int = DEFAULT_RETRIES
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_object(cls, item: Any, *, where: str) -> JobSpec:
        """The spec of one JSON object; ``ValueError`` naming ``where`` when it is not one."""
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be a JSON object")
        found = [key for key in _TYPE_KEYS if item.get(key) is not None]
        job_type = item[found[0]] if found else None
        if not isinstance(job_type, str) or not job_type:
            raise ValueError(f"{where} needs a 'type' (a non-empty string)")
        var_keys = [key for key in _VARIABLES_KEYS if item.get(key) is not None]
        variables = item[var_keys[0]] if var_keys else {}
        if not isinstance(variables, dict):
            raise ValueError(f"{where}: 'variables' must be a JSON object")
        retries = item.get("retries")
        if retries is None:
            retries = DEFAULT_RETRIES
        elif isinstance(retries, bool) or not isinstance(retries, int):
            raise ValueError(f"{where}: 'retries' must be an integer")
        known = {*_TYPE_KEYS, *_VARIABLES_KEYS, "retries"}
        extra = {key: value for key, value in item.items() if key not in known and value is not None}
        return cls(job_type, dict(variables), retries, extra)


def parse_jobs(text: str, *, source: str = "jobs") -> list[JobSpec]:
    """The jobs of a jobs file's text (see the module docstring for the format)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{source}: not valid JSON: {exc}") from None
    return specs_of(data, source=source)


def specs_of(data: Any, *, source: str = "jobs") -> list[JobSpec]:
    """The jobs of already-decoded JSON: a list, ``{"jobs": [...]}`` or one job object."""
    if isinstance(data, dict):
        data = data["jobs"] if isinstance(data.get("jobs"), list) else [data]
    if not isinstance(data, list):
        raise ValueError(f"{source}: expected a JSON list of jobs")
    return [JobSpec.from_object(item, where=f"{source}: job {index}") for index, item in enumerate(data)]


def read_jobs(path: str | Path) -> list[JobSpec]:
    """The jobs of the file at ``path`` (``FileNotFoundError`` when there is none)."""
    return parse_jobs(Path(path).read_text(encoding="utf-8"), source=str(path))


def pick(extra: Mapping[str, Any], *names: str) -> Any:
    """The first of ``names`` set in ``extra`` (a camelCase key and its snake_case twin), or None."""
    for name in names:
        if extra.get(name) is not None:
            return extra[name]
    return None


class EngineEmulator:
    """The base of the engine emulators: the shared core, with the engine's protocol left to it.

    A subclass sets ``name``, registers its wire routes on ``self.router`` and implements
    :meth:`engine_values`, ``create_job(job_type, variables, *, retries=3, ...)``, :meth:`job_state`, :meth:`jobs` and
    :meth:`create_from_spec`. Every emulator then serves the same admin API:

    - ``GET|POST /_admin/clock`` (``{"advance": seconds}``) → ``{"now", "epoch", "iso", "offset"}``;
    - ``POST /_admin/jobs``: one job or a list, in the jobs-file format → 201 with the job's state
      (``{"jobs": [...]}`` for a list); ``GET /_admin/jobs[?state=&type=]``, ``GET /_admin/jobs/{id}``;
    - ``GET|DELETE /_admin/stats`` and ``POST|DELETE /_admin/faults`` (:mod:`.http`).
    """

    name: ClassVar[str] = ""
    #: ``create_job(job_type, variables=None, *, retries=3, **engine_keys) -> job id``: each
    #: engine's keyword options differ (Sheptra's tenant, node-flow's domain, StageNext's application).
    create_job: Callable[..., str]

    def __init__(self) -> None:
        self.clock = Clock()
        self.registry: JobRegistry[Any] = JobRegistry(self.clock)
        #: Every change of a job's state, as it happens (workerless_devkit.emulators.watch).
        self.watch = self.registry.watch
        self.base_url: str | None = None
        self._closed = False
        self.router = Router(clock=self.now)
        self._register_admin_routes()

    # ------------------------------------------------------------------ clock and serving

    @property
    def _lock(self) -> threading.RLock:
        """The emulator's one lock (the clock's)."""
        return self.clock.lock

    @property
    def _changed(self) -> threading.Condition:
        """The emulator's one condition variable (the clock's): long polls wait on it."""
        return self.clock.changed

    @_changed.setter
    def _changed(self, condition: threading.Condition) -> None:
        # Replacing it (a test recording every wait) replaces it for the clock too: an advance
        # still wakes the polls that wait on it.
        self.clock.changed = condition

    def now(self) -> float:
        """The emulator's clock (epoch seconds): wall time plus every :meth:`advance`."""
        return self.clock.now()

    def advance(self, seconds: float) -> None:
        """Move the clock forward: leases lapse, backoffs end and tokens expire without sleeping."""
        self.clock.advance(seconds)

    def serve(self, port: int = 0) -> EmulatorServer:
        """Start serving on 127.0.0.1 (``port=0``: a free port); the caller stops the server."""
        server = EmulatorServer(self.router, port=port).start()
        self.base_url = server.url
        return server

    def close(self) -> None:
        """Release every held long poll (they answer with what they have); call before stopping."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    # ------------------------------------------------------------------ the engine's part

    def engine_values(self, base_url: str) -> dict[str, str]:
        """The connection values (env-file keys) a worker needs to reach this emulator."""
        raise NotImplementedError

    def create_from_spec(self, spec: JobSpec) -> str:
        """Create the job ``spec`` describes (its engine-specific keys applied); return its id."""
        raise NotImplementedError

    def check_spec(self, spec: JobSpec) -> None:
        """Refuse a job before any of a batch is created (raise :class:`HTTPProblem`); default: none."""

    def job_state(self, job_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def jobs(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def load_jobs(self, path: str | Path) -> list[str]:
        """Create the jobs of a jobs file (the format in :mod:`~workerless_devkit.emulators.core`);
        returns their ids in the file's order."""
        return [self.create_from_spec(spec) for spec in read_jobs(path)]

    # ------------------------------------------------------------------ admin routes

    def _register_admin_routes(self) -> None:
        r = self.router
        r.route("GET", "/_admin/clock")(self._admin_clock)
        r.route("POST", "/_admin/clock")(self._admin_clock)
        r.route("POST", "/_admin/jobs")(self._admin_create)
        r.route("GET", "/_admin/jobs")(self._admin_list)
        r.route("GET", "/_admin/jobs/{id}")(self._admin_get)

    def _admin_clock(self, req: Request) -> Response:
        if req.method == "POST":
            body = req.json_object()
            seconds = body.get("advance", 0)
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
                raise HTTPProblem(400, "Bad Request", "advance must be a non-negative number of seconds")
            self.advance(float(seconds))
        now = self.now()
        return json_response({"now": now, "epoch": now, "iso": iso_millis(now), "offset": self.clock.offset})

    def _admin_create(self, req: Request) -> Response:
        body = req.json()
        try:
            specs: Sequence[JobSpec] = specs_of(body if isinstance(body, list) else [body], source="body")
            for spec in specs:
                self.check_spec(spec)
            ids = [self.create_from_spec(spec) for spec in specs]
        except (ValueError, TypeError, KeyError) as exc:
            raise HTTPProblem(400, "Bad Request", str(exc)) from None
        if isinstance(body, list):
            return json_response({"jobs": [self.job_state(job_id) for job_id in ids]}, 201)
        return json_response(self.job_state(ids[0]), 201)

    def _admin_list(self, req: Request) -> Response:
        found = self.jobs()
        for key in ("state", "type"):
            if key in req.query:
                found = [job for job in found if job[key] == req.query[key]]
        return json_response({"jobs": found})

    def _admin_get(self, req: Request) -> Response:
        try:
            return json_response(self.job_state(req.params["id"]))
        except KeyError:
            raise HTTPProblem(404, "Not Found", f"no job with id {req.params['id']}") from None
