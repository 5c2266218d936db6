"""What every emulator shares (workerless_devkit.emulators.core and .harness): one jobs-file format,
the same admin routes, one way to start one and write its env file."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from workerless._core.settings import parse_env_text
from workerless.engines import ENGINE_NAMES
from workerless_devkit import cli
from workerless_devkit.emulators import start
from workerless_devkit.emulators.core import JobSpec, parse_jobs
from workerless_devkit.pytest_plugin import EmulatorFactory

#: One file for every engine: the common keys, node-flow's domain, Sheptra's tenant, StageNext's
#: application (the default one) — each engine takes its own keys and ignores the others'.
JOBS = [
    {"type": "charge-payment", "variables": {"orderId": "1", "amount": 5}},
    {"type": "send-receipt", "retries": 1, "tenantId": "<default>", "application": "local-app"},
]


def test_the_jobs_file_accepts_a_list_a_wrapper_or_one_job_and_the_old_spellings() -> None:
    assert parse_jobs(json.dumps(JOBS)) == parse_jobs(json.dumps({"jobs": JOBS}))
    assert parse_jobs('{"type": "a"}') == [JobSpec("a")]
    assert parse_jobs('[{"taskDefName": "a", "input": {"x": 1}}]') == [JobSpec("a", {"x": 1})]
    assert parse_jobs('[{"jobType": "a"}]') == [JobSpec("a")]
    with pytest.raises(ValueError, match="job 1 needs a 'type'"):
        parse_jobs('[{"type": "a"}, {"variables": {}}]')
    with pytest.raises(ValueError, match="'variables' must be a JSON object"):
        parse_jobs('[{"type": "a", "variables": []}]')
    with pytest.raises(ValueError, match="'retries' must be an integer"):
        parse_jobs('[{"type": "a", "retries": "3"}]')
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_jobs("[")


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_one_jobs_file_serves_every_engine(engine: str, tmp_path: Path, workerless_emulator: EmulatorFactory) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(JOBS), encoding="utf-8")
    running = workerless_emulator(engine, jobs=path)
    jobs = running.jobs()
    assert [(j["type"], j["state"], j["retries"]) for j in jobs] == [
        ("charge-payment", "ready", 3),
        ("send-receipt", "ready", 1),
    ]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_every_emulator_serves_the_same_admin_routes(engine: str, workerless_emulator: EmulatorFactory) -> None:
    running = workerless_emulator(engine)
    with httpx.Client(base_url=running.url, timeout=5) as http:
        one = http.post("/_admin/jobs", json={"type": "charge-payment", "variables": {"a": 1}})
        assert one.status_code == 201, one.text
        job_id = one.json()["id"]
        batch = http.post("/_admin/jobs", json=[{"type": "ship"}, {"type": "ship", "retries": 2}])
        assert [j["type"] for j in batch.json()["jobs"]] == ["ship", "ship"]
        assert http.get(f"/_admin/jobs/{job_id}").json()["state"] == "ready"
        assert http.get("/_admin/jobs/nope").status_code == 404
        assert len(http.get("/_admin/jobs").json()["jobs"]) == 3
        assert [j["type"] for j in http.get("/_admin/jobs", params={"type": "ship"}).json()["jobs"]] == ["ship"] * 2
        assert http.post("/_admin/jobs", json={"variables": {}}).status_code == 400
        before = running.now()
        clock = http.post("/_admin/clock", json={"advance": 30}).json()
        assert clock["now"] == clock["epoch"] >= before + 30
        assert clock["offset"] == 30 and clock["iso"].endswith("Z")
        assert http.post("/_admin/clock", json={"advance": -1}).status_code == 400
    with pytest.raises(ValueError, match="only moves forward"):
        running.advance(-1)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_start_gives_the_url_values_and_the_env_file(engine: str, tmp_path: Path) -> None:
    with start(engine) as running:
        assert running.values == running.emulator.engine_values(running.url)
        path = running.write_env_file(tmp_path / "x.env", EXTRA="a b")
        assert running.env_file == path
        assert parse_env_text(path.read_text(encoding="utf-8")) == {
            "WORKERLESS_ENGINE": engine,
            **running.values,
            "EXTRA": "a b",
        }
        assert httpx.get(running.url + "/_admin/jobs", timeout=5).json() == {"jobs": []}
    with pytest.raises(httpx.TransportError):
        httpx.get(running.url + "/_admin/jobs", timeout=5)


def test_start_refuses_an_unknown_engine_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="choose one of sheptra"):
        start("zeebe")


def test_the_cli_reports_a_bad_jobs_file_as_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text('[{"variables": {}}]', encoding="utf-8")
    with pytest.raises(cli.UsageError, match="job 0 needs a 'type'"):
        cli.start_emulator("nodeflow", jobs=str(path))
    with pytest.raises(cli.UsageError, match="not found"):
        cli.start_emulator("nodeflow", jobs=str(tmp_path / "missing.json"))
