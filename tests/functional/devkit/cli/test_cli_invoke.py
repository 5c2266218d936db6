"""`workerless invoke TYPE`: one handler, one made-up job, the outcome that would be reported as JSON on
stdout; exit 0 only when the job would complete."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from workerless_devkit import cli

ROOT = Path(__file__).resolve().parents[4]


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
    # Typed input: every bad field named (pydantic's words), before the handler runs.
    assert "orderId: Field required" in outcome["message"]
    assert "amount: Value error, amount must be a positive number" in outcome["message"]


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


def _functions(tmp_path: Path, **apps: str) -> Path:
    functions = tmp_path / "functions"
    for job_type, source in apps.items():
        (functions / job_type).mkdir(parents=True)
        (functions / job_type / "app.py").write_text(textwrap.dedent(source))
    return functions


def test_a_mistyped_type_suggests_the_nearest_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    functions = _functions(tmp_path, **{"ship-parcel": "def handler(event, context):\n    return None\n"})
    code, out, err = run(capsys, "invoke", "ship-parcle", "--functions-dir", str(functions))
    assert (code, out) == (2, "")
    assert err.strip().endswith("did you mean 'ship-parcel'?"), err
    assert "new-handler" not in err  # not "scaffold ship-parcle"


@pytest.mark.parametrize(
    ("source", "says"),
    [
        pytest.param(
            "def handler(event, context):\n    return {}\n",
            "`handler` is not wrapped by @job_handler('broken')",
            id="not-wrapped",
        ),
        pytest.param("def handler(:\n    pass\n", "app.py line 1: SyntaxError: ", id="syntax-error"),
        pytest.param(
            "import os\nraise RuntimeError('no config')\n", "raised RuntimeError at import", id="import-error"
        ),
    ],
)
def test_a_handler_that_cannot_run_in_lambda_is_said_so_with_exit_3(
    source: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    functions = _functions(tmp_path, broken=source)
    code, out, err = run(capsys, "invoke", "broken", "--functions-dir", str(functions))
    # exit 3: not "the job would fail" (1), not a command-line mistake (2)
    assert (code, out) == (cli.EXIT_HANDLER_BROKEN, "")
    assert says in err.splitlines()[0], err
    assert "Traceback" not in err  # the app's own lines, not the loader's
    if "SyntaxError" in says:
        assert "def handler(:" in err and "^" in err
    if "import" in says:
        assert 'app.py", line 2, in <module>' in err and "RuntimeError: no config" in err


def test_a_crash_is_a_readable_traceback_and_a_job_log_line_is_printed_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    functions = _functions(
        tmp_path,
        crash="""
        from workerless import Job, job_handler

        @job_handler("crash")
        def handler(job: Job) -> dict:
            job.log("about to divide")
            return {"x": 1 / 0}
        """,
    )
    code, out, err = run(capsys, "invoke", "crash", "--functions-dir", str(functions))
    assert code == 1
    report = json.loads(out)
    assert report["logs"] == ["about to divide"]
    assert "about to divide" not in err  # in the report only
    assert "Traceback (most recent call last):" in err and "ZeroDivisionError: division by zero" in err
    assert 'crash/app.py", line 7, in handler' in err
    assert not [line for line in err.splitlines() if line.startswith("{")]  # readable, not JSON


def test_an_async_typed_handler_runs_as_the_wrapper_runs_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GIVEN an ``async def`` handler taking ``Job[Model]`` and returning a model
    THEN invoke completes with the model's aliased dump, and invalid input is the terminal failure
    naming each field (exit 1: the job would fail, not 3: the handler itself is fine)."""
    functions = tmp_path / "functions"
    (functions / "ship-parcel").mkdir(parents=True)
    (functions / "ship-parcel" / "app.py").write_text(
        textwrap.dedent("""
        from __future__ import annotations

        import asyncio

        from pydantic import BaseModel, ConfigDict, Field

        from workerless import Job, job_handler

        class Parcel(BaseModel):
            parcel_id: str = Field(alias="parcelId")
            weight_kg: float = Field(alias="weightKg", gt=0)

        class Shipped(BaseModel):
            model_config = ConfigDict(populate_by_name=True)
            tracking: str = Field(alias="trackingNumber")

        @job_handler("ship-parcel")
        async def handler(job: Job[Parcel]) -> Shipped:
            await asyncio.sleep(0)
            job.log(f"shipping {job.input.parcel_id}")
            return Shipped(tracking=f"T-{job.input.parcel_id}")
        """)
    )
    code, out, err = run(
        capsys,
        "invoke",
        "ship-parcel",
        "--variables",
        '{"parcelId": "p1", "weightKg": 2}',
        "--functions-dir",
        str(functions),
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["outcome"] == {"kind": "complete", "variables": {"trackingNumber": "T-p1"}}
    assert report["logs"] == ["shipping p1"]

    code, out, _ = run(
        capsys, "invoke", "ship-parcel", "--variables", '{"weightKg": "heavy"}', "--functions-dir", str(functions)
    )
    assert code == 1
    outcome = json.loads(out)["outcome"]
    assert (outcome["kind"], outcome["terminal"], outcome["retries"]) == ("fail", True, 0)
    assert "parcelId: Field required" in outcome["message"]
    assert "weightKg: Input should be a valid number" in outcome["message"]
