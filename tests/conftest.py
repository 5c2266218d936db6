"""Shared test configuration: no test reaches a real AWS account or any non-loopback host."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _isolated_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and a fixed region for every test, so nothing can reach a real account."""
    for key in list(os.environ):
        if key.startswith(("WORKERLESS_", "SHEPTRA_", "NF_", "STAGENEXT_")) or key in ("AWS_PROFILE",):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("POWERTOOLS_DEV", "false")


@pytest.fixture
def container() -> Iterator[None]:
    """The Lambda container's wiring (:mod:`workerless.runtime`) started over before the test and
    closed after it: for the tests that run the entry points' default path (no ``wiring=``: the
    container's, built on first use, as in Lambda). Every other test builds and passes its own
    :class:`~workerless.wiring.Wiring` and leaves the container alone. Local mode starts the
    container over itself (at start and at stop), as Lambda starts a new one."""
    from workerless import runtime

    runtime.reset()
    yield
    runtime.reset()
