"""Every `workerless` command's options (issue 27, 5): global options after the subcommand too, no
negative number accepted, help text on every argument, and `init` into a place it cannot write is
one line, exit 2."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from workerless_devkit import cli


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def _commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    return [(path, p) for path, p in _parsers(cli.build_parser()) if p.get_default("run") is not None]


def test_every_argument_of_every_command_has_help_text() -> None:
    missing = [
        f"{' '.join(path) or 'workerless'} {action.option_strings or action.dest}"
        for path, parser in _parsers(cli.build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()
    ]
    assert missing == []


@pytest.mark.parametrize("where", ["before", "after"])
def test_the_log_level_is_taken_before_or_after_the_subcommand(where: str) -> None:
    parser = cli.build_parser()
    argv = ["--log-level", "DEBUG", "demo"] if where == "before" else ["demo", "--log-level", "DEBUG"]
    assert parser.parse_args(argv).log_level == "DEBUG"
    assert parser.parse_args(["demo"]).log_level is None


def test_every_subcommand_takes_the_global_options() -> None:
    commands = _commands()
    assert len(commands) >= 10
    for path, parser in commands:
        assert "--log-level" in parser._option_string_actions, path


def test_no_numeric_option_takes_a_negative_value(capsys: pytest.CaptureFixture[str]) -> None:
    numeric = [
        (path, action.option_strings[0])
        for path, parser in _commands()
        for action in parser._actions
        if action.option_strings
        and action.type is not None
        and getattr(action.type, "__name__", "") in ("int", "float")
    ]
    # demo --jobs, --max-seconds, local --until-idle, --status-every, dlq show --limit, invoke --retries, ...
    assert len(numeric) >= 12, numeric
    for path, option in numeric:
        with pytest.raises(SystemExit) as exited:
            cli.build_parser().parse_args([*path, option, "-1"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {option}" in err and "must not be negative, got -1" in err, (path, option, err)


def test_zero_and_positive_values_still_parse() -> None:
    args = cli.build_parser().parse_args(["demo", "--jobs", "0", "--max-seconds", "2.5"])
    assert (args.jobs, args.max_seconds) == (0, 2.5)


@pytest.mark.parametrize("where", ["through-a-file", "unwritable"])
def test_init_where_it_cannot_write_is_one_line(where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if where == "through-a-file":
        blocker = tmp_path / "a-file"
        blocker.write_text("x", encoding="utf-8")
        target = blocker / "myapp"
    else:
        # /sys refuses a new directory even to root (chmod does not stop root); elsewhere, a read-only dir.
        if os.geteuid() == 0:
            target = Path("/sys/workerless-myapp")
        else:
            locked = tmp_path / "locked"
            locked.mkdir(mode=0o500)
            target = locked / "myapp"
    code = cli.main(["init", str(target)])
    _, err = capsys.readouterr()
    assert code == cli.EXIT_USAGE
    assert err.count("\n") == 1, err
    assert err.startswith(f"workerless: error: cannot create {target}: "), err
    assert "Traceback" not in err
