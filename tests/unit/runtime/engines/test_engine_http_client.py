"""The engine HTTP client keeps no cookie an engine sets (issue 29: httpx's jar parsed every
response), while a response's own cookies stay readable (StageNext's affinity cookie is read from
its pull's response) and a cookie header a caller gives still goes out."""

from __future__ import annotations

import httpx
from workerless.engines import new_http_client


def _client(seen: list[httpx.Request]) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True}, headers={"Set-Cookie": "gw_replica=r1; Path=/; HttpOnly"})

    return new_http_client(5.0, transport=httpx.MockTransport(answer))


def test_a_cookie_the_engine_sets_is_read_from_its_response_and_not_kept() -> None:
    seen: list[httpx.Request] = []
    client = _client(seen)
    first = client.post("http://engine.test/jobs/pull", json={"queue": "q"})
    assert first.cookies.get("gw_replica") == "r1"  # the delivery's own cookie, from its response
    assert dict(client.cookies) == {}  # not the client's
    client.post("http://engine.test/jobs/pull", json={"queue": "q"})
    assert "cookie" not in seen[1].headers  # the next request is not pinned to the replica


def test_a_cookie_header_the_caller_gives_is_sent() -> None:
    seen: list[httpx.Request] = []
    client = _client(seen)
    client.post("http://engine.test/jobs/ack", json={}, headers={"Cookie": "gw_replica=r0"})
    assert seen[0].headers["cookie"] == "gw_replica=r0"


def test_a_cookie_set_on_the_client_is_sent() -> None:
    seen: list[httpx.Request] = []
    client = _client(seen)
    client.cookies.set("session", "s1", domain="engine.test")
    client.get("http://engine.test/x")
    assert seen[0].headers["cookie"] == "session=s1"
