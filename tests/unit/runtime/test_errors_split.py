"""The error hierarchy split by who uses it (issue 28): what a handler raises apart from what the
adapters and the pipeline raise, in small private modules behind :mod:`workerless.errors`, which
names every class. One hierarchy: workerless's own failures under ``WorkerlessError``, every engine
error either retryable or final; the handler's ``JobError`` outside it."""

from __future__ import annotations

import ast
import importlib
import inspect

import workerless
import workerless.errors as errors

#: Where each class is declared: the handler's errors apart from the pipeline's.
DECLARED = {
    "workerless.errors._handler": {"JobError", "TerminalError", "ThrowError"},
    "workerless.errors._base": {"WorkerlessError", "ConfigurationError"},
    "workerless.errors._engine": {
        "EngineError",
        "RetryableEngineError",
        "RateLimitedError",
        "EngineUnavailableError",
        "GarbledResponseError",
        "AuthExpiredError",
        "MisdirectedError",
        "FinalEngineError",
        "LeaseLostError",
        "PayloadTooLargeError",
        "RejectedError",
        "ResponseShapeError",
    },
    "workerless.errors._pipeline": {
        "PipelineError",
        "MessageFormatError",
        "StoreError",
        "OutcomeTooLargeError",
        "PayloadError",
        "PayloadGoneError",
        "QueueError",
        "ParameterStoreError",
        "SecretReadError",
        "ReportOwedError",
        "ClaimHeldError",
        "ClaimStillLiveError",
        "TicketNotSentError",
    },
}
#: A bound on each module's length: the split is into small modules.
MAX_LINES = 200


def _declared_in(module_name: str) -> set[str]:
    """The classes ``module_name``'s source declares (their ``__module__`` says workerless.errors)."""
    tree = ast.parse(inspect.getsource(importlib.import_module(module_name)))
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef)}


def test_each_class_is_declared_in_its_part_and_exported_from_workerless_errors() -> None:
    for module_name, names in DECLARED.items():
        assert _declared_in(module_name) == names, module_name
    declared = set().union(*DECLARED.values())
    assert set(errors.__all__) == declared | {"BusinessError"}
    assert errors.BusinessError is errors.ThrowError


def test_every_class_names_the_public_module() -> None:
    # A traceback (and the doctests' expected lines) say workerless.errors.X, the path users import.
    for name in errors.__all__:
        assert getattr(errors, name).__module__ == "workerless.errors", name


def test_what_a_handler_raises_is_not_a_failure_of_workerless() -> None:
    for name in DECLARED["workerless.errors._handler"]:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.JobError) and not issubclass(cls, errors.WorkerlessError), name
    assert {workerless.TerminalError, workerless.ThrowError, workerless.BusinessError} <= {
        getattr(errors, n) for n in DECLARED["workerless.errors._handler"]
    }


def test_one_hierarchy_every_engine_error_retryable_or_final() -> None:
    for name in set().union(*(DECLARED[m] for m in DECLARED if m != "workerless.errors._handler")):
        assert issubclass(getattr(errors, name), errors.WorkerlessError), name
    for name in DECLARED["workerless.errors._engine"] - {"EngineError"}:
        cls = getattr(errors, name)
        retryable = issubclass(cls, errors.RetryableEngineError)
        assert retryable != issubclass(cls, errors.FinalEngineError), name
        assert cls.retryable is retryable, name
    for name in DECLARED["workerless.errors._pipeline"]:
        assert issubclass(getattr(errors, name), errors.PipelineError), name


def test_the_error_modules_are_small() -> None:
    for module_name in [*DECLARED, "workerless.errors"]:
        source = inspect.getsource(importlib.import_module(module_name))
        assert len(source.splitlines()) <= MAX_LINES, module_name
