"""`workerless secrets import` on moto's Secrets Manager: validated first, only the engine's keys
stored, created then updated, and no value ever printed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from workerless._core.settings import parse_env_text
from workerless.aws.secrets import parse_secret_text
from workerless_devkit import cli
from workerless_devkit.emulators import nodeflow, sheptra, stagenext


@pytest.fixture
def secretsmanager() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_sheptra_block_as_drive_prints_it_is_stored_without_echoing_a_value(
    tmp_path: Path, secretsmanager: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN an env file with the Sheptra block (and an unrelated line) WHEN it is imported twice THEN
    the secret holds exactly the SHEPTRA_* values, the first run creates and the second updates it,
    and the output names keys and the ARN but no value."""
    emulator = sheptra.create(auth=True)
    block = emulator.env_block("http://127.0.0.1:8080")
    env = tmp_path / ".env"
    env.write_text(block + "OTHER_TOOL_TOKEN=do-not-store-me\n", encoding="utf-8")
    expected = parse_env_text(block)

    code, out, err = run(capsys, "secrets", "import", "--env-file", str(env), "--secret-name", "wl/test")
    assert code == 0, err
    assert out.startswith("created secret wl/test (sheptra): ")
    assert "not stored (not sheptra keys): OTHER_TOOL_TOKEN" in out
    arn = secretsmanager.describe_secret(SecretId="wl/test")["ARN"]
    assert f"EngineSecretArn: {arn}" in out
    stored = secretsmanager.get_secret_value(SecretId="wl/test")["SecretString"]
    assert parse_secret_text(stored) == expected
    for key, value in expected.items():
        assert key in out
        if len(value) > 3:
            assert value not in out + err, f"the value of {key} was printed"

    code, out, _ = run(capsys, "secrets", "import", "--env-file", str(env), "--secret-name", "wl/test")
    assert code == 0 and out.startswith("updated secret wl/test (sheptra)")
    assert len(secretsmanager.list_secret_version_ids(SecretId="wl/test")["Versions"]) == 2


@pytest.mark.parametrize("module", [nodeflow, stagenext])
def test_node_flow_and_stagenext_keys_are_recognised(
    module: Any, tmp_path: Path, secretsmanager: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    values = module.create().engine_values("http://127.0.0.1:8080")
    env = tmp_path / ".env"
    env.write_text(cli.env_lines(values), encoding="utf-8")
    code, out, err = run(capsys, "secrets", "import", "--env-file", str(env))
    assert code == 0, err
    name = module.__name__.rsplit(".", 1)[-1]
    assert out.startswith(f"created secret workerless/engine ({name}): {', '.join(sorted(values))}")
    assert json.loads(secretsmanager.get_secret_value(SecretId="workerless/engine")["SecretString"]) == values


def test_invalid_values_are_refused_before_anything_is_stored(
    tmp_path: Path, secretsmanager: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / ".env"
    env.write_text("NF_URL=http://nodeflow.example.com\nNF_API_KEY=nf-live-key-123456\n", encoding="utf-8")
    code, out, err = run(capsys, "secrets", "import", "--env-file", str(env))
    assert code == 2 and out == ""
    assert "NF_URL must use https" in err and "nf-live-key-123456" not in err

    env.write_text("SHEPTRA_API_URL=https://sheptra.example.com\n", encoding="utf-8")  # no token endpoint line
    code, _, err = run(capsys, "secrets", "import", "--env-file", str(env))
    assert code == 2 and "SHEPTRA_TOKEN_ENDPOINT is missing" in err

    env.write_text("SHEPTRA_API_URL=https://a\nNF_URL=https://b\n", encoding="utf-8")
    code, _, err = run(capsys, "secrets", "import", "--env-file", str(env))
    assert code == 2 and "keys of several engines" in err

    code, _, err = run(capsys, "secrets", "import", "--env-file", str(tmp_path / "missing.env"))
    assert code == 2 and "cannot read env file" in err
    assert secretsmanager.list_secrets()["SecretList"] == []
