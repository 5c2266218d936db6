"""Shared test configuration: no test reaches a real AWS account or any non-loopback host."""

from __future__ import annotations

import os

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
    from workerless import runtime

    runtime.reset()
    yield
    runtime.reset()
