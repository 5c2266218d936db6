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


@dataclass(frozen=True, slots=True)
class EngineHooks:
    """What a wiring's engine HTTP client calls around each request (given to :func:`new_http_client`
    by the wiring that owns the client; nothing in Lambda).

    ``request_guards`` run before every request; one raising stops it (local mode refuses the
    requests of an invocation it abandoned at its Timeout, as Lambda would have stopped that code).
    ``response_watchers`` get every response, whatever its status, and must not raise (local mode
    tells "the engine answered" from "nothing is listening at that URL").
    """

    request_guards: tuple[Callable[[], None], ...] = ()
    response_watchers: tuple[Callable[[httpx.Response], None], ...] = ()

    def before_request(self, request: httpx.Request) -> None:
        for guard in self.request_guards:
            guard()

    def after_response(self, response: httpx.Response) -> None:
        for watcher in self.response_watchers:
            watcher(response)


def new_http_client(
    timeout_seconds: float, hooks: EngineHooks | None = None, *, transport: httpx.BaseTransport | None = None
) -> httpx.Client:
    """The HTTP client every adapter gets: explicit timeouts shorter than any Lambda's, a small
    keep-alive pool (a warm container reuses its connection to the engine), and no cookie jar
    (:mod:`workerless.engines.kit.client`); ``hooks`` around each request (none unless given);
    ``transport``: httpx's default unless given (a test's or the bench's in-process engine)."""
    import httpx

    from workerless.engines.kit.client import EngineHttpClient

    connect = min(3.0, timeout_seconds)
    return EngineHttpClient(
        transport=transport,
        timeout=httpx.Timeout(timeout_seconds, connect=connect),
        limits=httpx.Limits(max_connections=20, max_keepalive_connections=10),
        follow_redirects=False,
        headers={"User-Agent": "workerless/0.1"},
        event_hooks={"request": [hooks.before_request], "response": [hooks.after_response]}
        if hooks is not None
        else {},
    )


__all__ = ["ENGINES", "ENGINE_NAMES", "EngineHooks", "EngineSpec", "build_engine", "new_http_client"]
