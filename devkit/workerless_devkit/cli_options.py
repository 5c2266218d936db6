"""Rules every ``workerless`` command's options follow, applied once to the whole parser tree.

- The global options (``--log-level``) are accepted after the subcommand too
  (``workerless local --log-level DEBUG``): each subcommand gets a copy whose default is
  ``argparse.SUPPRESS``, so a value given before the subcommand is not overwritten by the copy.
- No number is negative: a duration, count, port or limit below zero is refused by argparse
  (exit 2, one line naming the option) rather than treated as "none" or "forever" somewhere later.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import Any

#: The options of the top-level parser that every subcommand also takes.
GLOBAL_OPTIONS = ("--log-level",)


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield sub
                yield from _subparsers(sub)


def _non_negative(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def checked(text: str) -> Any:
        value = convert(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
        return value

    checked.__name__ = convert.__name__  # argparse names the type in "invalid int value" messages
    return checked


def apply_option_rules(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Apply the rules above to ``parser`` and every subcommand under it; returns ``parser``."""
    globals_ = [a for a in parser._actions if any(s in GLOBAL_OPTIONS for s in a.option_strings)]
    for each in (parser, *_subparsers(parser)):
        for action in each._actions:
            if action.type in (int, float):
                action.type = _non_negative(action.type)
        if each is parser:
            continue
        for option in globals_:
            if not any(s in each._option_string_actions for s in option.option_strings):
                each.add_argument(*option.option_strings, dest=option.dest, default=argparse.SUPPRESS, help=option.help)
    return parser
