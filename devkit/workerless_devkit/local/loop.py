"""Recursive-loop tracking for local mode, the way AWS Lambda's recursive loop detection sees it.

Lambda follows a chain Lambda → SQS → Lambda by tracing metadata the SDK adds to each message, and
stops a function that keeps being invoked by its own messages (about 16 rounds) unless the function
sets ``RecursiveLoop: Allow``. Local mode reproduces that without touching any message: botocore
event hooks, registered on every session (like moto's own stubber), see each SendMessage /
SendMessageBatch made while a local invocation is running, and record for each sent MessageId how
deep in its own chain the receiving function would be. The library's code knows nothing of this.

- A send to a queue that triggers the function making it: depth = depth of the triggering message
  + 1, counted for that function.
- Any other send (another function's queue, or outside an invocation): depth 0.

The runtime checks the depth when it delivers a message (see ``runtime.LocalTopology``). On AWS the
depth travels inside the message; here the MessageId is known only once SendMessage returns, and a
long-polling event source can receive the message before that. So before the send, the hook also
announces the depth under the queue and the body's MD5 (``expect_send``), which the runtime uses for
a message whose id it does not know yet; after the send, ids replace the announcement (``sent``).
"""

from __future__ import annotations

import contextvars
import hashlib
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from workerless_devkit import sdk_hooks

if TYPE_CHECKING:
    from workerless_devkit.local.iam.enforce import IamEnforcer

#: Lambda's documented threshold: the chain is stopped after about 16 invocations.
LOOP_LIMIT = 16


class LoopTracker(Protocol):
    """What the hooks need from the runtime that is running the current invocation."""

    def triggers(self, queue_name: str, function_id: str) -> bool: ...

    def record_depth(self, message_id: str, function_id: str, depth: int) -> None: ...

    def expect_send(self, token: int, queue_name: str, body_md5s: list[str], function_id: str, depth: int) -> None: ...

    def sent(self, token: int) -> None: ...

    def note_send(self, queue_name: str, function_id: str, self_send: bool, delay_seconds: int | None) -> None: ...

    def note_receive(self, queue_name: str, function_id: str) -> None: ...

    def accepts_calls(self) -> bool: ...


class TopologyStoppedError(RuntimeError):
    """An invocation outlived its topology's drain and tried an AWS call after the embedded AWS was torn
    down: refused, so it cannot reach a real endpoint with whatever credentials the process has."""


class InvocationAbandonedError(RuntimeError):
    """An invocation outlived its function's Timeout: Lambda stops the function there (freezes or
    kills its sandbox), so nothing it would do afterwards reaches AWS or the engine. A thread cannot
    be killed, so local mode abandons it instead and refuses every later call it makes."""


@dataclass(slots=True)
class ScopeControl:
    """The mutable part of an :class:`InvocationScope`."""

    #: Why it was abandoned when not at its Timeout (:mod:`workerless_devkit.local.memory`: killed).
    ended_by: str = ""
    #: Called before each of its AWS or engine calls (the memory meter's check; None: nothing).
    before_call: Callable[[], None] | None = None
    #: Ends the invocation now as Lambda would (True if it was still running); None outside one.
    kill: Callable[[BaseException], bool] | None = None


@dataclass(frozen=True, slots=True)
class InvocationScope:
    """Set while a local invocation runs: who runs, and how deep in its own chain it is."""

    tracker: LoopTracker
    function_id: str
    depth: int
    #: Set when the invocation reached its Timeout and was abandoned.
    abandoned: threading.Event = field(default_factory=threading.Event)
    timeout: int = 0
    #: The function's role check (workerless_devkit.local.iam); None: the topology does not enforce IAM.
    iam: IamEnforcer | None = None
    #: The function's name and this invocation's request id, as Lambda's context gives them (log lines).
    function_name: str = ""
    request_id: str = ""
    #: What local mode's runtime sets on a running invocation (the scope itself is immutable).
    control: ScopeControl = field(default_factory=lambda: ScopeControl())


_CURRENT: contextvars.ContextVar[InvocationScope | None] = contextvars.ContextVar(
    "workerless_local_invocation", default=None
)
_CONTEXT_KEY = "workerless_local_loop"
_tokens = itertools.count(1)


def current_scope() -> InvocationScope | None:
    return _CURRENT.get()


def enter_scope(scope: InvocationScope) -> contextvars.Token[InvocationScope | None]:
    return _CURRENT.set(scope)


def exit_scope(token: contextvars.Token[InvocationScope | None]) -> None:
    _CURRENT.reset(token)


def queue_name_of(url: str) -> str:
    """The queue name from a queue URL (hosts differ between endpoints; the name does not)."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def _before_send(params: dict[str, Any], context: dict[str, Any], model: Any = None, **_: Any) -> None:
    scope = _CURRENT.get()
    if scope is None or not isinstance(params, dict):
        return
    if scope.iam is not None:
        from workerless_devkit.local.iam.enforce import authorise_call

        if authorise_call(params, model, context) is not None:
            return  # refused by the role: nothing is sent (botocore's more specific hooks run first)
    name = queue_name_of(str(params.get("QueueUrl", "")))
    self_send = scope.tracker.triggers(name, scope.function_id)
    scope.tracker.note_send(name, scope.function_id, self_send, _delay_of(params))
    if self_send:
        token = next(_tokens)
        scope.tracker.expect_send(token, name, _body_md5s(params), scope.function_id, scope.depth + 1)
        context[_CONTEXT_KEY] = (scope.tracker, scope.function_id, scope.depth + 1, token)


def _before_receive(params: dict[str, Any], **_: Any) -> None:
    """A function's own ReceiveMessage (a scheduled drain, not an event source: the runtime's
    receives run outside any invocation): its queue is work for idle detection from then on."""
    scope = _CURRENT.get()
    if scope is None or not isinstance(params, dict):
        return
    scope.tracker.note_receive(queue_name_of(str(params.get("QueueUrl", ""))), scope.function_id)


def body_md5(body: str) -> str:
    """The MD5 of a message body, as SQS reports it (MD5OfBody)."""
    return hashlib.md5(body.encode("utf-8"), usedforsecurity=False).hexdigest()


def _body_md5s(params: dict[str, Any]) -> list[str]:
    entries = params.get("Entries")
    requests = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else [params]
    return [body_md5(r["MessageBody"]) for r in requests if isinstance(r.get("MessageBody"), str)]


def _delay_of(params: dict[str, Any]) -> int | None:
    """The smallest DelaySeconds of a SendMessage(/Batch) request; None where one relies on the queue's."""
    entries = params.get("Entries")
    requests = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else [params]
    delays: list[int] = []
    for request in requests:
        delay = request.get("DelaySeconds")
        if delay is None:
            return None
        delays.append(int(delay))
    return min(delays) if delays else None


def _after_send(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    stash = context.get(_CONTEXT_KEY)
    if stash is None:
        return
    tracker, function_id, depth, token = stash
    if isinstance(parsed, dict):
        message_ids = [parsed.get("MessageId")]
        message_ids += [entry.get("MessageId") for entry in parsed.get("Successful") or [] if isinstance(entry, dict)]
        for message_id in message_ids:
            if isinstance(message_id, str) and message_id:
                tracker.record_depth(message_id, function_id, depth)
    tracker.sent(token)


def _after_send_error(context: dict[str, Any], **_: Any) -> None:
    stash = context.get(_CONTEXT_KEY)
    if stash is not None:
        stash[0].sent(stash[3])


def _guard(**_: Any) -> None:
    scope = _CURRENT.get()
    if scope is not None and not scope.tracker.accepts_calls():
        raise TopologyStoppedError(
            f"{scope.function_id}: the local topology has stopped; AWS calls from this invocation are refused"
        )
    refuse_if_abandoned("AWS")


def refuse_if_abandoned(what: str) -> None:
    """Raise :class:`InvocationAbandonedError` when the current invocation has been abandoned at its
    Timeout (``what``: the kind of call refused, for the message)."""
    scope = _CURRENT.get()
    if scope is None:
        return
    check = scope.control.before_call
    if check is not None and not scope.abandoned.is_set():
        check()
    if scope.abandoned.is_set():
        why = scope.control.ended_by or f"outlived its Timeout ({scope.timeout} s)"
        raise InvocationAbandonedError(
            f"{scope.function_id}: the invocation {why} and was abandoned, as "
            f"Lambda stops it; {what} calls from it are refused"
        )


HOOKS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("before-call", _guard),
    ("before-parameter-build.sqs.SendMessage", _before_send),
    ("before-parameter-build.sqs.SendMessageBatch", _before_send),
    ("before-parameter-build.sqs.ReceiveMessage", _before_receive),
    ("after-call.sqs.SendMessage", _after_send),
    ("after-call.sqs.SendMessageBatch", _after_send),
    ("after-call-error.sqs.SendMessage", _after_send_error),
    ("after-call-error.sqs.SendMessageBatch", _after_send_error),
)


def install_hooks() -> None:
    """Register the hooks for every botocore session created from now on (idempotent).

    They stay registered for the life of the process and do nothing outside a local invocation, so a
    client cached by the library across two local runs keeps being tracked. Clients built before
    this call lack them: the runtime clears the library's client cache after installing.
    """
    from workerless_devkit.local.iam.enforce import HOOKS as IAM_HOOKS

    # The IAM check answers a refused call at before-call, after the stopped-topology guard.
    sdk_hooks.install("local.loop", (*HOOKS, *IAM_HOOKS))
