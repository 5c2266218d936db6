"""Sizes as AWS measures them against its limits (workerless_devkit/local/limits.py), by the documented rules."""

from __future__ import annotations

import base64

import pytest
from workerless_devkit.local.limits import item_size, message_size


def test_an_sqs_message_counts_utf8_bytes_of_the_body_and_every_attribute_part() -> None:
    assert message_size("héllo", None) == 6
    attributes = {
        "trace": {"DataType": "String", "StringValue": "é"},  # 5 + 6 + 2
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\x02"},  # 4 + 6 + 3
    }
    assert message_size("x", attributes) == 1 + 13 + 13


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ({"S": "héllo"}, 6),
        ({"N": "123"}, 3),  # 3 significant digits: 2 bytes, + 1
        ({"N": "1000"}, 2),  # trailing zeroes trimmed: "1"
        ({"N": "0.00125"}, 3),  # leading zeroes trimmed: "125"
        ({"N": "-12.5"}, 3),
        ({"B": b"\x00" * 10}, 10),
        ({"BOOL": True}, 1),
        ({"NULL": True}, 1),
        ({"SS": ["a", "bc"]}, 3),
        ({"L": []}, 3),
        ({"L": [{"S": "ab"}, {"N": "7"}]}, 3 + (1 + 2) + (1 + 2)),
        ({"M": {"k": {"S": "v"}}}, 3 + 1 + 1 + 1),
    ],
)
def test_a_dynamodb_value_is_sized_by_awss_rules(value: dict[str, object], size: int) -> None:
    assert item_size({"a": value}) == 1 + size


def test_names_count_and_stored_binary_is_measured_decoded() -> None:
    assert item_size({"pk": {"S": "job#1"}, "outcome": {"B": b"zz"}}) == 2 + 5 + 7 + 2
    stored = {"outcome": {"B": base64.b64encode(b"zz").decode()}}
    assert item_size(stored, base64_text=True) == 7 + 2
