"""The engine kit: the pieces every engine adapter shares, written once.

- :mod:`~workerless.engines.kit.values` and :mod:`~workerless.engines.kit.urls`: connection values
  and URL rules (https except loopback, no credentials or query in a base URL, the SSRF guard);
- :mod:`~workerless.engines.kit.times`: the one timestamp rule;
- :mod:`~workerless.engines.kit.answers`: JSON object checks and payload sizes;
- :mod:`~workerless.engines.kit.joinurl`: a request's URL joined to its base without a parse each time;
- :mod:`~workerless.engines.kit.tokens`: token caching with early renewal and one shared refresh;
- :mod:`~workerless.engines.kit.resend`: the re-authenticate-once loop;
- :mod:`~workerless.engines.kit.translate`: error translation with one refinement hook per engine;
- :mod:`~workerless.engines.kit.redact`: no secret in a log line or an error.

Each engine package (``engines/sheptra``, ``engines/nodeflow``, ``engines/stagenext``: config,
auth or session, adapter) is built on these; where the engines used to disagree (URL rules,
timestamps, the workflow key) the kit's rule is the one all three follow (docs/assumptions.md,
"One engine kit").
"""

from __future__ import annotations

from workerless.engines.kit.answers import json_object, json_size
from workerless.engines.kit.joinurl import engine_url
from workerless.engines.kit.redact import redact, scrub
from workerless.engines.kit.resend import Recovery, send_recovering
from workerless.engines.kit.times import parse_timestamp, timestamp_or_none
from workerless.engines.kit.tokens import TokenCache, renew_at
from workerless.engines.kit.translate import (
    Translator,
    describe,
    error_for_response,
    error_for_transport,
    parse_problem,
    parse_retry_after,
)
from workerless.engines.kit.urls import check_base_url, is_loopback, refused_answered_url

__all__ = [
    "Recovery",
    "TokenCache",
    "Translator",
    "check_base_url",
    "describe",
    "engine_url",
    "error_for_response",
    "error_for_transport",
    "is_loopback",
    "json_object",
    "json_size",
    "parse_problem",
    "parse_retry_after",
    "parse_timestamp",
    "redact",
    "refused_answered_url",
    "renew_at",
    "scrub",
    "send_recovering",
    "timestamp_or_none",
]
