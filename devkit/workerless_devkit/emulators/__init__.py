"""Faithful emulators of each engine's worker API, served on 127.0.0.1.

Every emulator module (``workerless_devkit.emulators.<engine>``) exposes ``create(**options)`` returning an
object with this shape, so the CLI, the demo, local mode and the contract tests treat them alike:

- ``name``: the engine name; ``router``: the :class:`~workerless_devkit.emulators.http.Router` to serve.
- ``serve(port=0) -> EmulatorServer``: start serving on loopback in a background thread.
- ``engine_values(base_url) -> dict[str, str]``: the connection values (env-file keys) a worker
  needs to reach this emulator, credentials included.
- ``create_job(job_type, variables, *, retries=3, **extra) -> str``: queue a job, return its id.
- ``job_state(job_id) -> dict``: at least ``id``, ``type``, ``state`` (one of ``ready``, ``leased``,
  ``completed``, ``failed`` — failed for good —, ``thrown``), ``retries``, ``output``,
  ``error_message``, ``attempts`` (times handed to a worker) and ``history`` (a list of events).
- ``jobs() -> list[dict]``: every job's state.
- ``advance(seconds)``: move the emulator's clock forward (lease lapse without sleeping).

Each also serves an HTTP admin API under ``/_admin/`` (create jobs, read them back, stats, faults).
"""
