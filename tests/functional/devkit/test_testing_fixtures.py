"""workerless_devkit.pytest_plugin: the fixtures installing the devkit registers (pytest11), used
here as a handler author would use them (emulators on 127.0.0.1, local mode on moto, metrics captured)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from workerless.testing import FakeEngine, assert_completed, run_handler

if TYPE_CHECKING:  # imported by pytest as a plugin, not by the test (assertion rewriting)
    from workerless_devkit.pytest_plugin import Emulator

ROOT = Path(__file__).resolve().parents[3]
FINAL = {"completed", "failed", "thrown"}


def test_fake_engine_fixture_is_fresh(fake_engine: FakeEngine) -> None:
    job_id = fake_engine.add_job("t", {"a": 1})
    assert list(fake_engine.jobs) == [job_id]


@pytest.mark.parametrize(
    ("fixture", "engine", "key"),
    [
        ("sheptra_emulator", "sheptra", "SHEPTRA_API_URL"),
        ("nodeflow_emulator", "nodeflow", "NF_URL"),
        ("stagenext_emulator", "stagenext", "STAGENEXT_API_URL"),
    ],
)
def test_each_engine_emulator_is_served_on_loopback_with_an_env_file(
    request: pytest.FixtureRequest, fixture: str, engine: str, key: str
) -> None:
    emulator: Emulator = request.getfixturevalue(fixture)
    assert emulator.engine == engine
    assert emulator.url.startswith("http://127.0.0.1:")
    assert emulator.values[key].startswith(emulator.url)
    text = emulator.env_file.read_text(encoding="utf-8")
    assert f"WORKERLESS_ENGINE={engine}\n" in text
    assert f"{key}={emulator.values[key]}" in text
    job_id = emulator.create_job("charge-payment", {"orderId": "1", "amount": 5})
    assert emulator.job_state(job_id)["state"] == "ready"


def test_the_emulator_factory_takes_the_emulators_options(workerless_emulator: Any) -> None:
    emulator = workerless_emulator("sheptra", auth=False)
    assert emulator.values["SHEPTRA_TOKEN_ENDPOINT"] == ""  # auth off: nothing to mint from
    with httpx.Client(timeout=5) as client:
        answer = client.post(f"{emulator.values['SHEPTRA_API_URL']}/v1/jobs/activate", json={"types": ["t"]})
    assert answer.status_code == 200
    with pytest.raises(ValueError, match="unknown engine 'camunda'"):
        workerless_emulator("camunda")


def test_a_handler_runs_through_the_whole_local_pipeline_against_an_emulator(
    sheptra_emulator: Emulator, workerless_local: Any, workerless_metrics: list[dict[str, Any]]
) -> None:
    """GIVEN the Sheptra emulator with one charge-payment job, and the example handler
    WHEN the template runs locally (local mode, moto) with metrics captured
    THEN the job completes at the emulator with the handler's variables, the same outcome run_handler
    predicts, and the invocations wrote EMF metrics counting it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("charge_app", ROOT / "functions" / "chargepayment" / "app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    predicted = assert_completed(run_handler(module.handler, {"orderId": "42", "amount": 9}))

    job_id = sheptra_emulator.create_job("charge-payment", {"orderId": "42", "amount": 9})
    topology = workerless_local(
        sheptra_emulator.env_file,
        ROOT / "template.yaml",
        parameters={"TickSeconds": "1"},
        schedule_seconds=1,
    )
    done = topology.run_until(lambda: sheptra_emulator.job_state(job_id)["state"] in FINAL, max_seconds=120)

    state = sheptra_emulator.job_state(job_id)
    assert done, state
    assert state["state"] == "completed"
    assert {k: state["output"][k] for k in predicted} == predicted
    # Each invocation writes its metrics when it ends: the handler's after the engine has the
    # result, the dispatching poller's after it has relayed. Wait for both (bounds to give up at).
    assert topology.run_until(lambda: any("JobsCompleted" in d for d in workerless_metrics), max_seconds=120)
    assert topology.run_until(lambda: any("JobsActivated" in d for d in workerless_metrics), max_seconds=120)
    completed = [d for d in workerless_metrics if "JobsCompleted" in d]
    assert sum(v for d in completed for v in d["JobsCompleted"]) == 1


def test_load_handler_loads_a_functions_app_module_afresh_each_time(tmp_path: Path) -> None:
    from workerless.testing import load_handler

    handler = load_handler(ROOT / "functions" / "sendreceipt" / "app.py")
    assert handler.job_type == "send-receipt"
    assert load_handler(str(ROOT / "functions" / "sendreceipt" / "app.py")) is not handler  # a fresh module
    (tmp_path / "app.py").write_text("value = 1\n")
    with pytest.raises(AttributeError, match="defines no 'handler'"):
        load_handler(tmp_path / "app.py")
