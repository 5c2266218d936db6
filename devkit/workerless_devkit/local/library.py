"""Local mode's attachments to the workerless runtime running in this process.

While a topology runs, the pipeline's lifecycle events (:mod:`workerless.observability`) feed the
summary, the engine clients' answers feed :class:`~workerless_devkit.local.engine_health.EngineHealth`,
and an abandoned invocation's engine requests are refused as its AWS calls are
(:func:`~workerless_devkit.local.host.refuse_abandoned_engine_call`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from workerless_devkit.local.engine_health import EngineHealth
from workerless_devkit.local.host import refuse_abandoned_engine_call
from workerless_devkit.local.summary import get_summary

if TYPE_CHECKING:
    from workerless.engines import EngineHooks


class LibraryAttachments:
    """The engine client's hooks (each wiring's) and the lifecycle listener (once running)."""

    def __init__(self, engine_health: EngineHealth, on_activated: Callable[[], None]) -> None:
        self._engine_health = engine_health
        self._on_activated = on_activated

    def engine_hooks(self) -> EngineHooks:
        """The hooks every wiring local mode builds passes to its engine client: an abandoned
        invocation's requests are refused, each answer tells the engine health it is up."""
        from workerless.engines import EngineHooks

        return EngineHooks(
            request_guards=(refuse_abandoned_engine_call,), response_watchers=(self._engine_health.answered_by,)
        )

    def listen(self, on: bool) -> None:
        """Feed the pipeline's lifecycle events (workerless.observability) into the summary."""
        from workerless import observability

        if on:
            observability.add_listener(self._on_lifecycle_event)
        else:
            observability.remove_listener(self._on_lifecycle_event)

    def _on_lifecycle_event(self, job_type: str, event: str, fields: Mapping[str, Any]) -> None:
        get_summary().record_lifecycle(job_type, event, fields)
        if event == "activated":
            self._on_activated()
