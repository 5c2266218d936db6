"""Run by test_layer_artifact.py under the layer's CPython 3.12, as `python3.12 -I -S layer_probe.py ARGS`.

Standard library only: nothing from the development environment is importable here. Prints one JSON
object on stdout. Two modes (ARGS is a JSON object with "mode"):

- "import": lays out sys.path as Lambda does (function code, layer, the interpreter's standard
  library, the runtime's boto3), imports the function's entry module `app` and the given modules,
  and reports every module loaded, the bytecode header of each, and every module that Python
  compiled from source instead of loading its .pyc.
- "tree": checks the .pyc of every .py under a directory.
"""

from __future__ import annotations

# The bootstrap importlib runs on (importlib._bootstrap_external is this same module object).
import _frozen_importlib_external as _bootstrap_external
import importlib
import importlib.util
import json
import os
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

#: A PEP 552 hash-based .pyc whose source is not checked: flags bit 0 (hash) set, bit 1 (check) clear.
UNCHECKED_HASH_FLAGS = 0b01


def _header(source: Path, cached: Path) -> dict[str, Any]:
    """What the .pyc beside `source` is: present, for this interpreter, unchecked-hash, of this source."""
    if not cached.is_file():
        return {"present": False}
    head = cached.read_bytes()[:16]
    return {
        "present": True,
        "magic_ok": head[:4] == importlib.util.MAGIC_NUMBER,
        "flags": int.from_bytes(head[4:8], "little"),
        "hash_ok": head[8:16] == importlib.util.source_hash(source.read_bytes()),
    }


def _tree(root: Path) -> dict[str, Any]:
    files = {}
    for source in sorted(root.rglob("*.py")):
        files[str(source.relative_to(root))] = _header(source, Path(importlib.util.cache_from_source(str(source))))
    stray = [
        str(p.relative_to(root))
        for p in root.rglob("*.pyc")
        if not p.name.endswith(f".{sys.implementation.cache_tag}.pyc") or p.parent.name != "__pycache__"
    ]
    return {"files": files, "stray": sorted(stray), "cache_tag": sys.implementation.cache_tag}


def _import(args: dict[str, Any]) -> dict[str, Any]:
    task, layer, runtime = args["task"], args["layer"], args["runtime"]
    # Under -I -S sys.path holds only the interpreter's own standard library (no site-packages).
    # Lambda's order: the function's code, the layer, the runtime's Python, /var/runtime (boto3).
    stdlib_path = [p for p in sys.path if p]
    sys.path[:] = [task, layer, *stdlib_path, runtime]
    compiled: list[str] = []
    original = _bootstrap_external.SourceLoader.source_to_code

    def recording(self: Any, data: bytes, path: str, *, _optimize: int = -1) -> Any:
        # Called only when there is no usable .pyc: the cold-start cost this test is about.
        compiled.append(str(path))
        return original(self, data, path, _optimize=_optimize)

    _bootstrap_external.SourceLoader.source_to_code = recording  # type: ignore[method-assign]
    started = time.perf_counter()
    importlib.import_module("app")
    entry_seconds = time.perf_counter() - started
    for name in args["modules"]:
        importlib.import_module(name)
    # The first invocation's boto3 clients, built by the layer's own code with the runtime's botocore
    # (no call is made: building a client needs a region, not credentials or a network).
    clients = importlib.import_module("workerless.aws.clients").Clients()
    for service in args["clients"]:
        clients.get(service)
    all_seconds = time.perf_counter() - started

    modules = []
    for name, module in sorted(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if spec is None or not spec.has_location or not spec.origin:
            continue  # built-in, frozen or namespace package: no file
        origin = Path(spec.origin)
        entry: dict[str, Any] = {"name": name, "origin": str(origin), "loader": type(spec.loader).__name__}
        if origin.suffix == ".py":
            entry["pyc"] = _header(origin, Path(spec.cached or importlib.util.cache_from_source(str(origin))))
        modules.append(entry)
    paths = sysconfig.get_paths()
    return {
        "sys_path": sys.path,
        "interpreter_path": stdlib_path,
        "stdlib": sorted({paths["stdlib"], paths["platstdlib"]}),
        "site_packages": sorted({paths["purelib"], paths["platlib"]}),
        "version": list(sys.version_info[:3]),
        "dont_write_bytecode": sys.dont_write_bytecode,
        "modules": modules,
        "compiled": compiled,
        "entry_seconds": entry_seconds,
        "all_seconds": all_seconds,
        "cwd": os.getcwd(),
    }


def main() -> None:
    args = json.loads(sys.argv[1])
    result = _tree(Path(args["root"])) if args["mode"] == "tree" else _import(args)
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    main()
