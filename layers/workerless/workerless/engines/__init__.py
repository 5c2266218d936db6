"""Engine adapters, one package per engine (config, auth or session, adapter) on the shared
:mod:`workerless.engines.kit`, all behind :class:`~workerless.engines.base.Engine`.

:data:`ENGINES` is the one list of the engines workerless supports: settings, the devkit's CLI,
emulators, chaos harness and pytest fixtures all read it. Each package exposes
``from_values(values, client, *, worker_id=None, state=None) -> Engine`` that validates the engine's
connection values (naming any missing or malformed key) and returns a ready adapter.
Packages are imported lazily so a function only pays for the engine it talks to.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workerless.errors import ConfigurationError

if TYPE_CHECKING:
    import httpx

    from workerless.engines.base import Engine, SharedState


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One supported engine: its name (``WORKERLESS_ENGINE``), its adapter module, and the prefixes
    of its connection keys (how an env file without ``WORKERLESS_ENGINE`` reveals its engine)."""

    name: str
    module: str
    key_prefixes: tuple[str, ...]
    #: Every connection key the engine's package reads: a key with the engine's prefix that is not
    #: one of these is a typo (``SHEPTRA_MDOE``), refused rather than ignored (settings.check_engine_keys).
    keys: frozenset[str] = frozenset()


#: Every supported engine, by name. The devkit's emulator for engine ``name`` is
#: ``workerless_devkit.emulators.<name>``.
ENGINES: Mapping[str, EngineSpec] = {
    spec.name: spec
    for spec in (
        EngineSpec(
            "sheptra",
            "workerless.engines.sheptra",
            ("SHEPTRA_",),
            frozenset(
                {
                    "SHEPTRA_API_URL",
                    "SHEPTRA_CLIENT_ID",
                    "SHEPTRA_CLIENT_SECRET",
                    "SHEPTRA_DISCOVERY_URL",
                    "SHEPTRA_ENVIRONMENT",
                    "SHEPTRA_MODE",
                    "SHEPTRA_TENANT_IDS",
                    "SHEPTRA_TOKEN_ENDPOINT",
                }
            ),
        ),
        EngineSpec(
            "nodeflow",
            "workerless.engines.nodeflow",
            ("NF_",),
            frozenset({"NF_API_KEY", "NF_DOMAIN", "NF_KEY_ID", "NF_KEY_SECRET", "NF_NAMESPACE", "NF_URL"}),
        ),
        EngineSpec(
            "stagenext",
            "workerless.engines.stagenext",
            ("STAGENEXT_",),
            frozenset(
                {
                    "STAGENEXT_API_KEY",
                    "STAGENEXT_API_URL",
                    "STAGENEXT_EVENTS_FLUSH_SECONDS",
                    "STAGENEXT_EVENTS_MAX_BATCH",
                    "STAGENEXT_INSTANCE_ID",
                    "STAGENEXT_LEASE_SECONDS",
                    "STAGENEXT_SESSION_REFRESH_SECONDS",
                    "STAGENEXT_VISIBILITY_SECONDS",
                }
            ),
        ),
    )
}
#: The engine names, in the order the CLI and the docs list them.
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)


def build_engine(
    name: str,
    values: Mapping[str, str],
    client: httpx.Client,
    *,
    worker_id: str | None = None,
    state: SharedState | None = None,
) -> Engine:
    """Build the adapter for engine ``name`` from its connection values.

    Example (an illustration: it needs a running engine or AWS, which tests/functional provide)::

        engine = build_engine("sheptra", {"SHEPTRA_API_URL": "http://127.0.0.1:8080"}, client)
    """
    try:
        spec = ENGINES[name]
    except KeyError:
        raise ConfigurationError(
            f"unknown engine {name!r}; one of {', '.join(ENGINE_NAMES)}", key="WORKERLESS_ENGINE"
        ) from None
    module = importlib.import_module(spec.module)
    engine: Engine = module.from_values(values, client, worker_id=worker_id, state=state)
    return engine


#: Checks run before every request of a client from :func:`new_http_client`; one raising stops the
#: request. Empty in Lambda; local mode adds one that refuses requests from an invocation it
#: abandoned at its Timeout (Lambda would have stopped that code).
_request_guards: list[Callable[[], None]] = []


def add_request_guard(guard: Callable[[], None]) -> None:
    """Run ``guard()`` before every engine request (idempotent); it raises to refuse the request."""
    if guard not in _request_guards:
        _request_guards.append(guard)


def remove_request_guard(guard: Callable[[], None]) -> None:
    if guard in _request_guards:
        _request_guards.remove(guard)


def _run_request_guards(request: httpx.Request) -> None:
    for guard in tuple(_request_guards):
        guard()


#: Called with every response an engine client receives (any status). Empty in Lambda; local mode
#: adds one to tell "the engine answered" from "nothing is listening at that URL".
_response_watchers: list[Callable[[httpx.Response], None]] = []


def add_response_watcher(watcher: Callable[[httpx.Response], None]) -> None:
    """Call ``watcher(response)`` on every engine response (idempotent); it must not raise."""
    if watcher not in _response_watchers:
        _response_watchers.append(watcher)


def remove_response_watcher(watcher: Callable[[httpx.Response], None]) -> None:
    if watcher in _response_watchers:
        _response_watchers.remove(watcher)


def _run_response_watchers(response: httpx.Response) -> None:
    for watcher in tuple(_response_watchers):
        watcher(response)


def new_http_client(timeout_seconds: float) -> httpx.Client:
    """The HTTP client every adapter gets: explicit timeouts shorter than any Lambda's, and a
    small keep-alive pool (a warm container reuses its connection to the engine)."""
    import httpx

    connect = min(3.0, timeout_seconds)
    return httpx.Client(
        timeout=httpx.Timeout(timeout_seconds, connect=connect),
        limits=httpx.Limits(max_connections=20, max_keepalive_connections=10),
        follow_redirects=False,
        headers={"User-Agent": "workerless/0.1"},
        event_hooks={"request": [_run_request_guards], "response": [_run_response_watchers]},
    )
