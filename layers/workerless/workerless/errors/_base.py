"""The root of workerless's own errors and the one a misconfiguration raises (see
:mod:`workerless.errors`)."""

from __future__ import annotations


class WorkerlessError(Exception):
    """Base of every error workerless raises on purpose. ``retryable``: whether the same call may
    succeed later (the one flag :mod:`workerless._core.retry` reads)."""

    retryable: bool = False


class ConfigurationError(WorkerlessError):
    """A setting, secret or engine address is missing or malformed. Never retried.

    Example:
        >>> raise ConfigurationError("SHEPTRA_API_URL is required in config mode", key="SHEPTRA_API_URL")
        Traceback (most recent call last):
        workerless.errors.ConfigurationError: SHEPTRA_API_URL is required in config mode
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key
