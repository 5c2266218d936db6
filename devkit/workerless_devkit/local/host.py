"""The function host: loads each function's handler and runs its invocations as Lambda does.

- :func:`load_handler` imports a function's ``Handler`` from its CodeUri directory, as Lambda's
  bootstrap does;
- :meth:`FunctionHost.invoke` holds every invocation to Lambda's concurrency (the account's limit,
  the template's reserved concurrency: :mod:`workerless_devkit.local.concurrency`), runs it on a
  thread of its own and stops waiting at its function's Timeout ("Task timed out"): the abandoned
  code's later AWS and engine calls are refused (:mod:`workerless_devkit.local.loop`), and, when a
  memory meter is given, kills an invocation whose memory passes its MemorySize
  (:mod:`workerless_devkit.local.memory`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import logging
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from workerless.errors import ConfigurationError

from workerless_devkit.local import loop
from workerless_devkit.local.concurrency import Concurrency, Throttled
from workerless_devkit.local.context import LocalLambdaContext
from workerless_devkit.local.iam.enforce import IamEnforcer
from workerless_devkit.local.idle import IdleTracker
from workerless_devkit.local.memory import MemoryMeter, OutOfMemory
from workerless_devkit.local.polls import PollWatch
from workerless_devkit.local.template import FunctionSpec

log = logging.getLogger("workerless_devkit.local")

Handler = Callable[[Any, Any], Any]


class FunctionLoadError(ConfigurationError):
    """A function's handler cannot be imported."""


class ThreadSet:
    """The topology's threads: its event sources' and schedules' (joined at stop), and the running
    batches and asynchronous retries (waited for, bounded, at stop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sources: list[threading.Thread] = []
        self._batches: set[threading.Thread] = set()

    def spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self.sources.append(thread)
        thread.start()

    def start_batch(self, thread: threading.Thread) -> None:
        with self._lock:
            self._batches.add(thread)
        thread.start()

    def batch_done(self) -> None:
        """Called by a batch's thread as it ends."""
        with self._lock:
            self._batches.discard(threading.current_thread())

    def batches(self) -> list[threading.Thread]:
        with self._lock:
            return list(self._batches)


class FunctionHost:
    """The loaded handlers and the invocations of them."""

    def __init__(self, tracker: loop.LoopTracker, idle: IdleTracker, concurrency: Concurrency) -> None:
        self._tracker = tracker
        self._idle = idle
        self.concurrency = concurrency
        self.handlers: dict[str, Handler] = {}
        self.iam: IamEnforcer | None = None
        self.memory: MemoryMeter | None = None
        #: Polls in progress (local/polls.py): a poller invocation counts as one until it ends.
        self.polls: PollWatch | None = None
        self._lock = threading.Lock()
        self._invocations: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._running = 0

    @property
    def invocations(self) -> dict[str, int]:
        with self._lock:
            return dict(self._invocations)

    @property
    def errors(self) -> dict[str, int]:
        with self._lock:
            return dict(self._errors)

    def load(self, spec: FunctionSpec) -> None:
        self.handlers[spec.logical_id] = load_handler(spec)

    def invoke(
        self, spec: FunctionSpec, event: Any, *, depth: int, work: bool, inject_throttle: bool = False
    ) -> tuple[bool, Any]:
        """Run one invocation if Lambda's concurrency admits it (else it is throttled: (False,
        :class:`Throttled`), its code never ran); see :meth:`run`. ``inject_throttle``: throttle it
        although concurrency is left (a fault)."""
        function_id = spec.logical_id
        if inject_throttle:
            self.concurrency.throttled(function_id)
            throttled = Throttled(function_id, "injected: the account's unreserved concurrency is in use")
        elif not self.concurrency.acquire(function_id):
            reserved = self.concurrency.reserved.get(function_id)
            why = (
                f"its reserved concurrency ({reserved}) is in use"
                if reserved is not None
                else f"the account's unreserved concurrency ({self.concurrency.unreserved}) is in use"
            )
            throttled = Throttled(function_id, why)
        else:
            try:
                return self.run(spec, event, depth=depth, work=work)
            finally:
                self.concurrency.release(function_id)
        log.warning("%s: invocation throttled: %s", function_id, throttled.why)
        return False, throttled

    def run(self, spec: FunctionSpec, event: Any, *, depth: int, work: bool) -> tuple[bool, Any]:
        """Run one invocation and wait for it at most the function's Timeout, as Lambda does.

        The handler runs on its own thread. At the Timeout the caller stops waiting: the invocation
        failed ("Task timed out"), its concurrency slot is free, and (for an SQS batch) nothing is
        deleted, so its messages return after the visibility timeout. Lambda would have stopped the
        function there; a thread cannot be stopped, so it is abandoned: every AWS or engine call it
        makes from then on is refused (:class:`~workerless_devkit.local.loop.InvocationAbandonedError`) and
        whatever it returns is discarded.
        """
        handler = self.handlers[spec.logical_id]
        context = LocalLambdaContext(spec)
        with self._lock:
            self._invocations[spec.logical_id] += 1
            self._running += 1
        scope = loop.InvocationScope(
            self._tracker,
            spec.logical_id,
            depth,
            timeout=spec.timeout,
            iam=self.iam,
            function_name=spec.function_name,
            request_id=context.aws_request_id,
        )
        self._idle.begin(id(scope), work=work)
        run = InvocationRun(handler, event, context, scope)
        scope.control.kill = run.kill
        watch = None
        if self.memory is not None:
            meter = self.memory
            watch = meter.watch(spec.logical_id, spec.memory_size, run.kill)
            scope.control.before_call = functools.partial(meter.check, watch)
        thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(run,),
            name=f"{spec.logical_id}:{context.aws_request_id[:8]}",
            daemon=True,
        )
        finished = False
        # A poller invocation is a poll in progress until it ends (its cold start too): see polls.py.
        polls = self.polls if spec.code_dir.name == "poller" else None
        polling = polls.invocation() if polls is not None else contextlib.nullcontext()
        try:
            with polling:
                thread.start()
                finished = run.wait(spec.timeout)
            if watch is not None and self.memory is not None:
                self.memory.unwatch(watch)
        finally:
            with self._lock:
                self._running -= 1
            self._idle.end(id(scope), work=work)
        if not finished:
            # Lambda's own words for it.
            result: BaseException | Any
            ok, result = False, TimeoutError(f"Task timed out after {spec.timeout:.2f} seconds")
            log.warning("%s: task timed out after %d s (Timeout): abandoned", spec.logical_id, spec.timeout)
        else:
            ok, result = run.ok, run.result
            if watch is not None and watch.killed is not None:
                # Its memory passed MemorySize just before it returned: Lambda had killed it by then.
                ok, result = False, watch.killed
            if isinstance(result, OutOfMemory):
                log.warning("%s: %s", spec.logical_id, result)
            elif not ok:
                log.warning(
                    "%s failed: %s: %s",
                    spec.logical_id,
                    type(result).__name__,
                    result,
                    exc_info=result if log.isEnabledFor(logging.DEBUG) else None,
                )
        if not ok:
            with self._lock:
                self._errors[spec.logical_id] += 1
        return ok, result


class InvocationRun:
    """One invocation's call of its handler, run on a thread of its own so that the caller can stop
    waiting at the function's Timeout (:meth:`wait`); a result that comes after that is discarded."""

    def __init__(self, handler: Handler, event: Any, context: LocalLambdaContext, scope: loop.InvocationScope) -> None:
        self._handler = handler
        self._event = event
        self._context = context
        self._scope = scope
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.ok = False
        self.result: Any = None

    def __call__(self) -> None:
        token = loop.enter_scope(self._scope)
        started = time.monotonic()
        ok, result = False, None
        try:
            result = self._handler(self._event, self._context)
            ok = True
        except BaseException as exc:  # noqa: BLE001 - whatever ends the handler ends the invocation
            result = exc
        finally:
            loop.exit_scope(token)
        with self._lock:
            if not self._scope.abandoned.is_set():
                self.ok, self.result = ok, result
                self._done.set()
                return
        log.info(
            "%s: an invocation abandoned (%s) returned after %.1f s; its result is discarded",
            self._scope.function_id,
            self._scope.control.ended_by or "at its Timeout",
            time.monotonic() - started,
        )

    def kill(self, reason: BaseException) -> bool:
        """End the invocation now, as Lambda does when its runtime dies (out of memory): it failed
        with ``reason``, the caller stops waiting, and every later AWS or engine call of its code is
        refused. False if it had already returned."""
        with self._lock:
            if self._done.is_set() or self._scope.abandoned.is_set():
                return False  # returned, or already abandoned at its Timeout
            self._scope.control.ended_by = f"was killed ({type(reason).__name__})"
            self._scope.abandoned.set()
            self.ok, self.result = False, reason
            self._done.set()
            return True

    def wait(self, timeout: float) -> bool:
        """True once the handler has returned; False at ``timeout``, having abandoned the invocation."""
        if self._done.wait(timeout):
            return True
        with self._lock:
            if self._done.is_set():
                return True
            self._scope.abandoned.set()
            return False


def refuse_abandoned_engine_call() -> None:
    """The engine clients' request guard (workerless.engines): an abandoned invocation's engine
    requests are refused as its AWS calls are (Lambda would have stopped the code making them)."""
    loop.refuse_if_abandoned("engine")


def load_handler(spec: FunctionSpec) -> Handler:
    """Import ``Handler`` (module.function) from the CodeUri directory, as Lambda's bootstrap does.

    Each function gets its own module name (directories like ``charge-payment`` are not valid
    package names, and every function has an ``app.py``); its directory is on ``sys.path`` while it
    is imported, as the task root is in Lambda.
    """
    module_path, _, attribute = spec.handler.rpartition(".")
    file = spec.code_dir.joinpath(*module_path.split(".")).with_suffix(".py")
    if not file.is_file():
        raise FunctionLoadError(f"{spec.logical_id}: handler file {file} not found (Handler {spec.handler})")
    module_name = "workerless_local_fn_" + re.sub(r"\W", "_", f"{spec.logical_id}.{module_path}")
    import_spec = importlib.util.spec_from_file_location(module_name, file)
    if import_spec is None or import_spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise FunctionLoadError(f"{spec.logical_id}: cannot import {file}")
    module = importlib.util.module_from_spec(import_spec)
    sys.modules[module_name] = module
    code_dir = str(spec.code_dir)
    sys.path.insert(0, code_dir)
    try:
        import_spec.loader.exec_module(module)
    except ConfigurationError:
        sys.modules.pop(module_name, None)
        raise
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise FunctionLoadError(f"{spec.logical_id}: importing {file} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(code_dir)
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise FunctionLoadError(f"{spec.logical_id}: {file} has no callable {attribute!r} (Handler {spec.handler})")
    return handler  # type: ignore[no-any-return]
