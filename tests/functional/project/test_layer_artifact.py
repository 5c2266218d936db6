"""The layer that runs is the layer that ships.

Builds the WorkerlessLayer with its own Makefile target (`make build-WorkerlessLayer`, what
`sam build` runs for BuildMethod makefile; called directly into a temporary ARTIFACTS_DIR, since
`sam build` would also copy and build the six functions), then, under CPython 3.12 (the
runtime's), imports every function's entry module from the artifact with nothing from the
development environment on sys.path but the boto3/botocore the Lambda python3.12 runtime provides
(layers/workerless/runtime-provided.txt, installed for 3.12 into .cache/ by this test).

Checks that the bytecode is what runs: every module imported from the layer has a cpython-312,
unchecked-hash .pyc of its own source, Python compiled none of them from source, and nothing in
the layer was written.

The artifact is built for arm64 (what ships). This machine may not run arm64 code, so the import
runs a copy of it in which only the native extension modules (pydantic-core's) are swapped for the
same distribution version's build for this machine: every .py and .pyc that runs is the shipped one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
LAYER_SOURCE = ROOT / "layers" / "workerless"
PROBE = ROOT / "tests" / "functional" / "layer_probe.py"
FUNCTIONS = sorted(p.parent.name for p in (ROOT / "functions").glob("*/app.py"))
TIMEOUT = 600

#: What the development kit (workerless_devkit) depends on and the runtime must not.
DEVKIT_ONLY = ("workerless_devkit", "moto", "cryptography", "jwt", "ruamel", "samtranslator")

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Layer:
    python312: str
    shipped: Path  # ARTIFACTS_DIR/python as built (arm64)
    runnable: Path  # the same, native modules swapped for this machine's
    runtime: Path  # the Lambda runtime's boto3/botocore, for 3.12


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False, **kwargs)
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout}\n{result.stderr}"
    return result


def _make_env() -> dict[str, str]:
    # A pytest run under make must not hand its make flags to the layer's make.
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def _runtime_packages(python312: str) -> Path:
    """The runtime's boto3/botocore, installed once per pin set into .cache/ (kept between runs)."""
    pins = LAYER_SOURCE / "runtime-provided.txt"
    digest = hashlib.sha256(pins.read_bytes()).hexdigest()[:12]
    target = ROOT / ".cache" / f"lambda-runtime-py312-{digest}"
    if not target.is_dir():
        staging = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        _run(
            [
                python312,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--only-binary=:all:",
                "--target",
                str(staging),
                "--requirement",
                str(pins),
            ]
        )
        try:
            os.replace(staging, target)
        except OSError:
            # Another session installed the same pins meanwhile (its directory is complete: it too
            # was renamed into place whole); keep that one.
            if not target.is_dir():
                raise
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _swap_native_modules(python312: str, shipped: Path, runnable: Path, wheels: Path) -> None:
    """Replaces each shipped extension module in `runnable` with its distribution's build for this machine."""
    owners: dict[str, str] = {}  # relative path of a file -> "name==version" of its distribution
    for record in shipped.glob("*.dist-info/RECORD"):
        name, version = record.parent.name.removesuffix(".dist-info").rsplit("-", 1)
        for line in record.read_text(encoding="utf-8").splitlines():
            owners[line.split(",", 1)[0]] = f"{name}=={version}"
    native = sorted(p.relative_to(shipped).as_posix() for p in shipped.rglob("*.so"))
    assert native, "the layer ships no extension module: nothing to swap (then run the shipped artifact)"
    for relative in native:
        requirement = owners[relative]
        _run(
            [
                python312,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(wheels),
                requirement,
            ]
        )
        stem = Path(relative).name.split(".", 1)[0]  # _pydantic_core.cpython-312-aarch64-linux-gnu.so
        name = requirement.split("==")[0].replace("-", "_")
        (wheel,) = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(name.lower() + "-")]
        with zipfile.ZipFile(wheel) as archive:
            (member,) = [
                m
                for m in archive.namelist()
                if Path(m).parent == Path(relative).parent and Path(m).name.startswith(stem + ".") and m.endswith(".so")
            ]
            (runnable / relative).unlink()
            (runnable / member).write_bytes(archive.read(member))


@pytest.fixture(scope="session")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Layer:
    python312 = _run(["make", "-s", "--no-print-directory", "print-python312"], cwd=LAYER_SOURCE, env=_make_env())
    python312_path = python312.stdout.strip().splitlines()[-1]
    base = tmp_path_factory.mktemp("layer")
    _run(
        [
            "make",
            "--no-print-directory",
            "build-WorkerlessLayer",
            f"ARTIFACTS_DIR={base / 'artifacts'}",
            f"PYTHON={sys.executable}",
            f"PYTHON312={python312_path}",
        ],
        cwd=LAYER_SOURCE,
        env=_make_env(),
    )
    shipped = base / "artifacts" / "python"
    runnable = base / "runnable" / "python"
    shutil.copytree(shipped, runnable)  # copy2: same bytes and times
    _swap_native_modules(python312_path, shipped, runnable, base / "wheels")
    return Layer(python312_path, shipped, runnable, _runtime_packages(python312_path))


def _probe(layer: Layer, args: dict[str, Any], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    # -I: no PYTHON* variables, no user site, no script directory on sys.path; -S: no site-packages.
    result = _run([layer.python312, "-I", "-S", str(PROBE), json.dumps(args)], cwd=cwd, env=env)
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _lambda_modules(root: Path) -> list[str]:
    """Every module of the workerless package in the layer: all of it is runtime (the devkit is not there)."""
    names = []
    for path in sorted((root / "workerless").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def _pins(requirements: Path) -> dict[str, str]:
    pins = {}
    for line in requirements.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[_canonical(name)] = version
    return pins


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _within(path: str, roots: list[str]) -> bool:
    return any(Path(path).is_relative_to(r) for r in roots)


def test_every_module_of_the_shipped_layer_has_unchecked_hash_bytecode_for_python312(layer: Layer) -> None:
    tree = _probe(layer, {"mode": "tree", "root": str(layer.shipped)}, cwd=layer.shipped, env={"PATH": "/usr/bin:/bin"})
    assert tree["cache_tag"] == "cpython-312"
    files = tree["files"]
    assert len(files) > 100, f"the layer holds only {len(files)} modules"
    assert "workerless/entrypoints.py" in files
    assert "pydantic/main.py" in files
    bad = {path: header for path, header in files.items() if header != _GOOD_PYC}
    assert not bad, f"{len(bad)} of {len(files)} modules lack a cpython-312 unchecked-hash .pyc, e.g. {sorted(bad)[:5]}"
    assert tree["stray"] == [], "bytecode of another interpreter (or outside __pycache__) ships in the layer"


_GOOD_PYC = {"present": True, "magic_ok": True, "flags": 0b01, "hash_ok": True}


def test_the_layer_holds_the_runtime_and_its_pinned_dependencies_only(layer: Layer) -> None:
    # GIVEN the built layer's python/ directory
    shipped = layer.shipped
    # WHEN its distributions are read from their dist-info (name, version, the files each installed)
    installed: dict[str, str] = {}
    owned: set[str] = set()
    for info in shipped.glob("*.dist-info"):
        meta = dict(
            line.split(": ", 1) for line in (info / "METADATA").read_text(encoding="utf-8").splitlines() if ": " in line
        )
        installed[_canonical(meta["Name"])] = meta["Version"]
        for row in (info / "RECORD").read_text(encoding="utf-8").splitlines():
            owned.add(row.split(",", 1)[0].split("/", 1)[0])
    pins = _pins(LAYER_SOURCE / "requirements.txt")
    # THEN every pin is there at its version, and whatever else pip installed is what the pins need
    assert {name: installed.get(name) for name in pins} == pins
    top_level = {p.name for p in shipped.iterdir()} - {"__pycache__"}  # the bytecode of top-level modules
    assert top_level - owned == {"workerless"}, "files in the layer that no pinned distribution installed"
    # ... the runtime is the whole workerless package, and nothing of the devkit is there
    assert not [name for name in top_level if name.split(".")[0] in DEVKIT_ONLY or name.startswith(DEVKIT_ONLY)]
    assert not [_canonical(name) for name in installed if name.startswith(("workerless", "moto", "pyjwt"))]
    shipped_runtime = sorted(str(p.relative_to(shipped)) for p in (shipped / "workerless").rglob("*.py"))
    source_runtime = sorted(str(p.relative_to(LAYER_SOURCE)) for p in (LAYER_SOURCE / "workerless").rglob("*.py"))
    assert shipped_runtime == source_runtime


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_imports_from_the_layer_under_python312_with_only_the_runtimes_boto3(
    layer: Layer, function: str, tmp_path: Path
) -> None:
    # A copy, as Lambda's /var/task: the import writes the entry module's own .pyc beside it.
    task = shutil.copytree(ROOT / "functions" / function, tmp_path / "task")
    # A Lambda-like environment: the runtime's variables, nothing of this machine's but PATH.
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_LAMBDA_FUNCTION_NAME": f"workerless-{function}",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
        "LAMBDA_TASK_ROOT": str(task),
        "LAMBDA_RUNTIME_DIR": str(layer.runtime),
        "POWERTOOLS_SERVICE_NAME": "workerless",
    }
    before = _snapshot(layer.runnable)
    args = {
        "mode": "import",
        "task": str(task),
        "layer": str(layer.runnable),
        "runtime": str(layer.runtime),
        "modules": _lambda_modules(layer.runnable),
        "clients": ["sqs", "dynamodb", "secretsmanager"],  # what workerless/aws/* builds
    }
    report = _probe(layer, args, cwd=task, env=env)
    after = _snapshot(layer.runnable)

    assert report["version"][:2] == [3, 12]
    assert report["dont_write_bytecode"] is False  # so a module compiled from source would have been written
    allowed = [str(task), str(layer.runnable), str(layer.runtime)]
    stdlib = report["stdlib"]
    interpreter_path = report["interpreter_path"]  # sys.path under -I -S: the interpreter's standard library
    assert not [p for p in interpreter_path if _within(p, report["site_packages"]) or "site-packages" in p]
    assert report["sys_path"] == [str(task), str(layer.runnable), *interpreter_path, str(layer.runtime)]
    modules = {m["name"]: m for m in report["modules"]}
    leaked = {
        name: m["origin"]
        for name, m in modules.items()
        if not _within(m["origin"], allowed)
        and (not _within(m["origin"], stdlib) or _within(m["origin"], report["site_packages"]))
    }
    assert leaked == {}, "modules loaded from outside the function, the layer, the runtime's boto3 and the stdlib"

    assert modules["app"]["origin"] == str(task / "app.py")
    from_layer = {name: m for name, m in modules.items() if _within(m["origin"], [str(layer.runnable)])}
    for expected in ("workerless", "pydantic", "pydantic_core", "httpx", "aws_lambda_powertools"):
        assert expected in from_layer, f"{expected} was not imported from the layer"
    for sdk in ("boto3", "botocore"):
        assert _within(modules[sdk]["origin"], [str(layer.runtime)]), f"{sdk} is not the runtime's"
    assert "moto" not in modules

    sources = {name: m for name, m in from_layer.items() if "pyc" in m}
    not_bytecode = {name: m["pyc"] for name, m in sources.items() if m["pyc"] != _GOOD_PYC}
    assert not_bytecode == {}, f"{len(not_bytecode)} of {len(sources)} layer modules lack unchecked-hash 3.12 bytecode"
    compiled = [p for p in report["compiled"] if _within(p, [str(layer.runnable)])]
    assert compiled == [], f"{len(compiled)} layer modules were compiled from source at import, e.g. {compiled[:5]}"
    assert after == before, "importing wrote to the layer"
    assert {m["loader"] for m in sources.values()} == {"SourceFileLoader"}
