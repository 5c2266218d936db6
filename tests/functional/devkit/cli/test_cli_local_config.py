"""`workerless local` refuses, before anything starts, to run functions that cannot work: no engine
values, a typo'd or missing key, a malformed URL. One line naming the file and the key, exit 2
(the configuration exit code); no secret in the message."""

from __future__ import annotations

from pathlib import Path

import pytest
from workerless_devkit import cli
from workerless_devkit.emulators import sheptra

ROOT = Path(__file__).resolve().parents[4]
TEMPLATE = str(ROOT / "template.yaml")
SECRET = "secret_never_printed_0123456789"


def _block() -> dict[str, str]:
    lines = sheptra.create(auth=True).env_block("http://127.0.0.1:8080").splitlines()
    values = dict(line.split("=", 1) for line in lines if line)
    values["SHEPTRA_CLIENT_SECRET"] = SECRET
    return values


def _local(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(["local", "--template", TEMPLATE, "--until-idle", "1", *argv])
    _, err = capsys.readouterr()
    return code, err


def _write(path: Path, values: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()), encoding="utf-8")
    return str(path)


def test_no_env_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env here
    code, err = _local(capsys)
    assert code == cli.EXIT_USAGE
    assert "workerless: error: no --env-file and no .env here" in err


@pytest.mark.parametrize(
    ("change", "named"),
    [
        pytest.param(lambda v: v.update(SHEPTRA_CLIENT_IDD=v.pop("SHEPTRA_CLIENT_ID")), "SHEPTRA_CLIENT_ID", id="typo"),
        pytest.param(lambda v: v.pop("SHEPTRA_API_URL"), "SHEPTRA_API_URL", id="missing"),
        pytest.param(lambda v: v.update(SHEPTRA_API_URL="htp:/127.0.0.1"), "SHEPTRA_API_URL", id="malformed-url"),
    ],
)
def test_bad_engine_values_are_refused_naming_the_key(
    change: object, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the emulator's connection values with one mistake
    values = _block()
    change(values)  # type: ignore[operator]
    env_file = _write(tmp_path / "sheptra.env", values)
    # WHEN local runs with them
    code, err = _local(capsys, "--env-file", env_file)
    # THEN it stops before starting, naming the file and the key, and no secret
    assert code == cli.EXIT_USAGE, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"workerless: error: {env_file}: ") and named in last, err
    assert SECRET not in err
    assert "draining" not in err  # nothing was started


@pytest.mark.parametrize(
    ("key", "likely"),
    [
        pytest.param("SHEPTRA_MDOE", "did you mean SHEPTRA_MODE?", id="swapped-letters"),
        pytest.param("SHEPTRA_TENANT_ID", "did you mean SHEPTRA_TENANT_IDS?", id="singular"),
        pytest.param("SHEPTRA_XYZZY", "sheptra reads SHEPTRA_API_URL", id="nothing-close"),
    ],
)
def test_a_key_that_looks_like_the_engines_but_is_not_read_is_refused(
    key: str, likely: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the emulator's connection values, complete, plus a key the engine does not read (issue 27:
    # SHEPTRA_MDOE=discovery was ignored, the run went on in config mode and exited 0)
    values = {**_block(), key: "discovery"}
    env_file = _write(tmp_path / "sheptra.env", values)
    # WHEN local runs with them
    code, err = _local(capsys, "--env-file", env_file)
    # THEN one line names the file, the key and what it likely meant; nothing ran
    assert code == cli.EXIT_USAGE, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"workerless: error: {env_file}: {key} is not a key sheptra reads; "), err
    assert likely in last
    assert SECRET not in err
    assert "draining" not in err  # nothing was started


def test_the_runtime_refuses_a_key_it_does_not_read_in_its_values() -> None:
    from workerless._core.settings import check_engine_keys
    from workerless.errors import ConfigurationError

    check_engine_keys({"NF_URL": "http://127.0.0.1:1", "NF_API_KEY": "k", "WORKERLESS_ENGINE": "nodeflow"})
    with pytest.raises(
        ConfigurationError, match=r"NF_NAMESAPCE is not a key nodeflow reads; did you mean NF_NAMESPACE\?"
    ):
        check_engine_keys({"NF_URL": "http://127.0.0.1:1", "NF_NAMESAPCE": "x"})
