"""The skimmer that reads a take-work answer as it streams in (workerless.engines.kit.skim), and the
payload limit that follows the function's memory (workerless._core.claimcheck, workerless._core.settings)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from workerless._core.claimcheck import MIB, memory_needed, payload_limit
from workerless._core.settings import Settings
from workerless.engines.kit.skim import SKELETON_BYTES, Skimmer
from workerless.errors import ConfigurationError, ResponseShapeError

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
    max_leaves=15,
)


def skim(data: bytes, chunk: int, **kwargs: Any) -> tuple[Skimmer, Any]:
    s = Skimmer("variables", 3, **{"limit": 10**6, "budget": 10**6, **kwargs})
    for i in range(0, len(data), chunk):
        s.feed(data[i : i + chunk])
    return s, json.loads(s.skeleton())


@settings(max_examples=300, deadline=None)
@given(
    jobs=st.lists(st.fixed_dictionaries({"id": st.text(max_size=5), "variables": values}), max_size=4),
    other=st.dictionaries(st.text(max_size=6), values, max_size=3),
    inline=st.integers(0, 30),
    chunk=st.integers(1, 50),
    indent=st.sampled_from([None, 1]),
    ascii_only=st.booleans(),
)
def test_any_answer_in_any_chunks_reads_back_to_the_same_jobs(
    jobs: list[dict[str, Any]], other: dict[str, Any], inline: int, chunk: int, indent: int | None, ascii_only: bool
) -> None:
    """GIVEN any answer, split anywhere (inside strings, escapes, multi-byte characters) THEN the
    skeleton decodes to the same answer, each cut value's text decoding to the variables it replaced."""
    data = json.dumps({"other": other, "jobs": jobs}, indent=indent, ensure_ascii=ascii_only).encode()
    s, got = skim(data, chunk, inline=inline)
    assert got["other"] == other
    for sent, read in zip(jobs, got["jobs"], strict=True):
        cut = s.resolve(read["variables"])
        assert (json.loads(cut.raw) if cut is not None and cut.raw else read["variables"]) == sent["variables"]
        assert read["id"] == sent["id"]


def test_a_value_over_the_limit_is_dropped_with_its_size_and_the_budget_hands_back_the_rest() -> None:
    """GIVEN jobs of 40, 30, 30 and 500 bytes of variables, a limit of 100 and an answer budget of
    80 THEN the first is kept, the second and third are past the budget (dropped, not over the
    limit), the fourth is over the limit; nothing dropped is held."""
    blobs = ["a" * 30, "b" * 20, "c" * 20, "d" * 490]
    data = json.dumps({"jobs": [{"id": i, "variables": {"x": b}} for i, b in enumerate(blobs)]}).encode()
    s, got = skim(data, 7, limit=100, budget=80, inline=0)
    cuts = [s.resolve(job["variables"]) for job in got["jobs"]]
    assert [(c.size, c.raw is not None, c.over_limit) for c in cuts if c is not None] == [
        (39, True, False),
        (29, True, False),
        (29, False, False),
        (499, False, True),
    ]


def test_a_truncated_answer_or_one_whose_fields_alone_are_too_large_is_a_named_error() -> None:
    s = Skimmer("variables", 3, limit=100, budget=100, inline=8)
    s.feed(b'{"jobs":[{"id":"a","variables":{"x":"unfinished')
    with pytest.raises(ResponseShapeError, match="truncated"):
        s.skeleton()
    s = Skimmer("variables", 3, limit=100, budget=100)
    with pytest.raises(ResponseShapeError, match=f"more than {SKELETON_BYTES} bytes"):
        s.feed(json.dumps({"jobs": [{"id": "a" * (SKELETON_BYTES + 1)}]}).encode())


def test_an_answer_no_longer_than_a_value_kept_whole_is_its_own_skeleton_without_a_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GIVEN an answer of at most ``inline`` bytes (nothing in it could be cut) THEN its skeleton is
    the answer as it came, and the tokenizer never runs (issue 29: it was most of the poller's
    activation CPU); truncated, it is left to the answer's decoder, which every adapter translates
    (a shape error; StageNext's garbled answer)."""

    def no_scan(self: Skimmer, chunk: bytes) -> None:
        raise AssertionError("scanned")

    monkeypatch.setattr(Skimmer, "_scan", no_scan)
    answer = json.dumps({"jobs": [{"id": str(n), "variables": {"x": "é" * n}} for n in range(10)]}).encode()
    s = Skimmer("variables", 3, limit=100, budget=100, inline=len(answer))
    for i in range(0, len(answer), 7):
        s.feed(answer[i : i + 7])
    assert s.skeleton() == answer
    assert s.values == [] and s.left == 100
    truncated = Skimmer("variables", 3, limit=100, budget=100)
    truncated.feed(b'{"jobs":[{"id":"a","variables":{"x":"unfinished')
    with pytest.raises(json.JSONDecodeError, match="Unterminated string"):
        json.loads(truncated.skeleton())


def test_an_answer_longer_than_a_value_kept_whole_is_scanned_from_its_first_byte() -> None:
    """GIVEN an answer that passes ``inline`` only in a later chunk THEN the bytes held until then
    are scanned too: a value over ``inline`` in the first chunk is cut all the same."""
    value = b'{"x":"' + b"0123456789" * 4 + b'"}'  # 48 bytes: begins at byte 31, cut at inline 40
    answer = b'{"jobs":[{"id":"a","variables":' + value + b'},{"id":"b","variables":{}}]}'
    s, got = skim(answer, 8, inline=40)  # 40 bytes held (the value's first 9 among them), then scanned
    cut = s.resolve(got["jobs"][0]["variables"])
    assert cut is not None and cut.raw == value
    assert got["jobs"][1]["variables"] == {}


def test_a_cut_value_that_is_not_json_reads_as_malformed() -> None:
    s, got = skim(b'{"jobs":[{"id":"a","variables":{"x":nope}}]}', 5, inline=0)
    cut = s.resolve(got["jobs"][0]["variables"])
    assert cut is not None and cut.malformed and not cut.is_object


def test_the_payload_limit_is_what_the_memory_holds() -> None:
    """The one decision: 10 MiB at the template's 256 MB, following MemorySize; a limit set above
    what the function's memory holds is refused, naming both."""
    assert Settings.from_env({}).max_payload_bytes == payload_limit(256) == 10 * MIB
    assert Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024"}).max_payload_bytes == payload_limit(1024)
    assert memory_needed(payload_limit(256)) <= 256
    with pytest.raises(ConfigurationError, match="needs a MemorySize of at least 608 MB"):
        Settings.from_env({"WORKERLESS_MAX_PAYLOAD_BYTES": str(32 * MIB)})
    raised = Settings.from_env(
        {"WORKERLESS_MAX_PAYLOAD_BYTES": str(32 * MIB), "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "640"}
    )
    assert raised.max_payload_bytes == 32 * MIB
