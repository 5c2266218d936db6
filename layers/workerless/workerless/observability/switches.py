"""Process-wide observability overrides (the pytest plugin's, a function's ``app.py``): metrics
forced on or off, where EMF lines go, X-Ray forced on or off. Unset, each wiring decides: its hooks'
``metrics``, its settings' ``xray_tracing``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workerless._core.settings import Settings


class _Config:
    """Process-wide switches (see :func:`configure`)."""

    metrics: bool | None = None  # None: as each invocation's wiring says (local mode's: off)
    sink: Callable[[str], None] | None = None  # None: stdout (where Lambda's log capture reads EMF)
    #: An explicit X-Ray switch for the process (:func:`configure`); None: each wiring's settings
    #: decide (``WORKERLESS_XRAY_TRACING``, passed to each job's span, not kept here).
    xray: bool | None = None


def configure(
    *,
    metrics: bool | None = None,
    sink: Callable[[str], None] | None = None,
    xray: bool | None = None,
) -> None:
    """Set the observability switches for this process.

    Args:
        metrics: True writes EMF metrics everywhere, False nowhere, None (the default) as each
            invocation's wiring says (all but local mode's: :class:`workerless.wiring.Hooks`).
        sink: where each EMF line goes (default: stdout, which Lambda sends to CloudWatch Logs).
            Tests pass a list's ``append``.
        xray: add a Powertools Tracer (X-Ray) subsegment around each handler run (True), or never
            (False), whatever the settings say; unset, the function's ``WORKERLESS_XRAY_TRACING``
            decides (off by default). Needs the function's ``Tracing: Active`` and ``aws-xray-sdk``
            in the layer.
    """
    _Config.metrics = metrics
    _Config.sink = sink
    if xray is not None:
        _Config.xray = xray


def configure_from_settings(settings: Settings) -> None:
    """Apply the deployment's log level over Lambda's (:func:`~workerless.observability.logs.apply_log_level`).
    Its ``xray_tracing`` is not a process switch: the handler passes its wiring's to each job's span
    (two functions in one process, as in local mode, each keep their own)."""
    from workerless.observability.logs import apply_log_level

    apply_log_level(settings.log_level, settings.lambda_log_level)


def metrics_enabled(wiring_says: bool = True) -> bool:
    """Whether an invocation started now writes metrics: as :func:`configure` forces, else as its
    wiring says (``wiring_says``: its hooks' ``metrics``; local mode's wirings write none, so its runs
    publish nothing a deployment would be billed for; in Lambda every wiring writes them).

    Example:
        >>> metrics_enabled(wiring_says=False)
        False
    """
    if _Config.metrics is not None:
        return _Config.metrics
    return wiring_says
