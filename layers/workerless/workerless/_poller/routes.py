"""The routes the poller polls for: WORKERLESS_ROUTES when it is set, else one SSM parameter per
route under WORKERLESS_ROUTES_PATH, read at the container's first poll (and again every
WORKERLESS_ROUTES_REFRESH_SECONDS, so a stack update's routes reach warm containers).

The template gives every function the path only (a function's environment is at most 4 KB, which a
line per route would fill at about 22 routes); the route loop gives each route an SSM parameter
whose value is the route's JSON. Only the poller needs the routes, at its cold start and then every
few minutes: Parameter Store's standard throughput (40 calls a second per account and region) is
shared with everything else the account does, and at most two poller containers run at once. The
heartbeat deletes an owed report's job message in the queue the handler noted with its receipt,
and nothing else reads routes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from workerless._core.settings import Route, Settings
from workerless.errors import ConfigurationError, WorkerlessError

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient


class RouteReader:
    """The routes one wiring polls for, and when it read them (a wiring owns one: nothing is kept
    between wirings). ``read`` reads a path's parameters (:func:`workerless.aws.parameters.read_path`
    unless given: a test's fake)."""

    def __init__(self, read: Callable[..., Mapping[str, str]] | None = None) -> None:
        self._read = read
        #: Per path: the settings with its routes, and when (``clock()``) they were read.
        self._routed: dict[str, tuple[Settings, float]] = {}
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Forget the routes read: the next poll reads them again."""
        with self._lock:
            self._routed.clear()

    def routed(
        self,
        settings: Settings,
        *,
        deadline: float,
        clock: Callable[[], float] = time.monotonic,
        client: SSMClient | None = None,
    ) -> Settings:
        """``settings`` with their routes: WORKERLESS_ROUTES when it is set (an explicit override wins),
        else the parameters under WORKERLESS_ROUTES_PATH, read at the container's first poll and kept,
        then read again once WORKERLESS_ROUTES_REFRESH_SECONDS have passed (0: never again). ``deadline``
        (a ``time.monotonic()`` value) bounds the read and its retries; ``client``: the SSM client.

        Why again at all: a stack update that adds a route or changes one (its MaxInFlight in
        Mappings.Routes) changes its parameter, not the poller's configuration, so Lambda keeps the warm
        containers that read the old routes (for hours). A refresh that fails keeps the routes it has
        (logged) and is tried again after the same interval; a first read that fails raises, and is not
        kept (the next poll tries again): ConfigurationError when the path holds no route or a value is
        not a route (naming the parameter), or the read's ParameterStoreError once its retries are spent.
        """
        if settings.routes or not settings.routes_path:
            return settings
        path = settings.routes_path
        with self._lock:
            cached = self._routed.get(path)
            now = clock()
            if cached is not None and (
                not settings.routes_refresh_seconds or now - cached[1] < settings.routes_refresh_seconds
            ):
                return cached[0]
            from workerless.aws.parameters import read_path

            # Looked up at each read: a test replaces workerless.aws.parameters.read_path.
            read = self._read if self._read is not None else read_path

            try:
                routed = with_route_parameters(settings, read(path, deadline=deadline, client=client))
            except WorkerlessError as exc:
                if cached is None:
                    raise
                from workerless.observability import logger

                logger.warning(
                    "could not read the routes again; polling the ones read before",
                    extra={"routes_path": path, "error": str(exc), "routes": [r.type for r in cached[0].routes]},
                )
                self._routed[path] = (cached[0], now)
                return cached[0]
            self._routed[path] = (routed, now)
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
        # The parameter is named for its route (template.yaml's route name: letters and digits), not
        # for the job type it carries; two routes of one type are refused with the settings below.
        routes.append(route)
    try:
        return settings.model_validate({**settings.model_dump(by_alias=False), "routes": routes})
    except ValidationError as exc:
        raise ConfigurationError(
            f"the routes under WORKERLESS_ROUTES_PATH {path!r} are invalid: {exc.errors()[0]['msg']}",
            key="WORKERLESS_ROUTES_PATH",
        ) from None
