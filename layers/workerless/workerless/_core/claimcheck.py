"""The claim check: a job message or a stored outcome too large for its queue or its table is written
to an S3 object, and the message or the job record carries a pointer (:class:`PayloadRef`) instead.

Where it applies, and the limit it offloads past (the resource's real limit less a margin)::

    job message (poller → handler)   the route queue's MaximumMessageSize (read from the queue; the
                                     template sets 1 MiB) less SQS_MARGIN_BYTES: the job's variables
                                     go to ``jobs/<job type>/``; the rest of the message (the job's
                                     reference, lease, retries) stays inline, so the heartbeat and the
                                     dead-letter function never need the object
    stored outcome (handler → table) DynamoDB's 400 KB item (409,600 bytes, attribute names
                                     included) less DYNAMODB_MARGIN_BYTES for the record's other
                                     attributes: the (compressed) outcome goes to ``results/<job type>/``

Whatever the route, nothing larger than WORKERLESS_MAX_PAYLOAD_BYTES is carried: a function must hold
the payload in memory to run or report it. Such a job is failed at the engine with its size and that
limit in the reason (it would come back just as large). The limit and the memory are one decision
(:func:`payload_limit`): by default the limit is what the function's MemorySize holds, and a limit set
higher than that is refused (settings), so no invocation is killed for holding a payload it accepted.

Objects are never deleted by the pipeline: the bucket's lifecycle rule expires them after the job
record's TTL, so a redelivery or a re-report always finds the object its message or record names.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workerless.errors import MessageFormatError

#: Kept back from a queue's MaximumMessageSize: SQS counts a message's attributes with its body, and
#: a message written right at the limit leaves nothing for one (the pipeline sends none today).
SQS_MARGIN_BYTES = 8 * 1024
#: DynamoDB's item size limit: 400 KB, attribute names and values together.
DYNAMODB_ITEM_BYTES = 400 * 1024
#: Kept back from the item limit for the record's other attributes, some written after the outcome
#: (key, status, owner, claim times, lease fingerprint, an SQS receipt handle of up to 1,024
#: characters, report notes): a few hundred bytes in practice, 16 KiB leaves room for long job ids.
DYNAMODB_MARGIN_BYTES = 16 * 1024
#: The largest outcome attribute kept in the job record itself (name included).
OUTCOME_INLINE_BYTES = DYNAMODB_ITEM_BYTES - DYNAMODB_MARGIN_BYTES
#: What a function keeps for itself (MB): its runtime, modules and clients (73 MB measured under
#: CPython 3.12: every adapter and five boto3 clients imported and built) and a margin.
RUNTIME_MB = 96
#: Memory per payload byte while a function holds a payload at its worst: the handler reads the object
#: (1x), decodes it to text (1x) and to Python objects. Measured under CPython 3.12, tracemalloc: one
#: string 2x, a list of small integers 5.3x, small records 6.8x, a flat object of small fields 8.1x,
#: short strings 11.3x (an array of empty objects, 25x, is not covered); and the process's RSS growth
#: while a handler reads, decodes and runs a job (the allocator's own overhead on top): small records
#: 7x, short strings 12x, a flat object of small fields 15x. The poller never decodes a large job's
#: variables (:mod:`workerless.engines.kit.skim`), so this is the handler's figure.
HOLD_FACTOR = 16
#: The template's MemorySize for every function (Globals, PollerMemorySize, a route's default), and
#: what is assumed where Lambda does not say (local mode, tests).
DEFAULT_MEMORY_MB = 256
MIB = 1024 * 1024


def payload_limit(memory_mb: int) -> int:
    """The largest payload (bytes, whole MiB, at least 1 MiB) a function of ``memory_mb`` MB holds:
    WORKERLESS_MAX_PAYLOAD_BYTES' default.

    Example:
        >>> payload_limit(256) // MIB, payload_limit(128) // MIB, payload_limit(1024) // MIB
        (10, 2, 58)
    """
    return max(MIB, (memory_mb - RUNTIME_MB) * MIB // HOLD_FACTOR // MIB * MIB)


def memory_needed(limit: int) -> int:
    """The MemorySize (MB) a function needs to hold a payload of ``limit`` bytes.

    Example:
        >>> memory_needed(payload_limit(256)) <= 256 < memory_needed(payload_limit(256) + MIB)
        True
    """
    return RUNTIME_MB + math.ceil(limit * HOLD_FACTOR / MIB)


def answer_budget(memory_mb: int) -> int:
    """The most bytes of job variables the poller keeps from one engine answer (as text, undecoded):
    half of what the runtime leaves; the other half is for the answer's decoded skeleton (at most
    SKELETON_BYTES of fields) and one job's message or claim-check upload. At least one job at the
    limit fits; a job past the budget is handed back and comes in a later poll."""
    return max(payload_limit(memory_mb), (memory_mb - RUNTIME_MB) * MIB // 2)


#: Key prefixes in the payload bucket: each function is granted only the ones it reads or writes.
JOBS_PREFIX = "jobs"
RESULTS_PREFIX = "results"


def message_threshold(max_message_bytes: int) -> int:
    """The largest job message sent inline to a queue whose MaximumMessageSize is ``max_message_bytes``."""
    return max(1024, max_message_bytes - SQS_MARGIN_BYTES)


def object_key(prefix: str, job_type: str) -> str:
    """A fresh object key under ``prefix/job_type/``: never reused, so a retried write cannot replace
    an object an earlier message or record already points at."""
    return f"{prefix}/{job_type}/{uuid.uuid4().hex}"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class PayloadRef:
    """Where a payload was put: bucket, key, its size in bytes and SHA-256 (checked when read)."""

    bucket: str
    key: str
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "key": self.key, "bytes": self.size, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: object, *, field: str = "payload") -> PayloadRef:
        if not isinstance(data, Mapping):
            raise MessageFormatError(f"field {field!r} must be an object", field=field)
        bucket, key, size, sha = data.get("bucket"), data.get("key"), data.get("bytes"), data.get("sha256")
        if not (isinstance(bucket, str) and bucket and isinstance(key, str) and key and isinstance(sha, str)):
            raise MessageFormatError(f"field {field!r} needs bucket, key and sha256 strings", field=field)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise MessageFormatError(f"field {field!r} needs a byte count", field=field)
        return cls(bucket=bucket, key=key, size=size, sha256=sha)


def too_large_reason(what: str, size: int, limit: int) -> str:
    """The reason a payload workerless cannot carry is refused with: its size and the limit."""
    return (
        f"{what} is {size} bytes; workerless carries at most {limit} bytes (WORKERLESS_MAX_PAYLOAD_BYTES, "
        "through its S3 claim check): it would come back just as large, so it is not retried"
    )
