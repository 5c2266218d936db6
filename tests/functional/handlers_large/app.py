"""A test-only send-receipt handler for the claim-check tests (tests/functional/runtime/core/test_claim_check.py):
it answers with the size and SHA-256 of the variables it was given, so a test can tell that a large
input arrived whole, and returns ``returnBytes`` characters of incompressible text when asked, so a
result too large for a job record goes through the claim check. template.yaml's send-receipt function
points here only in the tests' template variant; the example handler is untouched."""

import base64
import hashlib
import json
import random
from typing import Any

from workerless import Job, job_handler


def fingerprint(variables: dict[str, Any]) -> dict[str, Any]:
    """What the handler answers for ``variables`` (the test computes the same)."""
    canonical = json.dumps(variables, sort_keys=True, separators=(",", ":")).encode()
    return {"inputBytes": len(canonical), "inputSha256": hashlib.sha256(canonical).hexdigest()}


def blob(size: int, seed: str) -> str:
    """``size`` characters of base64 of seeded random bytes: zlib gains about a quarter on it, so a
    900 KB blob stays far over DynamoDB's 400 KB item compressed."""
    data = random.Random(seed).randbytes(size)
    return base64.b64encode(data).decode()[:size]


@job_handler("send-receipt")
def handler(job: Job) -> dict[str, Any]:
    answer = {"receiptSent": True, **fingerprint(job.variables)}
    size = job.variables.get("returnBytes")
    if isinstance(size, int) and size > 0:
        answer["blob"] = blob(size, job.id)
    return answer
