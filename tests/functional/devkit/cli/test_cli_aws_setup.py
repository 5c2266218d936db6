"""The AWS-facing commands (secrets import, status, dlq) on a machine without AWS set up: one line
naming what is missing, the configuration exit code (2), and no call made."""

from __future__ import annotations

from pathlib import Path

import pytest
from workerless_devkit import cli
from workerless_devkit.devtools.clients import aws_client

COMMANDS = [
    ["status", "--stack-name", "workerless"],
    ["dlq", "show", "--stack-name", "workerless"],
    ["dlq", "redrive", "--stack-name", "workerless"],
]


@pytest.fixture
def bare_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No AWS environment variables, no config or credentials file, no instance metadata lookup."""
    for name in (
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # nothing leaves loopback
    env = tmp_path / ".env"
    env.write_text("WORKERLESS_ENGINE=nodeflow\nNF_API_URL=http://127.0.0.1:9\nNF_API_KEY=k\n", encoding="utf-8")
    return env


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = cli.main(argv)
    _, err = capsys.readouterr()
    return code, err


@pytest.mark.parametrize("argv", [*COMMANDS, ["secrets", "import"]], ids=" ".join)
def test_no_region_is_one_line_and_exit_2(
    argv: list[str], bare_machine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--env-file", str(bare_machine)] if argv[0] == "secrets" else []
    code, err = _run(capsys, [*argv, *extra])
    assert code == cli.EXIT_USAGE
    assert err.startswith("workerless: error: no region: pass --region, or set AWS_REGION")
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv", [*COMMANDS, ["secrets", "import"]], ids=" ".join)
def test_no_credentials_is_one_line_and_exit_2(
    argv: list[str], bare_machine: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    extra = ["--env-file", str(bare_machine)] if argv[0] == "secrets" else []
    code, err = _run(capsys, [*argv, *extra])
    assert code == cli.EXIT_USAGE
    assert err.startswith("workerless: error: no credentials: run `aws configure`")
    assert len(err.strip().splitlines()) == 1, err


def test_an_unknown_profile_is_named(bare_machine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, ["status", "--stack-name", "workerless", "--region", "us-east-1", "--profile", "nope"])
    assert code == cli.EXIT_USAGE
    assert err.strip() == "workerless: error: no AWS profile named 'nope' (see `aws configure list-profiles`)"


def test_the_region_comes_from_the_flag_then_aws_region_then_aws_default_region(
    bare_machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert aws_client("sqs").meta.region_name == "ap-south-1"
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert aws_client("sqs").meta.region_name == "eu-west-1"
    assert aws_client("sqs", region="us-west-2").meta.region_name == "us-west-2"
