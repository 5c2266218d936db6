"""Faithful emulators of each engine's worker API, served on 127.0.0.1.

Start one with :func:`start` (``start("sheptra", auth=False)``): it returns a
:class:`RunningEmulator` with ``.url``, ``.values`` (the env-file keys a worker needs, credentials
included), ``.write_env_file(path)``, ``.stop()``, usable as a context manager, and the emulator's
own API on it. The CLI, the pytest fixtures, chaos, bench and the tests all start emulators so.

Every emulator (``workerless_devkit.emulators.<engine>``, one per ``workerless.engines.ENGINE_NAMES``)
is an :class:`~workerless_devkit.emulators.core.EngineEmulator`: the shared core (clock, job
registry with history, admin routes, fault injection, the jobs-file format) with the engine's wire
protocol on top (an engine's module may keep part of it in a base class of its own:
``sheptra_identity``, ``nodeflow_state``, ``stagenext_state``). Its Python API, alike for every engine:

- ``name``: the engine name; ``router``: the :class:`~workerless_devkit.emulators.http.Router` to serve.
- ``serve(port=0) -> EmulatorServer``: start serving on loopback in a background thread.
- ``engine_values(base_url) -> dict[str, str]``: the connection values a worker needs.
- ``create_job(job_type, variables, *, retries=3, **extra) -> str``: queue a job, return its id.
- ``load_jobs(path) -> list[str]``: queue the jobs of a jobs file (:mod:`.core` gives the format).
- ``job_state(job_id) -> dict``: at least ``id``, ``type``, ``state`` (one of ``ready``, ``leased``,
  ``completed``, ``failed`` — failed for good —, ``thrown``), ``retries``, ``output``,
  ``error_message``, ``attempts`` (times handed to a worker) and ``history`` (a list of events).
- ``jobs() -> list[dict]``: every job's state.
- ``advance(seconds)``: move the emulator's clock forward (lease lapse without sleeping).

Each also serves an HTTP admin API under ``/_admin/`` (jobs, clock, stats, faults; see :mod:`.core`).
"""

from workerless_devkit.emulators.harness import RunningEmulator, create, env_lines, start

__all__ = ["RunningEmulator", "create", "env_lines", "start"]
