"""The routes the poller polls for: WORKERLESS_ROUTES when it is set, else one SSM parameter per
route under WORKERLESS_ROUTES_PATH, read once per container.

The template gives every function the path only (a function's environment is at most 4 KB, which a
line per route would fill at about 22 routes); the route loop gives each route an SSM parameter
whose value is the route's JSON. Only the poller needs the routes, and only once per container:
Parameter Store's standard throughput (40 calls a second per account and region) is shared with
everything else the account does. The heartbeat deletes an owed report's job message in the queue
the handler noted with its receipt, and nothing else reads routes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping

from pydantic import ValidationError

from workerless.errors import ConfigurationError
from workerless.settings import Route, Settings, get_settings

_routed: dict[str, Settings] = {}
_routed_lock = threading.Lock()


def clear_routes() -> None:
    """Forget the routes read (tests, local mode reconfiguring; :func:`workerless.settings.clear_settings`)."""
    with _routed_lock:
        _routed.clear()


def get_routed_settings(*, deadline: float) -> Settings:
    """The settings with their routes: WORKERLESS_ROUTES when it is set (an explicit override wins),
    else the parameters under WORKERLESS_ROUTES_PATH, read once per container (the first call, the
    poller's first poll) and kept. ``deadline`` (a ``time.monotonic()`` value) bounds the read and
    its retries. A read that fails is not kept: the next call tries again.

    Raises ConfigurationError when the path holds no route or a value is not a route (naming the
    parameter), or the read's ParameterStoreError once its retries are spent.
    """
    settings = get_settings()
    if settings.routes or not settings.routes_path:
        return settings
    with _routed_lock:
        cached = _routed.get(settings.routes_path)
        if cached is not None:
            return cached
        from workerless.aws.parameters import read_path

        routed = with_route_parameters(settings, read_path(settings.routes_path, deadline=deadline))
        _routed[settings.routes_path] = routed
        return routed


def with_route_parameters(settings: Settings, parameters: Mapping[str, str]) -> Settings:
    """``settings`` with the routes of ``parameters`` ({name: JSON value}, one route each, from
    WORKERLESS_ROUTES_PATH). Each value is checked as WORKERLESS_ROUTES' items are; a bad one is a
    ConfigurationError naming its parameter (``key``)."""
    path = settings.routes_path or ""
    if not parameters:
        raise ConfigurationError(
            f"WORKERLESS_ROUTES_PATH {path!r} holds no parameter: no route to poll for "
            "(the stack's route loop creates one per job type)",
            key="WORKERLESS_ROUTES_PATH",
        )
    routes: list[Route] = []
    for name, text in parameters.items():
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"route parameter {name} is not JSON: {exc}", key=name) from None
        try:
            route = Route.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ConfigurationError(
                f"route parameter {name} is not a route{' at ' + where if where else ''}: {first['msg']}", key=name
            ) from None
        if name.rsplit("/", 1)[-1] != route.type:
            raise ConfigurationError(
                f"route parameter {name} is named for another job type than its route's {route.type!r}", key=name
            )
        routes.append(route)
    try:
        return settings.model_validate({**settings.model_dump(by_alias=False), "routes": routes})
    except ValidationError as exc:
        raise ConfigurationError(
            f"the routes under WORKERLESS_ROUTES_PATH {path!r} are invalid: {exc.errors()[0]['msg']}",
            key="WORKERLESS_ROUTES_PATH",
        ) from None
