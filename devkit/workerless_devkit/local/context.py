"""A stand-in for the Lambda context object, one per local invocation."""

from __future__ import annotations

import time
import uuid
from typing import Any

from workerless_devkit.local.template import FunctionSpec


class LocalLambdaContext:
    """What Lambda passes as ``context``: names, memory, request id and the remaining time.

    ``get_remaining_time_in_millis()`` counts down from the function's Timeout, so code that budgets
    its work from it (the handler wrapper's claim expiry, the poller's budget) behaves as in Lambda.
    """

    function_version = "$LATEST"
    identity: Any = None
    client_context: Any = None

    def __init__(self, spec: FunctionSpec, *, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._deadline = clock() + spec.timeout
        self.function_name = spec.function_name
        self.memory_limit_in_mb = spec.memory_size
        self.invoked_function_arn = spec.arn
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{spec.function_name}"
        self.log_stream_name = f"local/[$LATEST]{self.aws_request_id.replace('-', '')}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - self._clock()) * 1000))

    def __repr__(self) -> str:
        return f"LocalLambdaContext(function_name={self.function_name!r}, aws_request_id={self.aws_request_id!r})"
