"""A small threaded HTTP server shared by the engine emulators (standard library only).

Each emulator is a :class:`Router` of handlers; :class:`EmulatorServer` serves it on loopback.
Every emulator gets the same admin surface for free:

- ``GET /_admin/stats``: request counts per route pattern (``"POST /v1/jobs/activate": 12``) — the
  benchmarks count engine requests per job with it.
- ``POST /_admin/faults``: queue injected faults ``{"method": "POST", "path": "/v1/jobs/activate",
  "status": 503, "headers": {"Retry-After": "1"}, "times": 1}`` or ``{"...", "drop": true}`` (close
  the connection without answering) or ``{"...", "delay": 2.5}`` (answer late); ``path`` is the
  route pattern or a concrete path; ``DELETE /_admin/faults`` clears them. With ``"from"`` and
  ``"until"`` (the emulator's clock, epoch seconds) instead of ``times``, the fault is an outage:
  every matching request in ``from <= now < until`` gets it (``times`` is ignored).

Example:
    >>> router = Router()
    >>> @router.route("GET", "/hello/{name}")
    ... def hello(req: Request) -> Response:
    ...     return json_response({"hello": req.params["name"]})
    >>> with EmulatorServer(router) as server:          # doctest: +SKIP
    ...     httpx.get(server.url + "/hello/you").json()
"""

from __future__ import annotations

import json
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_BODY = 16 * 1024 * 1024


@dataclass
class Request:
    method: str
    path: str
    pattern: str
    params: dict[str, str]
    query: dict[str, str]
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None

    def json(self) -> Any:
        """The body as JSON; raises :class:`HTTPProblem` (400) when it is not."""
        try:
            return json.loads(self.body.decode("utf-8") or "null")
        except (UnicodeDecodeError, ValueError) as exc:
            raise HTTPProblem(400, "Bad Request", f"body is not valid JSON: {exc}") from None

    def json_object(self) -> dict[str, Any]:
        body = self.json()
        if not isinstance(body, dict):
            raise HTTPProblem(400, "Bad Request", "body must be a JSON object")
        return body


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


class HTTPProblem(Exception):
    """An RFC 9457 problem+json answer: raise it from a handler, or take its ``response``."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
        problem_type: str = "about:blank",
    ) -> None:
        super().__init__(f"{status} {title}: {detail}")
        body: dict[str, Any] = {"type": problem_type, "title": title, "status": status}
        if detail:
            body["detail"] = detail
        body.update(extra or {})
        self.response = Response(
            status, json.dumps(body).encode(), {"Content-Type": "application/problem+json", **(headers or {})}
        )


def json_response(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    data = json.dumps(body).encode()
    return Response(status, data, {"Content-Type": "application/json", **(headers or {})})


Handler = Callable[[Request], Response]


@dataclass
class _Fault:
    method: str
    path: str
    times: int
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    drop: bool = False
    delay: float = 0.0
    #: Sent verbatim as the body (a garbled answer) with ``content_type``; wins over ``body``.
    raw: str | None = None
    content_type: str = "application/json"
    #: Run the real handler first, then answer with the fault (the request took effect).
    after: bool = False
    #: None: fire on the next ``times`` matches. A share (0..1]: stay armed, fire that often.
    rate: float | None = None
    draw: random.Random = field(default_factory=random.Random)

    #: An outage window on the router's clock: the fault answers every matching request inside it.
    start: float | None = None
    end: float | None = None

    @property
    def windowed(self) -> bool:
        return self.start is not None or self.end is not None

    def answer(self) -> Response | None:
        """The injected answer (None: answer normally, or drop when ``drop``)."""
        if self.status is None:
            return None
        if self.raw is not None:
            return Response(self.status, self.raw.encode(), {"Content-Type": self.content_type, **self.headers})
        if self.body is not None:
            return json_response(self.body, self.status, self.headers)
        return HTTPProblem(self.status, "Injected fault", None, headers=self.headers).response


class Router:
    """Route table: ``(METHOD, "/path/{param}")`` → handler. Counts requests and holds faults.

    ``clock`` is the emulator's clock (epoch seconds), which outage windows are measured on.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._routes: list[tuple[str, str, re.Pattern[str], Handler]] = []
        self.stats: Counter[str] = Counter()
        #: Requests answered by an outage window, per route pattern.
        self.outage_hits: Counter[str] = Counter()
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self.route("GET", "/_admin/stats")(self._get_stats)
        self.route("DELETE", "/_admin/stats")(self._reset_stats)
        self.route("POST", "/_admin/faults")(self._add_fault)
        self.route("DELETE", "/_admin/faults")(self._clear_faults)

    def route(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        regex = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$")

        def register(fn: Handler) -> Handler:
            self._routes.append((method.upper(), pattern, regex, fn))
            return fn

        return register

    def match(self, method: str, path: str) -> tuple[str, dict[str, str], Handler] | None:
        for m, pattern, regex, fn in self._routes:
            found = regex.match(path)
            if found and m == method:
                return pattern, found.groupdict(), fn
        return None

    def allowed(self, path: str) -> bool:
        return any(regex.match(path) for _, _, regex, _ in self._routes)

    def take_fault(self, method: str, path: str, pattern: str) -> _Fault | None:
        now = self.clock()
        with self._lock:
            for fault in list(self._faults):
                if fault.windowed:
                    if fault.end is not None and now >= fault.end:
                        self._faults.remove(fault)  # the outage is over
                        continue
                    if fault.start is not None and now < fault.start:
                        continue  # not begun yet
                    if fault.method in (method, "*") and fault.path in (path, pattern, "*"):
                        self.outage_hits[pattern] += 1
                        return fault
                    continue
                if fault.method in (method, "*") and fault.path in (path, pattern, "*"):
                    if fault.rate is not None:
                        if fault.draw.random() < fault.rate:
                            return fault
                        continue
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def pending_faults(self) -> int:
        """Faults queued and not fired yet (a ``rate`` fault stays armed: it always counts)."""
        with self._lock:
            return len(self._faults)

    def count(self, method: str, pattern: str) -> None:
        with self._lock:
            self.stats[f"{method} {pattern}"] += 1

    def _get_stats(self, req: Request) -> Response:
        with self._lock:
            return json_response({"requests": dict(self.stats)})

    def _reset_stats(self, req: Request) -> Response:
        with self._lock:
            self.stats.clear()
        return Response(204)

    def _add_fault(self, req: Request) -> Response:
        body = req.json_object()
        try:
            rate = float(body["rate"]) if body.get("rate") is not None else None
            if rate is not None and not 0.0 < rate <= 1.0:
                raise ValueError(f"rate must be in (0, 1], got {rate}")
            raw = body.get("raw")
            if raw is not None and not isinstance(raw, str):
                raise TypeError("raw must be a string")
            fault = _Fault(
                method=str(body.get("method", "*")).upper(),
                path=str(body["path"]),
                times=int(body.get("times", 1)),
                status=int(body["status"]) if body.get("status") is not None else None,
                headers={str(k): str(v) for k, v in (body.get("headers") or {}).items()},
                body=body.get("body"),
                drop=bool(body.get("drop", False)),
                delay=float(body.get("delay", 0.0)),
                raw=raw,
                content_type=str(body.get("content_type") or "application/json"),
                after=bool(body.get("after", False)),
                rate=rate,
                draw=random.Random(body.get("seed")),
                start=float(body["from"]) if body.get("from") is not None else None,
                end=float(body["until"]) if body.get("until") is not None else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HTTPProblem(400, "Bad Request", f"bad fault: {exc}") from None
        self.add_fault(fault)
        return json_response({"queued": True}, 201)

    def add_fault(self, fault: _Fault) -> None:
        """Queue ``fault`` (the admin API's POST, in process)."""
        with self._lock:
            self._faults.append(fault)

    def add_outage(
        self, paths: Sequence[str], *, start: float, end: float, status: int = 503, method: str = "*"
    ) -> None:
        """Answer every request to ``paths`` (route patterns or concrete paths) with ``status`` (no
        Retry-After) while ``start <= clock() < end``: an engine outage on the emulator's clock."""
        if end <= start:
            raise ValueError("an outage must end after it starts")
        for path in paths:
            self.add_fault(_Fault(method=method.upper(), path=path, times=1, status=status, start=start, end=end))

    def _clear_faults(self, req: Request) -> Response:
        with self._lock:
            self._faults.clear()
        return Response(204)


class _Dropped(Exception):
    pass


def _make_handler(router: Router) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "workerless-emulator"
        # Headers and body go out in two writes; with Nagle on, the body waits for the client's
        # delayed ACK (~40 ms a request on loopback).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read their own output
            return

        def _dispatch(self) -> None:
            split = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(HTTPProblem(413, "Content Too Large", f"body over {MAX_BODY} bytes").response)
                self.close_connection = True
                return
            body = self.rfile.read(length) if length else b""
            found = router.match(self.command, split.path)
            if found is None:
                status = 405 if router.allowed(split.path) else 404
                self._send(
                    HTTPProblem(status, "Method Not Allowed" if status == 405 else "Not Found", split.path).response
                )
                return
            pattern, params, fn = found
            query = {k: v[-1] for k, v in parse_qs(split.query).items()}
            request = Request(self.command, split.path, pattern, params, query, dict(self.headers.items()), body)
            response = _answer(router, request, fn)
            if response is None:
                self.close_connection = True
                raise _Dropped
            self._send(response)

        def _send(self, response: Response) -> None:
            self.send_response(response.status)
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if response.body and self.command != "HEAD":
                self.wfile.write(response.body)

        def _handle(self) -> None:
            try:
                self._dispatch()
            except _Dropped:
                return

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    return _Handler


class _QuietServer(ThreadingHTTPServer):
    """A client that hung up first (its timeout beat an injected delay) is not an emulator error:
    stdlib would print a BrokenPipe traceback for each one."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class EmulatorServer:
    """Serve a :class:`Router` on 127.0.0.1 in a background thread.

    ``port=0`` picks a free port; ``url`` is the base URL once started.
    """

    def __init__(self, router: Router, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.router = router
        self._server = _QuietServer((host, port), _make_handler(router))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> EmulatorServer:
        """Serve in a background thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="emulator", daemon=True
            )
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def mock_transport(router: Router) -> Any:
    """An ``httpx.MockTransport`` that answers from ``router`` in-process, without sockets.

    Same dispatch as :class:`EmulatorServer` (404/405, request stats, injected faults, problem+json
    for a handler error), so benchmarks and tests can count engine requests and inject faults
    with no loopback server; a ``drop`` fault raises ``httpx.RemoteProtocolError``. Any host in the
    URL reaches the router: only the path and query matter.

    Example:
        >>> client = httpx.Client(transport=mock_transport(router))          # doctest: +SKIP
        >>> client.get("http://emulator.invalid/_admin/stats").json()        # doctest: +SKIP
    """
    import httpx  # lazily: the emulator server itself is standard library only

    def handle(request: httpx.Request) -> httpx.Response:
        method = request.method
        path = request.url.path
        body = request.read()
        response = _dispatch_in_process(router, method, path, request.url.query.decode(), request.headers, body)
        if response is None:
            raise httpx.RemoteProtocolError("connection dropped (injected fault)", request=request)
        headers = dict(response.headers)
        headers["Content-Length"] = str(len(response.body))
        content = b"" if method == "HEAD" else response.body
        return httpx.Response(response.status, headers=headers, content=content)

    return httpx.MockTransport(handle)


def _dispatch_in_process(
    router: Router, method: str, path: str, query_text: str, headers: Any, body: bytes
) -> Response | None:
    """The server's dispatch for one in-process request; None: the connection is dropped."""
    if len(body) > MAX_BODY:
        return HTTPProblem(413, "Content Too Large", f"body over {MAX_BODY} bytes").response
    found = router.match(method, path)
    if found is None:
        status = 405 if router.allowed(path) else 404
        return HTTPProblem(status, "Method Not Allowed" if status == 405 else "Not Found", path).response
    pattern, params, fn = found
    query = {k: v[-1] for k, v in parse_qs(query_text).items()}
    request = Request(method, path, pattern, params, query, dict(headers.items()), body)
    return _answer(router, request, fn)


def _call(fn: Handler, request: Request) -> Response:
    try:
        return fn(request)
    except HTTPProblem as exc:
        return exc.response
    except Exception as exc:  # noqa: BLE001 - an emulator bug must answer 500, not hang the client
        return HTTPProblem(500, "Internal Server Error", f"{type(exc).__name__}: {exc}").response


def _answer(router: Router, request: Request, fn: Handler) -> Response | None:
    """The answer to one request, injected faults applied (the server's and the in-process
    transport's shared dispatch). None: drop the connection without answering."""
    if request.path.startswith("/_admin/"):
        return _call(fn, request)
    router.count(request.method, request.pattern)
    fault = router.take_fault(request.method, request.path, request.pattern)
    if fault is None:
        return _call(fn, request)
    if fault.after:
        # The request takes effect; only its answer is lost or mangled on the way back.
        _call(fn, request)
    if fault.delay:
        time.sleep(fault.delay)
    if fault.drop:
        return None
    injected = fault.answer()
    if injected is not None:
        return injected
    return (
        _call(fn, request)
        if not fault.after
        else HTTPProblem(502, "Bad Gateway", "answer lost (injected fault)").response
    )
