"""Poller shards: routes polled by separate tick chains, each with its own poller lock.

One poller polls at a time (:mod:`workerless._poller.poller_lock`), so one lock bounds a deployment's
dispatch rate at what one poller's cycle does. A route names its shard (template.yaml
``Mappings.Routes``, ``PollerShard``; the route parameter's ``shard``); each shard is polled by its
own tick chain under its own lock item, which also holds its intent batches and what it dispatched,
so shards never contend and the rate grows with their number. Every route of a shard is polled by
that shard alone (the lock's MaxInFlight bound stays a bound). The main shard is ``""``: its keys and
messages are today's, so a deployment without shards is unchanged.

Example:

    >>> from workerless._core.settings import Route, Settings
    >>> settings = Settings(routes=(Route(type="a", queue="q-a"), Route(type="b", queue="q-b", shard="s1")))
    >>> shards_of(settings)
    ['', 's1']
    >>> [r.type for r in for_shard(settings, "s1").routes]
    ['b']
    >>> state_key("poller-lock", "s1"), state_key("poller-lock", "")
    ('poller-lock#s1', 'poller-lock')
    >>> shard_of({"chain": "c", "seq": 1, "shard": "s1"}), shard_of({"chain": "c", "seq": 1})
    ('s1', '')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workerless._core.settings import Settings

#: The shard of every route that names none.
MAIN = ""


def shards_of(settings: Settings) -> list[str]:
    """The shards the routes name, sorted (the main one first); ``[MAIN]`` without routes."""
    return sorted({route.shard for route in settings.routes} or {MAIN})


def for_shard(settings: Settings, shard: str) -> Settings:
    """``settings`` with only the routes of ``shard`` (what that shard's poller polls)."""
    return settings.model_copy(update={"routes": tuple(r for r in settings.routes if r.shard == shard)})


def state_key(base: str, shard: str) -> str:
    """A shard's own shared-state key (its lock, its tick chain); the main shard keeps ``base``."""
    return f"{base}#{shard}" if shard else base


def shard_of(body: Mapping[str, Any]) -> str:
    """The shard a ticker message (a tick or a relay) is for; the main shard when it names none."""
    shard = body.get("shard")
    return shard if isinstance(shard, str) else MAIN


def tagged(body: dict[str, Any], shard: str) -> dict[str, Any]:
    """``body`` naming ``shard`` (the main shard's messages stay as they were)."""
    return {**body, "shard": shard} if shard else body
