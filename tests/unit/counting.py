"""A MemoryState that counts its calls, for tests that price the poller's DynamoDB traffic."""

from __future__ import annotations

from typing import Any

from workerless.engines.base import MemoryState


class CountingState(MemoryState):
    """MemoryState that counts its calls: ``get`` is a GetItem, ``put`` a conditional PutItem."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.writes = 0

    def get(self, key: str) -> dict[str, Any] | None:
        self.reads += 1
        return super().get(key)

    def put(self, key: str, value: dict[str, Any], *, expected_version: int | None) -> bool:
        self.writes += 1
        return super().put(key, value, expected_version=expected_version)
