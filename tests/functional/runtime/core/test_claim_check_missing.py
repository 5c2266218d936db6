"""A claim-check object that is gone reads as gone, and a refused read as a refusal (issue 26, 2.11).

Without s3:ListBucket, S3 answers a GetObject of a missing key 403 AccessDenied, not 404 NoSuchKey
(the GetObject API reference), so a result expired with the bucket's lifecycle and a role missing a
grant looked the same. Each function that reads claim-check objects may now list exactly the
prefixes it reads (``ClaimCheckListing``, held by ``s3:prefix``): a missing object is NoSuchKey
(:class:`PayloadGoneError`, final, naming the key), and AccessDenied is left to real permission
faults (a :class:`PayloadError` saying so). Local mode answers as AWS does: 404 only to a role that
may list the key, 403 to any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from workerless._core.claimcheck import PayloadRef, digest
from workerless.aws.payloads import Payloads
from workerless.errors import PayloadError, PayloadGoneError
from workerless_devkit.emulators import RunningEmulator
from workerless_devkit.local import LocalTopology

from tests.functional.devkit.local.test_iam_local import template_copy, without_statement
from tests.functional.pipeline import TEMPLATE, job_timings, route_timings

GONE = "results/charge-payment/0123456789abcdef0123456789abcdef"


@pytest.fixture
def env_file(sheptra_emulator: RunningEmulator) -> Path:
    assert sheptra_emulator.env_file is not None
    return sheptra_emulator.env_file


def topology(path: Path, env_file: Path) -> LocalTopology:
    return LocalTopology(
        path, env_file, parameters=job_timings(10), route_settings=route_timings(10, path), schedule_seconds=3600
    )


def error_of(call: Any) -> tuple[str, int, str]:
    with pytest.raises(ClientError) as caught:
        call()
    response = caught.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Message"]


def test_a_missing_object_is_no_such_key_to_every_reader_of_its_prefix(env_file: Path) -> None:
    """GIVEN template.yaml under local mode's IAM check WHEN each function that reads claim-check
    objects reads a key of its prefixes that does not exist THEN S3 answers 404 NoSuchKey (the
    adapter: PayloadGoneError naming the key, final), and the listing grant is recorded as used; a
    key outside a function's prefixes stays AccessDenied."""
    with topology(TEMPLATE, env_file) as topo:
        s3, bucket = topo.client("s3"), topo.template.buckets[0].name
        s3.put_object(Bucket=bucket, Key="results/charge-payment/there", Body=b"{}")
        readers = {
            "DeadLetterFunction": GONE,
            "HeartbeatFunction": GONE,
            "chargepaymentFunction": "jobs/charge-payment/0123456789abcdef0123456789abcdef",
        }
        for function, key in readers.items():
            with topo.as_function(function):
                assert error_of(lambda key=key: s3.get_object(Bucket=bucket, Key=key))[:2] == ("NoSuchKey", 404)
                ref = PayloadRef(bucket=bucket, key=key, size=2, sha256=digest(b"{}"))
                with pytest.raises(PayloadGoneError, match=f"S3 object {key} is gone") as gone:
                    Payloads(bucket, client=s3).get(ref)
                assert gone.value.code == "NoSuchKey" and not gone.value.retryable
                assert s3.get_object(Bucket=bucket, Key="results/charge-payment/there")["Body"].read() == b"{}"
        with topo.as_function("chargepaymentFunction"):
            # Another route's prefix: neither readable nor listable, so 403 whether or not it exists.
            code, status, _ = error_of(lambda: s3.get_object(Bucket=bucket, Key="results/send-receipt/x"))
            assert (code, status) == ("AccessDenied", 403)
        assert topo.iam is not None
        listed = {(g.function, g.action) for g in topo.iam.grants if g.action == "s3:ListBucket"}
        assert listed == {(f, "s3:ListBucket") for f in readers}
        assert [(r.function, r.action) for r in topo.iam.refusals] == [("chargepaymentFunction", "s3:GetObject")]


def test_without_the_listing_grant_a_missing_object_is_access_denied_and_read_as_a_refusal(
    tmp_path: Path, env_file: Path
) -> None:
    """GIVEN template.yaml without the dead-letter role's ClaimCheckListing statement WHEN it reads a
    missing object THEN local mode answers 403 AccessDenied naming s3:ListBucket, as S3 does, and the
    adapter raises a PayloadError naming a configuration fault, never PayloadGoneError (the dead
    letter is then kept, not failed as if its result had expired); an existing object still reads."""
    text = without_statement(TEMPLATE.read_text(encoding="utf-8"), "DeadLetterFunctionRole", "ClaimCheckListing")
    path = template_copy(tmp_path, text)
    with topology(path, env_file) as topo:
        s3, bucket = topo.client("s3"), topo.template.buckets[0].name
        s3.put_object(Bucket=bucket, Key="results/charge-payment/there", Body=b"{}")
        with topo.as_function("DeadLetterFunction"):
            code, status, message = error_of(lambda: s3.get_object(Bucket=bucket, Key=GONE))
            assert s3.get_object(Bucket=bucket, Key="results/charge-payment/there")["Body"].read() == b"{}"
            ref = PayloadRef(bucket=bucket, key=GONE, size=2, sha256=digest(b"{}"))
            with pytest.raises(PayloadError) as refused:
                Payloads(bucket, client=s3).get(ref)
        with topo.as_function("HeartbeatFunction"):  # its own grant is still there
            assert error_of(lambda: s3.get_object(Bucket=bucket, Key=GONE))[:2] == ("NoSuchKey", 404)
        assert topo.iam is not None
        assert [(r.function, r.action) for r in topo.iam.refusals] == [("DeadLetterFunction", "s3:ListBucket")] * 2
    assert (code, status) == ("AccessDenied", 403)
    assert f"not authorized to perform: s3:ListBucket on resource: arn:aws:s3:::{bucket} " in message
    assert not isinstance(refused.value, PayloadGoneError)
    assert refused.value.code == "AccessDenied" and not refused.value.retryable
    assert "configuration fault" in str(refused.value) and GONE in str(refused.value)
