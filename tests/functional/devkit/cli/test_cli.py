"""The workerless command: user errors are one line and exit 2; `local --until-idle` and `demo` run to
completion; emulator options reach only the emulators that take them."""

from __future__ import annotations

import gc
import textwrap
from pathlib import Path

import pytest
from workerless._core.settings import parse_env_text
from workerless_devkit import cli

REPO = Path(__file__).resolve().parents[4]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_configuration_errors_print_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "local", "--template", str(tmp_path / "missing.yaml"))
    assert code == 2
    assert err.startswith("workerless: error: cannot read template")
    assert err.count("\n") == 1 and "Traceback" not in err

    template = tmp_path / "template.yaml"
    template.write_text(
        textwrap.dedent("""
        Resources:
          F:
            Type: AWS::Serverless::Function
            Properties:
              CodeUri: f/
              Handler: app.handler
              Environment: {Variables: {X: !ImportValue elsewhere}}
        """)
    )
    code, _, err = run(capsys, "local", "--template", str(template), "--until-idle", "0.1")
    assert code == 2
    assert "F.Environment.Variables.X: intrinsic function Fn::ImportValue" in err
    assert err.count("\n") == 1

    code, _, err = run(capsys, "local", "--template", str(template), "--parameter-overrides", "novalue")
    assert (code, err) == (2, "workerless: error: parameter override 'novalue' is not KEY=VALUE\n")


def test_local_until_idle_runs_and_prints_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GIVEN a template whose scheduled function does nothing WHEN `local --until-idle` runs THEN it exits
    0 once idle and prints the summary table and the invocation counts."""
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "app.py").write_text("def handler(event, context):\n    return None\n")
    (tmp_path / "template.yaml").write_text(
        textwrap.dedent("""
        Resources:
          Queue:
            Type: AWS::SQS::Queue
          F:
            Type: AWS::Serverless::Function
            Properties:
              CodeUri: f/
              Handler: app.handler
              Events:
                Jobs: {Type: SQS, Properties: {Queue: !GetAtt Queue.Arn}}
                Tick: {Type: Schedule, Properties: {Schedule: rate(1 minute)}}
        """)
    )
    code, out, err = run(
        capsys,
        "local",
        "--template",
        str(tmp_path / "template.yaml"),
        "--until-idle",
        "0.5",
        "--max-seconds",
        "10",
        "--schedule-seconds",
        "0.2",
    )
    assert code == 0, err
    assert "job type" in out and "(no jobs)" in out
    assert "invocations: F " in out
    assert "F: app.handler in f/ <- SQS Queue (batch 10), schedule rate(1 minute)" in err


# workerless.runtime.reset() drops the engine without closing the httpx client get_engine() built
# for it (the adapter's close() leaves the injected client to its owner): collect those sockets here,
# under this filter, instead of failing whichever later test the garbage collector runs in.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_demo_completes_every_job(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo against the real template and example handlers: every job completes at the emulator,
    and in the readable format (a terminal's default) each job's outcome is one short line naming
    the function that wrote it, the job's type and id."""
    monkeypatch.chdir(REPO)
    # capfd, not capsys: the functions' log handler holds the stdout it found when it was built.
    code, out, err = run(capfd, "demo", "--jobs", "2", "--max-seconds", "30", "--log-format", "readable")
    gc.collect()
    assert code == 0, out + err
    assert "demo: all 2 jobs completed" in out
    assert "charge-payment" in out and "send-receipt" in out
    outcome_lines = [line for line in (out + err).splitlines() if line.endswith("job completed")]
    assert any(" chargepaymentFunction  charge-payment " in line for line in outcome_lines), out + err
    assert any(" sendreceiptFunction  send-receipt " in line for line in outcome_lines), out + err


def test_overrides_env_lines_and_emulator_options() -> None:
    assert cli.parse_overrides(["A=1", "B=x=y", "ParameterKey=C,ParameterValue=3"]) == {"A": "1", "B": "x=y", "C": "3"}
    values = {"PLAIN": "http://127.0.0.1:1/x", "EMPTY": "", "SPACED": "a b # c", "QUOTED": "it's"}
    assert parse_env_text(cli.env_lines(values)) == values
    assert cli.create_emulator("sheptra", auth=False).auth is False
    with pytest.raises(cli.UsageError, match="the nodeflow emulator has no --auth switch"):
        cli.create_emulator("nodeflow", auth=True)
