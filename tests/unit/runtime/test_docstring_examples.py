"""Every example in the runtime's docstrings runs and shows what it says (doctest), so none goes
stale. Examples that need a running engine or AWS are written as illustrations (``::`` blocks),
not as ``>>>`` lines skipped."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.unit.runtime_modules import runtime_modules as _modules


@pytest.mark.parametrize("name", _modules())
def test_the_modules_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples in {name} failed (see above)"


def test_the_runtime_has_examples_to_run() -> None:
    attempted = 0
    for name in _modules():
        module = importlib.import_module(name)
        attempted += sum(len(t.examples) for t in doctest.DocTestFinder().find(module, name))
    assert attempted >= 80  # 83 when written: a finder that finds none fails here
