"""A function's MemorySize, held locally: an invocation whose memory passes it is killed as Lambda
kills it.

Lambda stops the runtime of an invocation that uses more memory than its function's MemorySize
("Runtime exited with error: signal: killed", errorType Runtime.OutOfMemory): the invocation fails
as a whole (an SQS batch returns after its visibility timeout, none of it deleted), whatever the
code had not yet written is lost with the process, and the next invocation starts a new one.

Local mode runs every function in threads of one process, so it measures with :mod:`tracemalloc`:
an invocation's use is its function's *baseline* (what the runtime, boto3 and the library hold
before a handler allocates anything; tracemalloc does not see it, nor C allocations such as
OpenSSL's) plus the growth of the traced memory's peak over what was traced when the invocation
began. tracemalloc's counters are the process's, not the thread's: invocations running at once are
each charged the others' growth too, so under concurrency the measure is an upper bound (stricter
than Lambda, never laxer). The peak is read, and the limit checked, every ``sample_seconds`` and
before every AWS or engine call the invocation makes (:class:`~workerless_devkit.local.loop.InvocationScope`'s
``before_call``), so no call leaves a killed invocation after its memory passed the limit.

Opt-in (``LocalTopology(memory_limits=True)``): tracemalloc slows every allocation of the process
(about 2-3 times for allocation-heavy code), which the suite's long pipeline runs cannot afford.
"""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

MIB = 1024 * 1024
#: What a function's runtime holds before its handler allocates anything, in MB: CPython 3.12 with
#: boto3, httpx and the workerless library imported, as measured for the poller in issue 26 (its
#: "own ~66 MB"; Lambda's Max Memory Used of an idle poller invocation). One figure for every
#: function unless ``baseline_mb`` names it: the handlers import the same runtime.
RUNTIME_BASELINE_MB = 66.0
#: How often the peak is read between calls.
SAMPLE_SECONDS = 0.005


class OutOfMemory(Exception):
    """What Lambda reports for an invocation killed past its MemorySize."""

    error_type = "Runtime.OutOfMemory"

    def __init__(self, function_id: str, used_mb: float, memory_size: int) -> None:
        super().__init__(
            f"{function_id}: Runtime exited with error: signal: killed (Runtime.OutOfMemory: "
            f"{used_mb:.0f} MB used of MemorySize {memory_size} MB)"
        )
        self.function_id = function_id
        self.used_mb = used_mb
        self.memory_size = memory_size


@dataclass(eq=False)
class Watch:
    """One invocation under the meter."""

    function_id: str
    memory_size: int
    baseline_mb: float
    start_bytes: int
    kill: Callable[[OutOfMemory], bool]
    peak_bytes: int = 0
    killed: OutOfMemory | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def used_mb(self) -> float:
        return self.baseline_mb + self.peak_bytes / MIB


class MemoryMeter:
    """Watches running invocations against their MemorySize (see the module docstring).

    Args:
        baseline_mb: MB each function holds before its handler runs: one figure for all, or a
            mapping by function logical id (others get :data:`RUNTIME_BASELINE_MB`).
        sample_seconds: how often the sampler reads the peak between calls.
    """

    def __init__(
        self, baseline_mb: float | Mapping[str, float] = RUNTIME_BASELINE_MB, *, sample_seconds: float = SAMPLE_SECONDS
    ) -> None:
        self._baseline = baseline_mb
        self.sample_seconds = sample_seconds
        self._lock = threading.Lock()
        self._watches: set[Watch] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_tracing = False
        #: Every invocation killed, in order.
        self.killed: list[OutOfMemory] = []
        #: function id → the highest use (MB) seen in one of its invocations.
        self.max_used_mb: dict[str, float] = {}

    def baseline_of(self, function_id: str) -> float:
        if isinstance(self._baseline, Mapping):
            return float(self._baseline.get(function_id, RUNTIME_BASELINE_MB))
        return float(self._baseline)

    def start(self) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start()
            self._started_tracing = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample_loop, name="memory-meter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._started_tracing:
            tracemalloc.stop()
            self._started_tracing = False

    def watch(self, function_id: str, memory_size: int, kill: Callable[[OutOfMemory], bool]) -> Watch:
        """Start charging an invocation of ``function_id``; ``kill`` ends it (True if it was still running)."""
        with self._lock:
            self._sample_locked()
            current, _ = tracemalloc.get_traced_memory()
            watch = Watch(function_id, memory_size, self.baseline_of(function_id), current, kill)
            self._watches.add(watch)
        return watch

    def check(self, watch: Watch) -> None:
        """Read the peak now and kill ``watch``'s invocation if it passed its MemorySize."""
        with self._lock:
            self._sample_locked()
        self._enforce()

    def unwatch(self, watch: Watch) -> float:
        """Stop charging ``watch`` (its invocation returned); its use in MB. A last reading first:
        memory passed between the last sample and the return still kills it."""
        self.check(watch)
        with self._lock:
            self._watches.discard(watch)
            used = watch.used_mb
            self.max_used_mb[watch.function_id] = max(self.max_used_mb.get(watch.function_id, 0.0), used)
        return used

    # -- internals ----------------------------------------------------------------------------------
    def _sample_locked(self) -> None:
        if not tracemalloc.is_tracing():
            return
        _, peak = tracemalloc.get_traced_memory()
        # The meter is the peak's only reader: each reading covers the time since the last one and
        # is charged to every invocation running in it.
        tracemalloc.reset_peak()
        for watch in self._watches:
            watch.peak_bytes = max(watch.peak_bytes, peak - watch.start_bytes)

    def _enforce(self) -> None:
        with self._lock:
            over = [w for w in self._watches if w.killed is None and w.used_mb > w.memory_size]
            for watch in over:
                watch.killed = OutOfMemory(watch.function_id, watch.used_mb, watch.memory_size)
        for watch in over:
            assert watch.killed is not None
            if watch.kill(watch.killed):
                with self._lock:
                    self.killed.append(watch.killed)

    def _sample_loop(self) -> None:
        while not self._stop.wait(self.sample_seconds):
            with self._lock:
                if not self._watches:
                    continue
                self._sample_locked()
            self._enforce()
