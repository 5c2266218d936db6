"""Local mode's attachments to the workerless runtime running in this process.

While a topology runs, the pipeline's lifecycle events (:mod:`workerless.observability`) feed the
summary, the engine clients' answers feed :class:`~workerless_devkit.local.engine_health.EngineHealth`,
and an abandoned invocation's engine requests are refused as its AWS calls are
(:func:`~workerless_devkit.local.host.refuse_abandoned_engine_call`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workerless_devkit.local.engine_health import EngineHealth
from workerless_devkit.local.host import refuse_abandoned_engine_call
from workerless_devkit.local.summary import get_summary

if TYPE_CHECKING:
    from workerless.observability import Listener
    from workerless.wiring import Hooks


class LibraryAttachments:
    """The hooks each wiring local mode builds is given: the engine client's, and the lifecycle
    listeners (the summary's, while the topology runs, and the caller's ``listeners``)."""

    def __init__(
        self, engine_health: EngineHealth, on_activated: Callable[[], None], listeners: Sequence[Listener] = ()
    ) -> None:
        self._engine_health = engine_health
        self._on_activated = on_activated
        self._listeners = tuple(listeners)
        self._listening = False

    def hooks(self) -> Hooks:
        """The hooks every wiring local mode builds is given: an abandoned invocation's engine
        requests are refused, each answer tells the engine health it is up, each lifecycle step of
        its invocations goes to the summary and the caller's listeners; they write no metrics."""
        from workerless.wiring import Hooks

        return Hooks(
            request_guards=(refuse_abandoned_engine_call,),
            response_watchers=(self._engine_health.answered_by,),
            lifecycle_listeners=(self._on_lifecycle_event, *self._listeners),
            metrics=False,  # a local invocation publishes no metrics (the summary table is the view)
        )

    def listen(self, on: bool) -> None:
        """Feed the pipeline's lifecycle events into the summary from now on (or no longer): only
        while the topology runs, so a straggler of a stopped run does not count in the next's."""
        self._listening = on

    def _on_lifecycle_event(self, job_type: str, event: str, fields: Mapping[str, Any]) -> None:
        if not self._listening:
            return
        get_summary().record_lifecycle(job_type, event, fields)
        if event == "activated":
            self._on_activated()
