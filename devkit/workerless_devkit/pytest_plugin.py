"""pytest fixtures for handler authors: the engine emulators, a fake engine, local mode, metrics.

Installing ``workerless-devkit`` registers them (a ``pytest11`` entry point): every pytest run in
that environment has them, with nothing to add to ``conftest.py``.

Fixtures:

- ``fake_engine``: a fresh in-memory :class:`~workerless.testing.FakeEngine`.
- ``workerless_emulator``: a factory ``(engine, **options) -> Emulator``: an emulator of
  ``sheptra`` / ``nodeflow`` / ``stagenext`` served on 127.0.0.1 (``.url``, ``.env_file``,
  ``.create_job``, ``.job_state``, ``.advance``, and every method of the engine's emulator);
  stopped after the test.
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
from workerless.engines import ENGINE_NAMES
from workerless.testing import FakeEngine


class Emulator:
    """A served engine emulator: the emulator's own API plus where it listens.

    Attributes:
        engine: ``sheptra``, ``nodeflow`` or ``stagenext``.
        url: the base URL on 127.0.0.1.
        values: the engine's connection values (env-file keys, the emulator's credentials included).
        env_file: a dotenv file with ``WORKERLESS_ENGINE`` and ``values``, for ``workerless local``.
    """

    def __init__(self, engine: str, emulator: Any, server: Any, env_file: Path) -> None:
        self.engine = engine
        self.emulator = emulator
        self.server = server
        self.url: str = server.url
        self.values: dict[str, str] = dict(emulator.engine_values(server.url))
        lines = [f"WORKERLESS_ENGINE={engine}", *(f"{k}={_quote(v)}" for k, v in self.values.items())]
        env_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.env_file = env_file

    def __getattr__(self, name: str) -> Any:
        return getattr(self.emulator, name)

    def stop(self) -> None:
        self.server.stop()


def _quote(value: str) -> str:
    return value if value and all(c not in value for c in " '\"#\\") else json.dumps(value)


EmulatorFactory = Callable[..., Emulator]


@pytest.fixture
def fake_engine() -> FakeEngine:
    """A fresh in-memory engine."""
    return FakeEngine()


@pytest.fixture
def workerless_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorFactory]:
    """Factory: ``workerless_emulator("sheptra", auth=False)`` serves an emulator on loopback."""
    started: list[Emulator] = []

    def start(engine: str, **options: Any) -> Emulator:
        import importlib

        if engine not in ENGINE_NAMES:
            raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_NAMES)}")
        module = importlib.import_module(f"workerless_devkit.emulators.{engine}")
        emulator = module.create(**options)
        server = emulator.serve(port=0)
        env_file = tmp_path_factory.mktemp(f"{engine}-emulator") / f"{engine}.env"
        handle = Emulator(engine, emulator, server, env_file)
        started.append(handle)
        return handle

    yield start
    for handle in reversed(started):
        handle.stop()


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
    parameters (``parameters={"HandlerTimeout": "10", "JobQueueVisibilityTimeout": "10"}``), and
    ``schedule_seconds`` fires the template's schedules more often than their rate."""
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
