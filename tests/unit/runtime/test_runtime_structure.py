"""The runtime's structure, read from its source with an AST walk (issue 28): no import cycle
counting the imports inside functions (not those under ``TYPE_CHECKING``, which never run), no
``global`` statement, no module-level registry other code adds to, and few parameters or returns
typed bare ``Any``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.unit.runtime_modules import RUNTIME, runtime_module_paths

PACKAGE = RUNTIME.name
#: Issue 28's bound on parameters and returns typed bare ``Any`` in the runtime.
MAX_BARE_ANY = 15


def _modules() -> dict[str, Path]:
    return runtime_module_paths()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every module of the runtime that ``tree`` imports when it runs: at module level and inside
    functions, skipping ``if TYPE_CHECKING:`` blocks (their ``else`` still runs)."""
    package = module if is_package else module.rpartition(".")[0]

    def walk(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from walk(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        for child in ast.iter_child_nodes(node):
            yield from walk(child)

    for node in walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        yield target
        for alias in node.names:  # ``from pkg import submodule``
            yield f"{target}.{alias.name}"


def import_graph() -> dict[str, set[str]]:
    """Module -> the runtime modules it imports (an import of ``a.b.c`` also runs ``a`` and
    ``a.b``'s ``__init__``, so it counts as importing each)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target in _runtime_imports(tree, name, path.name == "__init__.py"):
            parts = target.split(".")
            for end in range(1, len(parts) + 1):
                prefix = ".".join(parts[:end])
                if prefix in modules and prefix != name and not name.startswith(prefix + "."):
                    graph[name].add(prefix)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph`` (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import() -> None:
    # The walk itself, on a made-up pair: a's import of b sits inside a function, b's of a at the top.
    a = ast.parse("def f():\n    from workerless import b\n")
    b = ast.parse("from workerless.a import x\nif TYPE_CHECKING:\n    from workerless import c\n")
    graph = {
        "workerless.a": {t for t in _runtime_imports(a, "workerless.a", False) if t.startswith("workerless.")},
        "workerless.b": {t for t in _runtime_imports(b, "workerless.b", False) if t.startswith("workerless.")},
    }
    edges = {k: {t for t in v if t in graph} for k, v in graph.items()}
    assert edges == {"workerless.a": {"workerless.b"}, "workerless.b": {"workerless.a"}}
    assert ["workerless.a", "workerless.b"] in strongly_connected(edges)


def test_the_runtime_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 30  # the walk found the runtime
    cycles = [component for component in strongly_connected(graph) if len(component) > 1]
    assert cycles == [], f"import cycles in the runtime (function-level imports counted): {cycles}"


def test_the_runtime_has_no_global_statement() -> None:
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Global):
                found.append(f"{name}:{node.lineno} global {', '.join(node.names)}")
    assert found == []


#: Calls that change a list, dict, set or deque in place.
_MUTATORS = frozenset(
    {"append", "appendleft", "extend", "insert", "add", "update", "setdefault", "remove", "discard", "pop", "clear"}
)
_CONTAINERS = frozenset(
    {"list", "dict", "set", "defaultdict", "OrderedDict", "deque", "WeakSet", "WeakValueDictionary"}
)


def _is_mutable_container(value: ast.expr | None) -> bool:
    if isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp | ast.SetComp):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in _CONTAINERS
    return False


def module_registries(tree: ast.Module, module: str) -> list[str]:
    """``module:name`` of each list, dict or set assigned at module scope that a function changes in
    place (``name.append(...)``, ``name[key] = ...``, ``del name[key]``): a registry the rest of
    the process adds to, whatever wiring it runs under (what the wiring's hooks are for)."""
    containers: set[str] = set()
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if _is_mutable_container(getattr(node, "value", None)):
            containers.update(t.id for t in targets if isinstance(t, ast.Name))
    found: set[str] = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATORS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in containers
            ):
                found.add(f"{module}:{node.func.value.id}")
            targets = (
                node.targets
                if isinstance(node, ast.Assign | ast.Delete)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            for target in targets:
                name = (
                    target.value.id if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) else ""
                )
                if name in containers:
                    found.add(f"{module}:{name}")
    return sorted(found)


def test_the_registry_finder_finds_a_list_a_function_appends_to() -> None:
    # The walk itself, on made-up modules: the registries as lifecycle._listeners and a routes cache
    # were; a constant table read (never changed) and a function's own list are not registries.
    registry = ast.parse(
        "_listeners: list[int] = []\n_cache = dict()\nTABLE = {'a': 1}\n"
        "def add(x):\n    _listeners.append(x)\n"
        "def put(k, v):\n    _cache[k] = v\n"
        "def read(k):\n    mine = []\n    mine.append(TABLE[k])\n    return mine\n"
    )
    assert module_registries(registry, "m") == ["m:_cache", "m:_listeners"]


def test_the_runtime_has_no_module_level_registry_other_code_adds_to() -> None:
    """Lifecycle listeners, request guards and response watchers come from the hooks given to the
    wiring (:class:`workerless.wiring.Hooks`), not from lists any code appends to (issue 28)."""
    found = []
    for name, path in _modules().items():
        found += module_registries(ast.parse(path.read_text(encoding="utf-8")), name)
    assert found == [], f"module-level registries changed from functions: {found}"


def _is_bare_any(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip() in {"Any", "typing.Any"}
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or (
        isinstance(annotation, ast.Attribute) and annotation.attr == "Any"
    )


def bare_any_annotations() -> list[str]:
    """Every parameter and return in the runtime annotated ``Any`` itself (``dict[str, Any]`` is
    not bare: its shape is typed, its values are JSON)."""
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            params += [a for a in (args.vararg, args.kwarg) if a is not None]
            for param in params:
                if _is_bare_any(param.annotation):
                    found.append(f"{name}:{node.lineno} {node.name}({param.arg})")
            if _is_bare_any(node.returns):
                found.append(f"{name}:{node.lineno} {node.name} -> Any")
    return found


def test_the_bare_any_counter_counts_parameters_and_returns() -> None:
    tree = ast.parse("def f(a: Any, *b: Any, c: dict[str, Any], **d: Any) -> Any: ...")
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef)
    annotations = [func.args.args[0].annotation, func.args.vararg and func.args.vararg.annotation, func.returns]
    assert all(_is_bare_any(a) for a in annotations)
    assert not _is_bare_any(func.args.kwonlyargs[0].annotation)


def test_few_parameters_and_returns_are_typed_bare_any() -> None:
    found = bare_any_annotations()
    assert len(found) <= MAX_BARE_ANY, f"{len(found)} bare Any (at most {MAX_BARE_ANY}):\n" + "\n".join(found)


def test_every_lifecycle_step_emitted_is_a_member_of_the_enum() -> None:
    """``emit`` takes a :class:`~workerless.observability.Lifecycle`: a step emitted as a bare string
    (as ``"offloaded"`` was, missing from EVENTS) would log and count nothing a reader can look up."""
    from workerless.observability import EVENTS, Lifecycle

    emitted = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "emit"):
                continue
            assert len(node.args) >= 2, f"{name}:{node.lineno} emit without a step"
            step = node.args[1]
            emitted.append(f"{name}:{node.lineno}")
            if isinstance(step, ast.Subscript):  # report.py's EVENTS[outcome.kind]: a dict of members
                continue
            assert isinstance(step, ast.Attribute) and isinstance(step.value, ast.Name), f"{name}:{node.lineno}"
            assert step.value.id == "Lifecycle" and step.attr in Lifecycle.__members__, f"{name}:{node.lineno}"
    assert len(emitted) > 15
    assert "offloaded" in EVENTS


#: The runtime's layers, lowest first: a module imports only from its own layer or lower ones
#: (counting function-level imports, not ``TYPE_CHECKING`` ones, as the cycle check does).
BASE, CORE, ADAPTERS, PARTS, ENTRY = range(5)
LAYER_NAMES = ("base", "core", "adapters", "parts", "entry")
#: A module's layer is that of the longest of these prefixes that is the module or a package of it.
LAYER_OF_PREFIX: dict[str, int] = {
    # Errors and observability import nothing of the runtime: every layer reports through them.
    f"{PACKAGE}.errors": BASE,
    f"{PACKAGE}._version": BASE,
    f"{PACKAGE}.observability": BASE,
    f"{PACKAGE}._core": CORE,
    # The seams the core names are core (LAYER_OF_MODULE): the engine registry (its adapters are
    # imported by name, at build time), the Engine protocol and its decorator base, the AWS package
    # (it imports none of its adapters) and its client factory with the call deadline every retry
    # policy reads; and the engine kit, the adapters' shared translation the protocol re-exports.
    f"{PACKAGE}.engines.kit": CORE,
    f"{PACKAGE}.engines": ADAPTERS,
    f"{PACKAGE}.aws": ADAPTERS,
    f"{PACKAGE}._handler": PARTS,
    f"{PACKAGE}._poller": PARTS,
    f"{PACKAGE}._heartbeat": PARTS,
    f"{PACKAGE}._deadletter": PARTS,
    f"{PACKAGE}.entrypoints": ENTRY,
    f"{PACKAGE}.wiring": ENTRY,
    f"{PACKAGE}.runtime": ENTRY,
    f"{PACKAGE}.testing": ENTRY,
}
#: Modules placed exactly, ahead of their package's layer.
LAYER_OF_MODULE: dict[str, int] = {
    PACKAGE: ENTRY,  # workerless/__init__.py: job_handler and Job, the handler functions' imports
    f"{PACKAGE}.engines": CORE,
    f"{PACKAGE}.engines.base": CORE,
    f"{PACKAGE}.engines.decorator": CORE,
    f"{PACKAGE}.aws": CORE,
    f"{PACKAGE}.aws.clients": CORE,
    # job_handler is the handler functions' entry point: it gets the container's wiring
    # (runtime.current()) as the library's own entry points do.
    f"{PACKAGE}._handler.handler": ENTRY,
}
#: Issue 28's bound on the modules at the runtime's root.
MAX_ROOT_MODULES = 12


def layer_of(module: str) -> int | None:
    if module in LAYER_OF_MODULE:
        return LAYER_OF_MODULE[module]
    prefixes = [p for p in LAYER_OF_PREFIX if module == p or module.startswith(p + ".")]
    return LAYER_OF_PREFIX[max(prefixes, key=len)] if prefixes else None


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import in ``graph`` from a module to one of a higher layer, and every module no layer
    claims (a new module must be placed)."""
    found = []
    for module in sorted(graph):
        own = layer_of(module)
        if own is None:
            found.append(f"{module} is in no layer")
            continue
        for target in sorted(graph[module]):
            theirs = layer_of(target)
            if theirs is None or theirs > own:
                where = "no layer" if theirs is None else LAYER_NAMES[theirs]
                found.append(f"{module} ({LAYER_NAMES[own]}) imports {target} ({where})")
    return found


def test_the_layering_check_finds_an_import_from_a_higher_layer() -> None:
    # A made-up pair: a core module importing the poller inside a function; a TYPE_CHECKING import
    # of the wiring beside it does not count.
    model = ast.parse(
        "if TYPE_CHECKING:\n    from workerless.wiring import Wiring\n"
        "def f():\n    from workerless._poller import poller\n"
    )
    imports = {t for t in _runtime_imports(model, f"{PACKAGE}._core.model", False) if t.startswith(PACKAGE)}
    graph = {f"{PACKAGE}._core.model": {t for t in imports if layer_of(t) is not None}}
    assert layering_violations(graph) == [
        f"{PACKAGE}._core.model (core) imports {PACKAGE}._poller (parts)",
        f"{PACKAGE}._core.model (core) imports {PACKAGE}._poller.poller (parts)",
    ]
    # Downward and sideways imports pass; a module no layer claims does not.
    assert layering_violations({f"{PACKAGE}._poller.poller": {f"{PACKAGE}._core.model", f"{PACKAGE}.aws.sqs"}}) == []
    assert layering_violations({f"{PACKAGE}.stray": set()}) == [f"{PACKAGE}.stray is in no layer"]


def test_no_runtime_module_imports_from_a_higher_layer() -> None:
    graph = import_graph()
    assert len(graph) > 30  # the walk found the runtime
    violations = layering_violations(graph)
    assert violations == [], "imports against the layering:\n" + "\n".join(violations)


def test_the_runtimes_root_has_few_modules() -> None:
    root = sorted(path.name for path in RUNTIME.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the runtime's root: {root}"
