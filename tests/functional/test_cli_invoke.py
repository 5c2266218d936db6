"""`workerless invoke TYPE`: one handler, one made-up job, the outcome that would be reported as JSON on
stdout; exit 0 only when the job would complete."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from workerless_devkit import cli

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_an_example_handler_completes_or_fails_terminally(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, out, err = run(capsys, "invoke", "charge-payment", "--variables", '{"orderId": "7", "amount": 12.5}')
    assert code == 0, err
    report = json.loads(out)
    assert report["outcome"] == {"kind": "complete", "variables": {"paymentOk": True, "chargeId": "ch_7"}}
    assert report["logs"] == ["charging 12.5 for order 7"]

    code, out, _ = run(capsys, "invoke", "charge-payment", "--variables", '{"amount": 0}')
    assert code == 1
    outcome = json.loads(out)["outcome"]
    assert (outcome["kind"], outcome["terminal"], outcome["retries"]) == ("fail", True, 0)
    assert "amount must be a positive number" in outcome["message"]


def test_throw_a_plain_exception_and_variables_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    functions = tmp_path / "functions"
    (functions / "check-stock").mkdir(parents=True)
    (functions / "check-stock" / "app.py").write_text(
        textwrap.dedent("""
        from workerless import Job, ThrowError, job_handler

        @job_handler("check-stock")
        def handler(job: Job) -> dict:
            if job.variables.get("sku") == "gone":
                raise ThrowError("OUT_OF_STOCK", "no stock", variables={"sku": "gone"})
            raise RuntimeError("warehouse API timed out")
        """)
    )
    variables = tmp_path / "vars.json"
    variables.write_text('{"sku": "gone"}')
    code, out, _ = run(
        capsys, "invoke", "check-stock", "--variables", f"@{variables}", "--functions-dir", str(functions)
    )
    assert code == 1
    assert json.loads(out)["outcome"] == {
        "kind": "throw",
        "error_code": "OUT_OF_STOCK",
        "message": "no stock",
        "variables": {"sku": "gone"},
    }
    code, out, _ = run(capsys, "invoke", "check-stock", "--retries", "2", "--functions-dir", str(functions))
    outcome = json.loads(out)["outcome"]
    assert code == 1 and (outcome["kind"], outcome["retries"], outcome["terminal"]) == ("fail", 1, False)
    assert "warehouse API timed out" in outcome["message"]


def test_mistakes_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    functions = tmp_path / "functions"
    (functions / "misnamed").mkdir(parents=True)
    (functions / "misnamed" / "app.py").write_text(
        'from workerless import job_handler\n\n@job_handler("other-type")\ndef handler(job):\n    return {}\n'
    )
    cases = [
        (["invoke", "nope", "--functions-dir", str(functions)], "no handler for job type 'nope'"),
        (["invoke", "misnamed", "--functions-dir", str(functions)], "handles job type 'other-type', not 'misnamed'"),
        (["invoke", "misnamed", "--variables", "{bad", "--functions-dir", str(functions)], "is not valid JSON"),
        (["invoke", "misnamed", "--variables", "[1]", "--functions-dir", str(functions)], "must be a JSON object"),
        (["invoke", "misnamed", "--variables", "@/no/such.json"], "cannot read variables file"),
    ]
    for argv, message in cases:
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, ""), argv
        assert message in err and err.count("\n") == 1, err
