"""The engine seam, read from the runtime's source (issue 28, item 3): the pipeline never asks which
engine it runs. Outside ``workerless.engines`` no runtime module names an engine in its code (a
string compared or passed, an identifier, an import of an adapter's package) nor compares an
engine's ``name``; what only some engines have, the pipeline asks for by capability
(``Engine.lease_acquire``, ``task_logs``, ``liveness``), and lease semantics are the engine's
lease policy. Docstrings and comments may name engines: they explain, they do not branch."""

from __future__ import annotations

import ast
from pathlib import Path

from workerless.engines import ENGINES
from workerless.engines.base import Engine

from tests.unit.runtime_modules import runtime_module_paths

#: Every spelling of an engine a module could use to tell engines apart: the registry's names, the
#: last part of each adapter's module, and the seeds' spellings with a separator.
SPELLINGS = frozenset(
    {name for name in ENGINES}
    | {spec.module.rpartition(".")[2] for spec in ENGINES.values()}
    | {"node-flow", "node_flow", "stage-next", "stage_next"}
)
#: The one place outside the engines that lists their names, and why it may: the settings' type of
#: WORKERLESS_ENGINE (configuration read by the composition root, not the pipeline; pydantic
#: validates it and ``tests/unit/project/test_distributions.py`` keeps it equal to the registry).
ALLOWED = frozenset({("workerless._core.settings", "EngineName")})


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _names_an_engine(text: str) -> bool:
    lowered = text.lower()
    return any(spelling in lowered for spelling in SPELLINGS)


def _is_engine_name(node: ast.expr) -> bool:
    """``engine.name``, ``self.engine.name``, ``self._inner.name``: an engine's name being read."""
    if not (isinstance(node, ast.Attribute) and node.attr == "name"):
        return False
    owner = node.value
    label = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
    return "engine" in label.lower() or label == "_inner"


def engine_checks(tree: ast.Module, module: str) -> list[str]:
    """Where ``tree`` (the module ``module``) names an engine in its code or compares an engine's
    name: ``module:line what``."""
    docstrings = _docstrings(tree)
    allowed_assignments: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and (module, t.id) in ALLOWED for t in targets):
                allowed_assignments.update(id(n) for n in ast.walk(node))
    found: list[str] = []
    for node in ast.walk(tree):
        if id(node) in allowed_assignments:
            continue
        where = f"{module}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if _names_an_engine(node.value):
                found.append(f"{where} string {node.value[:60]!r}")
        elif isinstance(node, ast.Name) and _names_an_engine(node.id):
            found.append(f"{where} name {node.id}")
        elif isinstance(node, ast.Attribute) and _names_an_engine(node.attr):
            found.append(f"{where} attribute {node.attr}")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            targets = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or "", *(f"{node.module}.{alias.name}" for alias in node.names)]
            )
            found.extend(f"{where} import {target}" for target in targets if _names_an_engine(target))
        elif isinstance(node, ast.Compare) and any(_is_engine_name(n) for n in [node.left, *node.comparators]):
            found.append(f"{where} compares an engine's name")
        elif isinstance(node, ast.Match) and _is_engine_name(node.subject):
            found.append(f"{where} matches on an engine's name")
    return found


def _pipeline_modules() -> dict[str, Path]:
    return {
        name: path
        for name, path in runtime_module_paths().items()
        if not (name == "workerless.engines" or name.startswith("workerless.engines."))
    }


def test_the_checker_finds_an_engine_named_in_code_and_an_engine_name_compared() -> None:
    source = '''
"""Docstrings may say StageNext."""
from workerless.engines.stagenext.adapter import StageNextEngine

def f(engine, job):
    """Sheptra here is fine too."""
    if engine.name == "nodeflow":  # a comment saying sheptra is not code
        return isinstance(engine, StageNextEngine)
    match self.engine.name:
        case _:
            return engine.lease.held(None)
'''
    found = engine_checks(ast.parse(source), "workerless.made_up")
    assert [entry.split(" ", 1)[1] for entry in found if "import" in entry] == [
        "import workerless.engines.stagenext.adapter",
        "import workerless.engines.stagenext.adapter.StageNextEngine",
    ]
    assert any("string 'nodeflow'" in entry for entry in found)
    assert any("compares an engine's name" in entry for entry in found)
    assert any("matches on an engine's name" in entry for entry in found)
    assert any("name StageNextEngine" in entry for entry in found)
    assert not any("Docstrings" in entry or "fine too" in entry for entry in found)
    clean = "def g(engine):\n    acquire = engine.lease_acquire\n    return acquire is None or acquire.begin(1)\n"
    assert engine_checks(ast.parse(clean), "workerless.made_up") == []


def test_no_runtime_module_outside_the_engines_checks_which_engine_it_runs() -> None:
    modules = _pipeline_modules()
    assert len(modules) > 30 and "workerless._handler.delivery" in modules  # the walk found the pipeline
    found = [
        entry
        for name, path in modules.items()
        for entry in engine_checks(ast.parse(path.read_text(encoding="utf-8")), name)
    ]
    assert found == [], "the pipeline names an engine or checks its name:\n" + "\n".join(found)


def test_the_engine_protocol_core_has_no_capability_of_one_engine() -> None:
    """The calls only some engines need are optional capabilities (each None where an engine lacks
    it), not members every engine implements with no-ops."""
    members = {name for name in vars(Engine) if not name.startswith("_")}
    assert {"begin", "skip", "send_logs", "after_cycle"}.isdisjoint(members)
    assert {"lease_acquire", "task_logs", "liveness"} <= members
