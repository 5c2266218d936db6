"""Reading a take-work answer within what the function's memory allows.

``json.loads`` of an engine's answer builds every job's variables as Python objects: measured under
CPython 3.12, 32 MiB of small fields take about 290 MB (a flat object), one 32 MiB string 64 MB, so
one large job could end a 256 MB poller before it knew which jobs it held, and they lapsed. The
poller never needs the variables as objects: it passes them on (in a message, or to the claim
check) and the handler reads them. So the answer is read as it streams in and only its *skeleton*
is decoded: the value of each job's variables member (``key`` at ``depth``) longer than
:data:`INLINE_BYTES` is cut out while it streams, kept as its JSON text when it fits the payload
limit and what is left of the answer's budget, and dropped (only its size kept) otherwise. In the
skeleton such a value reads as a placeholder object (:data:`MARKER`) the adapter resolves with
:meth:`Skimmer.resolve`. The tokenizer is a regex jump from one structural character to the next:
strings and nesting are followed, numbers and literals are left for the decoder of whoever reads
the value (a kept value is checked as JSON before it is carried inline; a larger one is read, and
refused if it is not JSON, by its handler).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from workerless.errors import ResponseShapeError

__all__ = [
    "INLINE_BYTES",
    "MARKER",
    "SKELETON_BYTES",
    "Skimmed",
    "Skimmer",
    "answer_skimmer",
    "job_variables",
    "post_skimmed",
]

#: A variables value up to this size stays in the skeleton (decoded with it); larger ones are cut.
INLINE_BYTES = 64 * 1024
#: The most the skeleton (every job's fields, small variables included) may hold: decoded, it is
#: up to ~25x this in Python objects. An answer whose fields alone pass it cannot be read safely.
SKELETON_BYTES = 2 * 1024 * 1024
#: A kept value up to this size is checked as JSON here (decoded, then let go): it may travel inline
#: in an SQS message. A larger one always goes to the claim check, and its handler checks it.
CHECKED_BYTES = 1024 * 1024
#: The key of the placeholder object left in the skeleton where a value was cut.
MARKER = "\u0000workerless-skimmed"

_OUTSIDE = re.compile(rb'["\[\]{},:]')
_NESTED = re.compile(rb'["\[\]{}]')
#: Possessive (Python 3.11+): a greedy repeat that may backtrack keeps a frame per repetition, which
#: over a 10 MiB value is hundreds of MB; these never give back what they matched.
#: The rest of a string up to its closing quote (or a backslash ending the chunk), escapes included.
_STRING_REST = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.DOTALL)
_STRING = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_FLAT = rb'(?:[^"\[\]{}]++|' + _STRING + rb")*+"
#: Inside a cut value: everything up to the next bracket that opens a nested container, complete
#: strings and whole containers holding no other (a list of small records) included: the Python
#: loop then runs once per nested container, not once per record.
_SKIP = re.compile(rb'(?:[^"\[\]{}]++|' + _STRING + rb"|\{" + _FLAT + rb"\}|\[" + _FLAT + rb"\])*+", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Skimmed:
    """A variables value cut from the answer: its size in bytes as the engine sent it, and its JSON
    text (``raw``), or None when it was dropped: larger than the limit (``over_limit``), or no room
    was left in the answer's budget (handed back, it comes back in a later poll)."""

    size: int
    raw: bytes | None
    over_limit: bool

    @property
    def malformed(self) -> bool:
        """Kept, but not JSON (checked only up to :data:`CHECKED_BYTES`)."""
        return self.raw == b""

    @property
    def is_object(self) -> bool:
        """Kept, and a JSON object (what a job's variables must be)."""
        return self.raw is not None and self.raw.lstrip()[:1] == b"{"


class Skimmer:
    """Feed an answer's bytes as they arrive (:meth:`feed`), then :meth:`skeleton` to decode.

    Example:
        >>> s = Skimmer("variables", 3, limit=100, budget=100, inline=4)
        >>> s.feed(b'{"jobs":[{"id":"a","variables":{"x":[1,2,3]}},{"id":"b","variables":{}}]}')
        >>> jobs = json.loads(s.skeleton())["jobs"]
        >>> s.resolve(jobs[0]["variables"]), jobs[1]["variables"]
        (Skimmed(size=13, raw=b'{"x":[1,2,3]}', over_limit=False), {})
    """

    def __init__(
        self,
        key: str,
        depth: int,
        *,
        engine: str = "engine",
        limit: int,
        budget: int,
        inline: int = INLINE_BYTES,
        skeleton_cap: int = SKELETON_BYTES,
    ) -> None:
        self.key, self.depth, self.limit, self.left, self.inline = key.encode(), depth, limit, budget, inline
        self.cap, self.engine = skeleton_cap, engine
        self.values: list[Skimmed] = []
        self._out = bytearray()
        self._stack = bytearray()  # b"{" / b"[" per open container
        self._expect_key = False
        self._in_string = False
        self._escape = False
        self._key: bytearray | None = None  # the key being read (None: this string is not a key)
        self._last_key = b""
        self._pending = False  # after the target key's ":": the next value is cut
        self._capture: bytearray | None = None
        self._capturing = False
        self._cap_depth = 0
        self._cap_size = 0
        #: The answer's bytes so far while they could all be one value kept whole (at most ``inline``):
        #: nothing in such an answer is cut, so its skeleton is the answer itself and the tokenizer
        #: (a Python loop per structural character, ~85 µs a job of a 10-job Sheptra answer) is
        #: skipped. None once the answer is longer: from then on it is scanned as it streams in.
        self._held: bytearray | None = bytearray()

    # ------------------------------------------------------------------------------- feeding

    def feed_all(self, chunks: Iterable[bytes]) -> bytes:
        for chunk in chunks:
            self.feed(chunk)
        return self.skeleton()

    def feed(self, chunk: bytes) -> None:
        held = self._held
        if held is not None:
            if len(held) + len(chunk) <= min(self.inline, self.cap):
                held += chunk
                return
            self._held = None  # too long to keep whole: scan what was held, then the rest as it comes
            if held:
                self._scan(bytes(held))
        self._scan(chunk)

    def _scan(self, chunk: bytes) -> None:
        mark, pos, n = 0, 0, len(chunk)
        while pos < n:
            if self._in_string:
                if self._escape:
                    self._escape = False
                    pos += 1
                    continue
                at = _STRING_REST.match(chunk, pos).end()  # type: ignore[union-attr]  # always matches
                if self._key is not None and len(self._key) < 64:
                    self._key += chunk[pos : min(at, pos + 64)]
                if at >= n:
                    break
                if chunk[at] == 0x5C:  # a backslash ending the chunk: what it escapes comes next
                    self._escape = True
                    pos = at + 1
                    continue
                self._in_string = False
                pos = at + 1
                if self._key is not None:
                    self._last_key, self._key = bytes(self._key), None
                elif self._capturing and self._cap_depth == len(self._stack):
                    mark = self._end_capture(chunk, mark, pos)  # a string value: cut whole
                continue
            if self._capturing:
                # Inside a cut value only nesting matters: jump over everything else, strings whole.
                pos = _SKIP.match(chunk, pos).end()  # type: ignore[union-attr]  # always matches
                if pos >= n:
                    break
            m = (_NESTED if self._capturing else _OUTSIDE).search(chunk, pos)
            if m is None:
                break
            at, c = m.start(), chunk[m.start()]
            pos = at + 1
            if self._pending:
                self._pending = False
                if c in b'{["':
                    self._sink(chunk, mark, at)
                    mark = at
                    self._capturing, self._cap_depth, self._cap_size = True, len(self._stack), 0
                    self._capture = bytearray()
            if c == 0x22:  # '"'
                self._in_string = True
                key = not self._capturing and self._stack[-1:] == b"{" and self._expect_key
                self._key = bytearray() if key else None
                self._expect_key = False
            elif c in b"{[":
                self._stack.append(c)
                self._expect_key = c == 0x7B
            elif c in b"}]":
                if not self._stack:
                    raise ResponseShapeError("the answer closes more than it opened", engine=self.engine, field="body")
                self._stack.pop()
                if self._capturing and self._cap_depth == len(self._stack):
                    mark = self._end_capture(chunk, mark, pos)
            elif c == 0x2C:  # ','
                self._expect_key = self._stack[-1:] == b"{"
            elif c == 0x3A and len(self._stack) == self.depth and self._last_key == self.key:  # ':'
                self._pending = True
        self._sink(chunk, mark, len(chunk))

    def skeleton(self) -> bytes:
        """The answer with every cut value replaced by its placeholder; ready for ``json.loads``."""
        if self._held is not None:
            # Short enough that nothing was cut: the answer as it came (its decoder reports a
            # truncated or unbalanced one, as json.loads of the skeleton would have).
            return bytes(self._held)
        if self._capturing or self._in_string:
            raise ResponseShapeError("the answer ended inside a value (truncated)", engine=self.engine, field="body")
        return bytes(self._out)

    def resolve(self, value: object) -> Skimmed | None:
        """The cut value a placeholder stands for (None: ``value`` is not a placeholder)."""
        if isinstance(value, dict) and len(value) == 1 and MARKER in value:
            index = value[MARKER]
            if isinstance(index, int) and 0 <= index < len(self.values):
                return self.values[index]
        return None

    # ------------------------------------------------------------------------------- internals

    def _sink(self, chunk: bytes, start: int, end: int) -> None:
        """``chunk[start:end]`` to the skeleton or the value being cut (sliced only when kept)."""
        if end <= start:
            return
        if not self._capturing:
            self._out += chunk[start:end]
            if len(self._out) > self.cap:
                raise ResponseShapeError(
                    f"the answer holds more than {self.cap} bytes besides its jobs' variables: "
                    "workerless does not read it (a function's memory is bounded)",
                    engine=self.engine,
                    field="body",
                )
            return
        self._cap_size += end - start
        if self._capture is not None:
            if self._cap_size > min(self.limit, max(self.left, self.inline)):
                self._capture = None  # over the limit or the answer's budget: only its size is kept
            else:
                self._capture += memoryview(chunk)[start:end]

    def _end_capture(self, chunk: bytes, mark: int, end: int) -> int:
        self._sink(chunk, mark, end)
        raw, size = self._capture, self._cap_size
        self._capturing, self._capture = False, None
        if raw is not None and size <= self.inline and len(self._out) + size <= self.cap:
            self._out += raw
            return end
        if raw is not None and size <= self.left:
            self.left -= size
            kept: bytes | None = bytes(raw)
        else:
            kept = None
        if kept is not None and size <= CHECKED_BYTES:
            try:
                json.loads(kept)
            except ValueError:
                kept = b""  # not JSON: the placeholder resolves to a malformed value
        self.values.append(Skimmed(size, kept, size > self.limit))
        self._out += json.dumps({MARKER: len(self.values) - 1}).encode()
        return end


def answer_skimmer(demands: Sequence[Any], key: str, depth: int, *, engine: str) -> Skimmer:
    """The skimmer for one take-work answer, with the payload limit and the answer's budget the
    poller put in its demands (:class:`~workerless._core.model.Demand`); the template's defaults otherwise."""
    from workerless._core.claimcheck import DEFAULT_MEMORY_MB, answer_budget, payload_limit

    first = demands[0] if demands else None
    limit = getattr(first, "payload_limit", None) or payload_limit(DEFAULT_MEMORY_MB)
    budget = getattr(first, "answer_budget", None) or answer_budget(DEFAULT_MEMORY_MB)
    return Skimmer(key, depth, engine=engine, limit=limit, budget=max(budget, limit))


def post_skimmed(
    client: httpx.Client, url: httpx.URL | str, *, json_body: object, headers: Mapping[str, str], skim: Skimmer
) -> httpx.Response:
    """POST and read a 2xx answer through ``skim`` as it streams in (its skeleton is then
    ``skim.skeleton()``; the response's own body is not kept). Any other answer is read whole
    (an error body is small) for the caller to translate. Raises what ``client.send`` raises."""
    response = client.send(client.build_request("POST", url, json=json_body, headers=headers), stream=True)
    try:
        if response.is_success:
            for chunk in response.iter_bytes():
                skim.feed(chunk)
        else:
            response.read()
    finally:
        response.close()
    return response


def job_variables(skim: Skimmer | None, value: object) -> tuple[dict[str, Any] | None, bytes | None, int | None]:
    """A job's variables member as (variables, raw_variables, unread_bytes) for
    :class:`~workerless._core.model.ActivatedJob`; variables None when it is not a JSON object."""
    cut = skim.resolve(value) if skim is not None else None
    if cut is None:
        return (value if isinstance(value, dict) else None), None, None
    if cut.raw is None:
        return {}, None, cut.size  # not read: over the limit, or past the answer's budget
    if not cut.is_object:
        return None, None, None
    return {}, cut.raw, None
