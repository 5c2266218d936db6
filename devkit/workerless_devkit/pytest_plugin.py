"""pytest fixtures for handler authors: the engine emulators, a fake engine, local mode, metrics.

Installing ``workerless-devkit`` registers them (a ``pytest11`` entry point): every pytest run in
that environment has them, with nothing to add to ``conftest.py``.

Fixtures:

- ``fake_engine``: a fresh in-memory :class:`~workerless.testing.FakeEngine`.
- ``workerless_emulator``: a factory ``(engine, **options) -> RunningEmulator``: an emulator of
  ``sheptra`` / ``nodeflow`` / ``stagenext`` served on 127.0.0.1 (``.url``, ``.values``,
  ``.env_file``, ``.create_job``, ``.job_state``, ``.advance``, and every method of the engine's
  emulator); stopped after the test. ``workerless_module_emulator``: the same for a module-scoped
  fixture (stopped after the module's last test).
- ``sheptra_emulator``, ``nodeflow_emulator``, ``stagenext_emulator``: one of each, default options.
- ``workerless_local``: a factory ``(env_file, template="template.yaml", **options) -> LocalTopology``
  that starts the template's functions in this process (embedded SQS and DynamoDB) and stops them
  after the test.
- ``workerless_metrics``: turns EMF metrics on for the test and yields the list of EMF documents
  (dicts) written, in order.

Every network call stays on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from workerless.testing import FakeEngine

from workerless_devkit.emulators.harness import RunningEmulator, start

#: The handle the emulator fixtures return: :class:`~workerless_devkit.emulators.RunningEmulator`
#: (``.url``, ``.values``, ``.env_file``, ``.stop()``, and the engine emulator's own API).
Emulator = RunningEmulator


class _Emulators:
    """The emulators one fixture started: each served with its env file written; all stopped at
    the end of the fixture's scope (:meth:`stop`)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._started: list[RunningEmulator] = []

    def __call__(self, engine: str, **options: Any) -> RunningEmulator:
        running = start(engine, **options)
        self._started.append(running)
        running.write_env_file(self._tmp.mktemp(f"{engine}-emulator") / f"{engine}.env")
        return running

    def stop(self) -> None:
        for running in reversed(self._started):
            running.stop()


EmulatorFactory = Callable[..., RunningEmulator]


@pytest.fixture
def fake_engine() -> FakeEngine:
    """A fresh in-memory engine."""
    return FakeEngine()


@pytest.fixture
def workerless_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorFactory]:
    """Factory: ``workerless_emulator("sheptra", auth=False)`` serves an emulator on loopback
    (options: the engine emulator's ``create()``, and ``jobs=`` a jobs file); stopped after the test."""
    emulators = _Emulators(tmp_path_factory)
    yield emulators
    emulators.stop()


@pytest.fixture(scope="module")
def workerless_module_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorFactory]:
    """:func:`workerless_emulator` for a module-scoped fixture: the emulators it starts serve every
    test of the module and stop after the last one."""
    emulators = _Emulators(tmp_path_factory)
    yield emulators
    emulators.stop()


@pytest.fixture
def sheptra_emulator(workerless_emulator: EmulatorFactory) -> Emulator:
    """A Sheptra emulator (authentication on) on 127.0.0.1."""
    return workerless_emulator("sheptra")


@pytest.fixture
def nodeflow_emulator(workerless_emulator: EmulatorFactory) -> Emulator:
    """A node-flow emulator (API key) on 127.0.0.1."""
    return workerless_emulator("nodeflow")


@pytest.fixture
def stagenext_emulator(workerless_emulator: EmulatorFactory) -> Emulator:
    """A StageNext emulator on 127.0.0.1."""
    return workerless_emulator("stagenext")


@pytest.fixture
def workerless_local() -> Iterator[Callable[..., Any]]:
    """Factory: ``workerless_local(emulator.env_file, parameters={"LeaseSeconds": "5"})`` starts the
    template's functions in this process; they are stopped (and the environment restored) after
    the test. Options are :class:`~workerless_devkit.local.LocalTopology`'s: shorter timings are template
    parameters (``parameters={"HandlerTimeout": "10", "JobQueueVisibilityTimeout": "10"}``) and, for
    a route with its own Timeout and VisibilityTimeout, ``route_settings``
    (``workerless_devkit.local.template.route_timing_settings``); ``schedule_seconds`` fires the
    template's schedules more often than their rate."""
    started: list[Any] = []

    def start(env_file: str | Path | None, template: str | Path = "template.yaml", **options: Any) -> Any:
        from workerless_devkit.local import LocalTopology

        topology = LocalTopology(template, env_file, **options)
        topology.start()
        started.append(topology)
        return topology

    yield start
    for topology in reversed(started):
        topology.stop()


@pytest.fixture
def workerless_metrics() -> Iterator[list[dict[str, Any]]]:
    """Metrics on, written to the returned list (one dict per EMF document) instead of stdout."""
    from workerless import observability

    documents: list[dict[str, Any]] = []
    observability.configure(metrics=True, sink=lambda line: documents.append(json.loads(line)))
    try:
        yield documents
    finally:
        observability.configure(metrics=None, sink=None)
