"""The poller lock's send log as one string per route (workerless._poller.sendlog): what is written reads
back the same, the older list form still reads, and the three-route log of a 2 jobs/s minute fits
the lock's item in one write unit."""

from __future__ import annotations

import json

from workerless._poller import sendlog
from workerless._poller.poller_lock import Dispatches


def test_a_route_log_reads_back_as_written_with_its_empty_mark() -> None:
    sent = {1796473042: 1, 1796473043: 3, 1796473050: 1}
    text = sendlog.encode(sent, empty=1796473050)
    assert text == "1796473042,0,1x3,7x0,0"
    assert sorted(sendlog.entries(text)) == [(1796473042, 1), (1796473043, 3), (1796473050, 0), (1796473050, 1)]


def test_the_older_list_form_still_reads_and_junk_reads_as_nothing() -> None:
    assert list(sendlog.entries([[100, 2], ["x", 1], [101, 0]])) == [(100, 2), (101, 0)]
    assert list(sendlog.entries("100,1,-3")) == [], "a negative step: unreadable, SQS's count covers it"
    assert list(sendlog.entries("100,1,zz")) == []
    assert list(sendlog.entries(7)) == []
    assert Dispatches(60.0, {"charge": [[100, 2]]}).since("charge", 99.0) == 2


def test_a_minute_of_sends_on_three_routes_takes_a_third_of_the_list_form() -> None:
    """GIVEN sends in 40 of 60 seconds on each of three routes (2 jobs/s) THEN the log takes under a
    third of the list form's bytes (about 1.9 KiB, which took the lock item past 2 KiB: three write
    units a lock write instead of one) and under 500 bytes."""
    log = Dispatches(60.0)
    for route in ("charge-payment", "send-receipt", "generate-report"):
        for second in range(0, 60, 3):
            log.add(route, 1, at=1796473042 + second)
            log.add(route, 2, at=1796473043 + second)
    stored = log.to_dict()
    size = len(json.dumps(stored, separators=(",", ":")))
    lists = {t: [[at, n] for at, n in sendlog.entries(v)] for t, v in stored.items() if not t.startswith("#")}
    assert size < 500
    assert 3 * size < len(json.dumps(lists, separators=(",", ":")))
    again = Dispatches(60.0, json.loads(json.dumps(stored)))
    assert again.since("send-receipt", 1796473042 - 1) == 60


def test_tracked_record_keys_are_written_short_and_read_back_whole() -> None:
    log = Dispatches(60.0)
    key = "job#charge-payment#sheptra#b6ee8b92-d2da-4d25-9668-e2df1f88fd50#r3"
    log.track("charge-payment", key, at=100.0)
    log.track("charge-payment", "other-form", at=101.0)
    stored = json.loads(json.dumps(log.to_dict()))
    assert stored["#live"]["charge-payment"][0] == ["sheptra#b6ee8b92-d2da-4d25-9668-e2df1f88fd50#r3", 100]
    again = Dispatches(60.0, stored)
    assert sorted(again.live("charge-payment")) == sorted([key, "job#charge-payment#other-form"])
