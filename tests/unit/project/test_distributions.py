"""Two distributions: the runtime (``workerless``, what the layer ships) never depends on the devkit
(``workerless_devkit``: CLI, emulators, local mode, chaos, pytest plugin) or on what only the devkit
installs. The built layer's contents are checked in tests/functional/project/test_layer_artifact.py."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

from workerless._core.settings import ENGINE_KEY_PREFIXES, EngineName
from workerless.engines import ENGINE_NAMES, ENGINES

from tests.unit.runtime_modules import RUNTIME
from tests.unit.runtime_modules import runtime_modules as _runtime_modules

ROOT = Path(__file__).resolve().parents[3]
#: The devkit and the third-party packages only it depends on (devkit/pyproject.toml).
DEVKIT_ONLY = ("workerless_devkit", "moto", "cryptography", "jwt", "ruamel", "samtranslator")


def _imported_names(tree: ast.AST) -> list[str]:
    """Modules a file imports, by statement or by importlib.import_module("...") with a literal."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append(node.args[0].value)
    return names


def test_no_runtime_module_names_the_devkit_or_its_dependencies_in_an_import() -> None:
    offenders = {
        str(path.relative_to(ROOT)): name
        for path in RUNTIME.rglob("*.py")
        for name in _imported_names(ast.parse(path.read_text(encoding="utf-8")))
        if name.split(".")[0] in DEVKIT_ONLY
    }
    assert offenders == {}


def test_importing_every_runtime_module_loads_nothing_of_the_devkit() -> None:
    # GIVEN a fresh interpreter (nothing of this test session's imports)
    script = (
        "import importlib, json, sys\n"
        f"for name in {_runtime_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    # WHEN it imports every module of the runtime
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300)
    loaded = json.loads(result.stdout)
    # THEN none of the devkit's modules or of its own dependencies came with them
    assert [name for name in loaded if name.split(".")[0] in DEVKIT_ONLY] == []
    assert "workerless.engines.sheptra" in loaded  # the check did import the runtime


def test_the_engine_registry_is_the_one_list_of_engines() -> None:
    assert tuple(get_args(EngineName)) == ENGINE_NAMES
    assert set(ENGINE_KEY_PREFIXES) == set(ENGINES)
    emulators = ROOT / "devkit" / "workerless_devkit" / "emulators"
    assert all((emulators / f"{name}.py").is_file() or (emulators / name).is_dir() for name in ENGINE_NAMES)


#: A runtime module does one thing: past this many lines it is doing two (split it, as poller.py
#: was split into poller, bookkeeping and ticker).
MAX_RUNTIME_MODULE_LINES = 500


def test_no_runtime_module_is_longer_than_the_bound() -> None:
    lengths = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in RUNTIME.rglob("*.py")}
    assert lengths, "no runtime modules found"
    assert {path: n for path, n in lengths.items() if n > MAX_RUNTIME_MODULE_LINES} == {}


def test_each_distribution_has_the_repositorys_license_and_declares_it() -> None:
    # Each distribution's project directory holds the LICENSE its wheel and sdist ship (setuptools
    # takes license-files only from inside the project): a copy of the repository's, kept identical.
    import tomllib

    root = Path(__file__).resolve().parents[3]
    text = (root / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    for project in ("layers/workerless", "devkit"):
        assert (root / project / "LICENSE").read_text(encoding="utf-8") == text, f"{project}/LICENSE differs"
        meta = tomllib.loads((root / project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        assert meta["license"] == "Apache-2.0", project
        assert meta["license-files"] == ["LICENSE"], project
