"""Local mode makes moto's conditional writes atomic, as DynamoDB's are: one claim, one winner."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from workerless.aws.dynamo import JobStore
from workerless_devkit.local.provision import serialise_moto_dynamodb_writes


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads switch every microsecond: a check-then-write race shows up within a few hundred tries."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_racing_claims_have_exactly_one_winner(fast_switching: None) -> None:
    serialise_moto_dynamodb_writes()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="jobs",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        store = JobStore("jobs", ttl_seconds=3600, client=client)
        doubles = 0
        for i in range(300):
            wins: list[str] = []
            barrier = threading.Barrier(2)

            def claim(
                owner: str, key: str = f"k{i}", wins: list[str] = wins, barrier: threading.Barrier = barrier
            ) -> None:
                barrier.wait()
                if store.claim(key, owner=owner, claim_seconds=60, job_type="t")[0]:
                    wins.append(owner)

            threads = [threading.Thread(target=claim, args=(owner,)) for owner in ("a", "b")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=10)
            assert wins, "one of two racing claims must win"
            doubles += len(wins) > 1
        assert doubles == 0
