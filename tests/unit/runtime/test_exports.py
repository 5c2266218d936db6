"""The runtime's public surface, pinned (as Temporal's tests/worker/test_workflow_exports.py pins
``temporalio.workflow``'s): the exact ``__all__`` of ``workerless`` and of each public package, and
that every name in it resolves. Everything else lives in private subpackages (``workerless._core``,
``_handler``, ``_poller``, ``_heartbeat``, ``_deadletter``) whose layout may change; a name added to
or dropped from a public ``__all__`` is a change to what users import and must show up here."""

from __future__ import annotations

import importlib

import pytest

from tests.unit.runtime_modules import RUNTIME

EXPORTS: dict[str, list[str]] = {
    "workerless": [
        "BusinessError",
        "Job",
        "Settings",
        "TerminalError",
        "ThrowError",
        "__version__",
        "get_settings",
        "job_handler",
    ],
    "workerless.testing": [
        "FakeEngine",
        "FakeJob",
        "StubLambdaContext",
        "assert_completed",
        "assert_failed",
        "assert_thrown",
        "load_handler",
        "make_activated_job",
        "make_job",
        "run_handler",
    ],
    "workerless.errors": [
        "AuthExpiredError",
        "BusinessError",
        "ClaimHeldError",
        "ClaimStillLiveError",
        "ConfigurationError",
        "EngineError",
        "EngineUnavailableError",
        "FinalEngineError",
        "GarbledResponseError",
        "JobError",
        "LeaseLostError",
        "MessageFormatError",
        "MisdirectedError",
        "OutcomeTooLargeError",
        "ParameterStoreError",
        "PayloadError",
        "PayloadGoneError",
        "PayloadTooLargeError",
        "PipelineError",
        "QueueError",
        "RateLimitedError",
        "RejectedError",
        "ReportOwedError",
        "ResponseShapeError",
        "RetryableEngineError",
        "SecretReadError",
        "StoreError",
        "TerminalError",
        "ThrowError",
        "TicketNotSentError",
        "WorkerlessError",
    ],
    "workerless.observability": [
        "ENGINE_ERRORS",
        "EVENTS",
        "EVENT_METRICS",
        "JobSpan",
        "JsonFormatter",
        "Lifecycle",
        "Listener",
        "METRICS",
        "MetricsBuffer",
        "NAMESPACE",
        "OUTCOMES",
        "PER_TYPE",
        "PICKUP_LATENCY",
        "POLL_ERRORS",
        "SERVICE",
        "STEPS",
        "add_metric",
        "apply_log_level",
        "configure",
        "configure_from_settings",
        "correlation_keys",
        "current_traceparent",
        "emf_document",
        "emit",
        "engine_error",
        "flush",
        "invocation_metrics",
        "job_span",
        "listening",
        "logger",
        "metrics_enabled",
        "poll_report",
        "trace_id_of",
    ],
    "workerless.engines": ["ENGINES", "ENGINE_NAMES", "EngineHooks", "EngineSpec", "build_engine", "new_http_client"],
    "workerless.engines.kit": [
        "Recovery",
        "TokenCache",
        "Translator",
        "check_base_url",
        "describe",
        "engine_url",
        "error_for_response",
        "error_for_transport",
        "is_loopback",
        "json_object",
        "json_size",
        "parse_problem",
        "parse_retry_after",
        "parse_timestamp",
        "redact",
        "refused_answered_url",
        "renew_at",
        "scrub",
        "send_recovering",
        "timestamp_or_none",
    ],
    # Modules, not names: importing the package must not load every AWS adapter (cold starts).
    "workerless.aws": ["clients", "dynamo", "items", "parameters", "payloads", "secrets", "sqs"],
}

#: The public modules at the runtime's root besides the packages above: the library's own
#: functions' entry points (functions/*/app.py), the composition root and the container's wiring.
PUBLIC_ROOT_MODULES = {"entrypoints", "runtime", "wiring"}


@pytest.mark.parametrize("module_name", sorted(EXPORTS))
def test_the_public_exports_are_exactly_these(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert sorted(module.__all__) == sorted(EXPORTS[module_name])
    assert len(set(module.__all__)) == len(module.__all__), f"{module_name}.__all__ names a name twice"


@pytest.mark.parametrize("module_name", sorted(EXPORTS))
def test_every_exported_name_resolves(module_name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module_name} import *", namespace)  # noqa: S102 - the star import is what is tested
    missing = [name for name in EXPORTS[module_name] if namespace.get(name) is None]
    assert missing == [], f"{module_name}.__all__ names what `from {module_name} import *` does not bind: {missing}"


def test_everything_public_at_the_root_is_pinned_or_listed() -> None:
    """A module or package added at the root without an underscore is public by name: it must be
    pinned above (a package) or listed (a module), or moved into a private subpackage."""
    public = {
        path.stem if path.is_file() else path.name
        for path in RUNTIME.iterdir()
        if not path.name.startswith(("_", ".")) and (path.suffix == ".py" or (path / "__init__.py").exists())
    }
    pinned = {name.split(".")[1] for name in EXPORTS if name.count(".") == 1}
    assert public == pinned | PUBLIC_ROOT_MODULES
