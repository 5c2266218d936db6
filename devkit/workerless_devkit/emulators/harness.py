"""The one way to start an engine emulator and reach it: :func:`start` → :class:`RunningEmulator`.

The CLI (``workerless emulate``, ``workerless demo``), the pytest fixtures, chaos, bench and the
project's tests all start emulators here, and write env files with :func:`env_lines` alone.

Example:
    >>> with start("nodeflow") as running:                      # doctest: +SKIP
    ...     job_id = running.create_job("charge", {"amount": 3})
    ...     running.write_env_file("nodeflow.env")              # WORKERLESS_ENGINE + NF_* keys
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from workerless.engines import ENGINE_NAMES

from workerless_devkit.emulators.core import EngineEmulator
from workerless_devkit.emulators.http import EmulatorServer

__all__ = ["RunningEmulator", "create", "emulator_module", "env_lines", "start"]


def emulator_module(engine: str) -> ModuleType:
    """The emulator module of ``engine`` (one of ``workerless.engines.ENGINE_NAMES``).

    ``ValueError`` for an unknown engine; ``ImportError`` when its dependencies are missing.
    """
    if engine not in ENGINE_NAMES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_NAMES)}")
    return importlib.import_module(f"workerless_devkit.emulators.{engine}")


def create(engine: str, **options: Any) -> EngineEmulator:
    """``engine``'s emulator, not serving yet (options: the engine module's ``create()``)."""
    emulator: EngineEmulator = emulator_module(engine).create(**options)
    return emulator


def env_lines(values: Mapping[str, str]) -> str:
    """dotenv lines; values with spaces, quotes or ``#`` are single-quoted (double when they hold one)."""
    lines = []
    for key, value in values.items():
        if re.fullmatch(r"[^\s'\"#\\]*", value):
            lines.append(f"{key}={value}")
        else:
            lines.append(f"{key}='{value}'" if "'" not in value else f'{key}="{value}"')
    return "\n".join(lines) + "\n"


class RunningEmulator:
    """An emulator served on 127.0.0.1: where it listens, what reaches it, and how to stop it.

    Attributes:
        engine: the engine name (``sheptra``, ``nodeflow``, ``stagenext``).
        emulator: the engine's emulator (its own Python API); its attributes are also this object's.
        server: the :class:`~workerless_devkit.emulators.http.EmulatorServer`.
        url: the base URL on 127.0.0.1.
        values: the engine's connection values (env-file keys, the emulator's credentials included),
            read once at start.
        env_file: the last file :meth:`write_env_file` wrote (None before).
    """

    def __init__(self, engine: str, emulator: EngineEmulator, server: EmulatorServer) -> None:
        self.engine = engine
        self.emulator = emulator
        self.server = server
        self.url: str = server.url
        self.values: dict[str, str] = dict(emulator.engine_values(server.url))
        self.env_file: Path | None = None

    def __getattr__(self, name: str) -> Any:
        # Only reached for what this object lacks: the emulator's own API (create_job, advance, ...).
        return getattr(self.emulator, name)

    def env_text(self, **extra: str) -> str:
        """The env file's text: ``WORKERLESS_ENGINE``, the connection values, then ``extra``."""
        return env_lines({"WORKERLESS_ENGINE": self.engine, **self.values, **extra})

    def write_env_file(self, path: str | Path, **extra: str) -> Path:
        """Write :meth:`env_text` to ``path`` (``extra``: more keys, e.g. ``SHEPTRA_MODE="discovery"``)."""
        target = Path(path)
        target.write_text(self.env_text(**extra), encoding="utf-8")
        self.env_file = target
        return target

    def stop(self) -> None:
        """Release held long polls, then stop serving (idempotent enough to call twice)."""
        self.emulator.close()
        self.server.stop()

    def __enter__(self) -> RunningEmulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(engine: str, *, port: int = 0, jobs: str | Path | None = None, **options: Any) -> RunningEmulator:
    """Create ``engine``'s emulator with ``options``, queue the jobs of the file ``jobs`` (the one
    jobs-file format of :mod:`~workerless_devkit.emulators.core`), and serve it on 127.0.0.1:``port``
    (0: a free port). Stop it with :meth:`RunningEmulator.stop` or use it as a context manager.

    Raises ``ValueError`` (unknown engine, bad options or jobs file), ``FileNotFoundError`` (no jobs
    file) and ``OSError`` (the port is taken).
    """
    emulator = create(engine, **options)
    if jobs is not None:
        emulator.load_jobs(jobs)
    return RunningEmulator(engine, emulator, emulator.serve(port=port))
