"""The emulators' fault injection (``POST /_admin/faults``): mangled answers (``raw``), answers lost
after the request took effect (``after``), and faults that stay armed at a rate (``rate``) — over a
served router and the in-process transport, which share one dispatch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from workerless_devkit.emulators.http import EmulatorServer, Request, Response, Router, json_response, mock_transport

Client = Callable[[], httpx.Client]


def counting_router() -> tuple[Router, list[int]]:
    router = Router()
    calls: list[int] = []

    @router.route("POST", "/things")
    def add(req: Request) -> Response:
        calls.append(1)
        return json_response({"count": len(calls)})

    return router, calls


@pytest.fixture(params=["server", "in-process"])
def setup(request: pytest.FixtureRequest) -> Iterator[tuple[httpx.Client, list[int]]]:
    router, calls = counting_router()
    if request.param == "server":
        with EmulatorServer(router) as server, httpx.Client(base_url=server.url, timeout=5) as client:
            yield client, calls
    else:
        with httpx.Client(base_url="http://emulator.invalid", transport=mock_transport(router)) as client:
            yield client, calls


def add_fault(client: httpx.Client, **fault: Any) -> None:
    assert client.post("/_admin/faults", json={"method": "POST", "path": "/things", **fault}).status_code == 201


def test_raw_body_is_sent_verbatim_and_the_request_does_not_reach_the_handler(
    setup: tuple[httpx.Client, list[int]],
) -> None:
    client, calls = setup
    add_fault(client, status=502, raw="<html>bad gateway</html>", content_type="text/html")
    answer = client.post("/things", json={})
    assert (answer.status_code, answer.text, answer.headers["Content-Type"]) == (
        502,
        "<html>bad gateway</html>",
        "text/html",
    )
    assert calls == []
    assert client.post("/things", json={}).json() == {"count": 1}


def test_after_lets_the_request_take_effect_and_mangles_only_its_answer(
    setup: tuple[httpx.Client, list[int]],
) -> None:
    client, calls = setup
    add_fault(client, status=200, raw='{"count": ', after=True)
    answer = client.post("/things", json={})
    assert answer.status_code == 200 and answer.content == b'{"count": '
    assert calls == [1]
    add_fault(client, status=200, raw="", after=True)
    assert client.post("/things", json={}).content == b""
    assert calls == [1, 1]


def test_a_drop_after_the_request_took_effect_closes_without_an_answer(
    setup: tuple[httpx.Client, list[int]],
) -> None:
    client, calls = setup
    add_fault(client, drop=True, after=True)
    with pytest.raises(httpx.HTTPError):
        client.post("/things", json={})
    assert calls == [1]


def test_a_rate_fault_stays_armed_and_fires_on_that_share_repeatably(setup: tuple[httpx.Client, list[int]]) -> None:
    client, calls = setup
    add_fault(client, status=429, rate=0.25, seed=7)
    statuses = [client.post("/things", json={}).status_code for _ in range(200)]
    fired = statuses.count(429)
    assert 25 <= fired <= 75, fired  # a 0.25 share of 200 (seeded: the same draw on every run)
    assert len(calls) == 200 - fired
    assert client.delete("/_admin/faults").status_code == 204
    assert client.post("/things", json={}).status_code == 200


def test_a_bad_rate_is_refused(setup: tuple[httpx.Client, list[int]]) -> None:
    client, _ = setup
    answer = client.post("/_admin/faults", json={"path": "/things", "status": 500, "rate": 1.5})
    assert answer.status_code == 400
