"""The cost model counts Lambda's own START/END/REPORT bytes only where the template lets them
through (LoggingConfig: SystemLogLevel INFO or DEBUG, or the Text format)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import cost

ROOT = Path(__file__).resolve().parents[3]
WARN_DEFAULT = "SystemLogLevel: {Type: String, Default: WARN,"


def _template_with(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "template.yaml"  # beside nothing: the functions' code is not read here
    path.write_text(text, encoding="utf-8")
    return path


def test_the_templates_default_writes_no_platform_lines() -> None:
    assert WARN_DEFAULT in (ROOT / "template.yaml").read_text(encoding="utf-8")
    assert cost.platform_log_bytes(ROOT / "template.yaml") == 0


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (WARN_DEFAULT, "SystemLogLevel: {Type: String, Default: INFO,"),
        ("      LogFormat: JSON\n", "      LogFormat: Text\n"),
    ],
)
def test_info_or_the_text_format_brings_them_back(tmp_path: Path, old: str, new: str) -> None:
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    assert old in text
    changed = text.replace(old, new)
    if "Text" in new:  # Lambda refuses a level with the Text format: drop the levels too
        changed = changed.replace(
            "      ApplicationLogLevel: !FindInMap [ApplicationLogLevels, !Ref LogLevel, Level]\n", ""
        ).replace("      SystemLogLevel: !Ref SystemLogLevel\n", "")
    assert cost.platform_log_bytes(_template_with(tmp_path, changed)) == cost.LAMBDA_PLATFORM_LOG_BYTES


def test_the_per_job_and_idle_models_use_the_templates_figure() -> None:
    shape = {"tick_seconds": 20, "schedule_seconds": [60.0], "sqs_event_sources": 0, "routes": 1}
    idle = {"log_bytes": 0.0, "cpu_s": 0.0, "sqs_calls": 0, "ddb_calls": 0, "engine_calls": 0}
    idle.update({"sqs_requests": 0, "wru": 0, "rru": 0})
    quiet = cost.idle_monthly({**shape, "platform_log_bytes": 0}, idle, idle)
    loud = cost.idle_monthly({**shape, "platform_log_bytes": cost.LAMBDA_PLATFORM_LOG_BYTES}, idle, idle)
    assert quiet["parts"]["cloudwatch_logs"] == 0
    invocations = quiet["ticks_per_month"] + quiet["watchdog_invocations_per_month"]
    expected = invocations * cost.LAMBDA_PLATFORM_LOG_BYTES / 1e9 * cost.LOGS_PER_GB
    assert loud["parts"]["cloudwatch_logs"] == pytest.approx(expected, abs=0.001)
