"""Every command in the docs works as written.

Each page of docs/ and README.md is read in order: fenced ``bash`` blocks are commands, and fenced
blocks whose info string carries ``file=PATH`` are files the reader is asked to create. Commands run
in a scratch copy of the project (symlinks to the template, functions, layer and virtual
environments) with the network fenced to loopback:

- ``.venv/bin/workerless ...``, ``.venv/bin/pytest ...`` and ``curl`` to 127.0.0.1 are **run**
  (``workerless emulate`` in the background for the rest of the page, on a free port in place of the
  page's 8080), and must exit 0; ``.env`` holds the values of a Sheptra emulator the test serves;
- commands that need AWS or a fresh clone are **checked, not run**: ``aws <service> <operation>``
  against botocore's model of that API (the operation exists, every option is one of its
  parameters, every required parameter is given); ``sam <command>`` against ``sam <command> --help``;
  ``make <target>`` against the Makefile of the directory it runs in; ``git clone`` needs nothing;
- a user's own application (getting-started.md): ``pip install workerless-devkit`` is checked (the
  devkit's distribution name; the wheels' install is tests/functional/project/test_distributions.py's),
  ``workerless init DIR ...`` is **run** (this checkout's CLI), and ``cd DIR`` moves the page into the
  application, with this checkout's virtual environments standing in for the ones its ``make``
  installs (tests/functional/project/test_own_app.py runs the application's make targets from the wheels).
  There, ``make demo`` and ``make test`` run the ``.venv/bin/...`` commands of their recipes
  (``make -n``: rendering the template, the demo, pytest); ``make build`` and ``make rehearse`` are
  checked.

A command the test does not know fails, so a new kind of command in the docs needs a rule here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from workerless import observability
from workerless_devkit import cli
from workerless_devkit.devtools.scaffold import template_routes
from workerless_devkit.emulators import RunningEmulator
from workerless_devkit.local.extensions import expand_language_extensions
from workerless_devkit.local.template import parse_template_text

#: Seconds per test (real commands, topologies or many generated cases): `make test` runs it,
#: `make test-fast` does not.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
PROJECT_ENTRIES = ("template.yaml", "functions", "layers", "events", ".venv", ".venv-sam", "pyproject.toml")
PROJECT_ENTRIES += ("Makefile", "samconfig.toml")
RUN_TIMEOUT = 120
DOC_PORT = "8080"
#: AWS CLI options that are not API parameters.
AWS_GLOBAL_OPTIONS = {"--query", "--output", "--region", "--profile", "--no-cli-pager", "--endpoint-url", "--debug"}
AWS_GLOBAL_OPTIONS |= {"--no-paginate", "--max-items", "--page-size", "--starting-token", "--cli-input-json"}
#: AWS CLI commands that are CLI customisations (no API model): their options, from `aws logs tail help`.
AWS_CUSTOM = {
    ("logs", "tail"): {"--follow", "--since", "--until", "--format", "--filter-pattern", "--log-stream-names"},
}
AWS_CUSTOM[("logs", "tail")] |= {"--log-stream-name-prefix"}


@dataclass
class Block:
    lang: str
    attrs: dict[str, str]
    text: str
    line: int


def read_blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\S*)\s*(.*)$", lines[i])
        if not opening:
            i += 1
            continue
        indent, lang, rest = opening.groups()
        attrs = dict(part.split("=", 1) for part in rest.split() if "=" in part)
        body: list[str] = []
        start = i + 1
        i += 1
        while i < len(lines) and not re.match(rf"^{indent}```\s*$", lines[i]):
            body.append(lines[i][len(indent) :])
            i += 1
        blocks.append(Block(lang, attrs, "\n".join(body) + "\n", start))
        i += 1
    return blocks


def commands(block: Block) -> list[list[str]]:
    """The block's commands as argv lists: comments dropped, continuations joined, ``&&`` split."""
    joined = re.sub(r"\\\n", " ", block.text)
    out: list[list[str]] = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            if "&&" in words:
                cut = words.index("&&")
                out.append(words[:cut])
                words = words[cut + 1 :]
            else:
                out.append(words)
                words = []
    return [argv for argv in out if argv]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------- structural checks


@pytest.fixture(scope="module")
def botocore_session() -> Any:
    import botocore.session

    return botocore.session.get_session()


def check_aws(argv: list[str], session: Any) -> None:
    from botocore import xform_name

    assert len(argv) >= 3, f"not an AWS CLI command: {shlex.join(argv)}"
    service, operation, args = argv[1], argv[2], argv[3:]
    options = [a for a in args if a.startswith("--")]
    custom = AWS_CUSTOM.get((service, operation))
    if custom is not None:
        unknown = set(options) - custom - AWS_GLOBAL_OPTIONS
        assert not unknown, f"aws {service} {operation} has no option {sorted(unknown)}"
        return
    assert service in session.get_available_services(), f"aws has no service {service!r}"
    model = session.get_service_model(service)
    by_cli = {xform_name(name, "-"): name for name in model.operation_names}
    assert operation in by_cli, f"aws {service} has no operation {operation!r}"
    shape = model.operation_model(by_cli[operation]).input_shape
    members = {f"--{xform_name(m, '-')}": m for m in (shape.members if shape else {})}
    for option in options:
        assert option in members or option in AWS_GLOBAL_OPTIONS, f"aws {service} {operation}: no option {option}"
    required = {f"--{xform_name(m, '-')}" for m in (shape.required_members if shape else [])}
    missing = required - set(options)
    assert not missing, f"aws {service} {operation} needs {sorted(missing)}"


@pytest.fixture(scope="module")
def sam_help(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``sam <command> --help`` text, offline (no telemetry, no version check, no way out)."""
    sam = ROOT / ".venv-sam" / "bin" / "sam"
    if not sam.is_file():
        pytest.skip(f"no SAM CLI at {sam} (run `make sam-venv`)")
    app_dir = tmp_path_factory.mktemp("sam-cli-config")
    (app_dir / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0", "__SAM_CLI_APP_DIR": str(app_dir)}
    env.update({"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""})
    cache: dict[str, str] = {}

    def get(command: str) -> str:
        if command not in cache:
            result = subprocess.run(
                [str(sam), command, "--help"], capture_output=True, text=True, env=env, timeout=60, check=False
            )
            assert result.returncode == 0, result.stderr
            cache[command] = result.stdout
        return cache[command]

    return get


def check_sam(argv: list[str], sam_help: Any) -> None:
    assert argv[1] in ("build", "deploy", "validate", "logs", "delete", "list"), f"unexpected sam command {argv}"
    text = sam_help(argv[1])
    for option in (a for a in argv[2:] if a.startswith("-")):
        assert re.search(rf"(^|\s|,){re.escape(option.split('=')[0])}\b", text), f"sam {argv[1]} has no {option}"


def makefile_targets(directory: Path = ROOT) -> dict[str, str]:
    text = (directory / "Makefile").read_text(encoding="utf-8")
    targets: dict[str, str] = {}
    for found in re.finditer(r"^([A-Za-z][\w-]*):[^=\n]*\n((?:\t.*\n?)*)", text, re.MULTILINE):
        targets[found.group(1)] = found.group(2)
    return targets


def check_make(argv: list[str], directory: Path = ROOT) -> None:
    targets = makefile_targets(directory)
    for target in argv[1:]:
        assert target in targets, f"the Makefile in {directory} has no target {target!r}"
    if "demo" in argv[1:]:
        assert "workerless demo" in targets["demo"]


# ----------------------------------------------------------------------------- running a page


#: The make targets whose recipes' ``.venv/bin/...`` commands a page in an application runs.
APP_RUN_TARGETS = ("demo", "test", "template")


def devkit_distribution_name() -> str:
    import tomllib

    return str(tomllib.loads((ROOT / "devkit" / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"])


@dataclass
class Page:
    path: Path
    project: Path
    env: dict[str, str]
    port: int
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    #: Where the page's commands run: the project, or the application ``cd`` moved into.
    cwd: Path = field(default=Path())
    #: Applications ``workerless init`` wrote, by the directory named on its command line.
    apps: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cwd == Path():
            self.cwd = self.project

    def substitute(self, argv: list[str]) -> list[str]:
        return [a.replace(DOC_PORT, str(self.port)) for a in argv]

    def run(self, argv: list[str], *, session: Any, sam_help: Any) -> None:
        program = argv[0]
        assignment = re.fullmatch(r"[A-Z_]+=\$\((.*)", program)
        if assignment and argv[-1].endswith(")"):  # GROUP=$(aws ...): check the inner command
            inner = [assignment.group(1), *argv[1:-1], argv[-1][:-1]]
            return self.run([word for word in inner if word], session=session, sam_help=sam_help)
        if program == "aws":
            check_aws(argv, session)
        elif program == ".venv-sam/bin/sam":
            check_sam(argv, sam_help)
        elif program == "make":
            check_make(argv, self.cwd)
            if self.cwd != self.project:
                return self.make_in_app(argv)
        elif program == "git":
            assert argv[1] == "clone" and len(argv) >= 3, f"only `git clone URL` is expected, got {argv}"
        elif program == "pip":
            assert argv[1:] == ["install", devkit_distribution_name()], f"unexpected pip command {argv}"
        elif program == "workerless":
            return self.init_app(argv)
        elif program == "cd":
            assert len(argv) == 2 and argv[1] in self.apps, f"cd into {argv[1:]}: not an application the page made"
            self.cwd = self.apps[argv[1]]
        elif program == ".venv/bin/workerless":
            return self.workerless(argv)
        elif program in (".venv/bin/pytest", "curl"):
            return self.execute(self.substitute(argv))
        else:
            pytest.fail(f"{self.path.name}: no rule for the command {shlex.join(argv)!r}; add one to test_docs.py")
        self.checked.append(shlex.join(argv))
        return None

    def init_app(self, argv: list[str]) -> None:
        """``workerless init DIR ...`` as the installed devkit runs it; the application gets this
        checkout's virtual environments (what its ``make venv`` / ``sam-venv`` install) and the
        engine's ``.env``."""
        assert argv[1] == "init", f"only `workerless init` is run bare (the installed CLI): {argv}"
        args = cli.build_parser().parse_args(argv[1:])
        self.execute([str(self.project / ".venv" / "bin" / "workerless"), *argv[1:]])
        app = self.cwd / args.directory
        assert (app / "routes.yaml").is_file(), f"{shlex.join(argv)} wrote no application"
        for name in (".venv", ".venv-sam"):
            (app / name).symlink_to(ROOT / name)
        (app / ".env").write_bytes((self.project / ".env").read_bytes())
        self.apps[args.directory] = app
        return None

    def make_in_app(self, argv: list[str]) -> None:
        """The ``.venv/bin/...`` commands of the recipes (rendering, the demo, pytest), as make runs
        them; the install steps are skipped (the application's ``.venv`` is this checkout's)."""
        targets = argv[1:]
        if not set(targets) <= set(APP_RUN_TARGETS):
            self.checked.append(shlex.join(argv))
            return None
        env = {k: v for k, v in self.env.items() if not k.startswith("MAKE")}
        planned = subprocess.run(
            ["make", "-n", *targets], cwd=self.cwd, env=env, capture_output=True, text=True, timeout=60, check=True
        ).stdout.splitlines()
        steps = [shlex.split(line) for line in planned if line.startswith(".venv/bin/") and "/pip " not in line]
        assert steps, f"`{shlex.join(argv)}` runs nothing of .venv/bin: {planned}"
        for step in steps:
            self.execute(step)
        return None

    def workerless(self, argv: list[str]) -> None:
        parser = cli.build_parser()
        try:
            args = parser.parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"{self.path.name}: `{shlex.join(argv)}` is not a valid workerless command line")
        if args.command != "emulate":
            return self.execute(argv)
        argv = self.substitute(argv)
        out = self.project / f"emulate-{len(self.background)}.out"
        with out.open("wb") as stdout:
            process = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdout=stdout, stderr=subprocess.STDOUT)
        self.background.append(process)
        ready = self.cwd / args.env_out if args.env_out else None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert process.poll() is None, f"{shlex.join(argv)} exited: {out.read_text()}"
            if ready is not None and ready.is_file():
                break
            if ready is None and "WORKERLESS_ENGINE=" in out.read_text():
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"{shlex.join(argv)} did not start in 20 s: {out.read_text()}")
        self.ran.append(shlex.join(argv))
        return None

    def execute(self, argv: list[str]) -> None:
        result = subprocess.run(
            argv, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
        )
        assert result.returncode == 0, (
            f"{self.path.name}: `{shlex.join(argv)}` exited {result.returncode}\n"
            f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
        )
        if argv[0] == "curl":
            json.loads(result.stdout)
        self.ran.append(shlex.join(argv))
        return None

    def stop(self) -> None:
        for process in self.background:
            process.terminate()
        for process in self.background:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A scratch checkout: the project's files by symlink, nothing the commands write lands in it."""
    for name in PROJECT_ENTRIES:
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


@pytest.fixture
def engine_env(project: Path, sheptra_emulator: RunningEmulator) -> None:
    """`.env` in the scratch project: a Sheptra emulator's values (the reader's "real engine")."""
    sheptra_emulator.write_env_file(project / ".env")


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", [pytest.param(path, id=page_id(path)) for path in PAGES])
def test_every_command_on_the_page_works(
    path: Path, project: Path, engine_env: None, botocore_session: Any, sam_help: Any
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERLESS_", "SHEPTRA_", "NF_", "STAGENEXT_"))}
    env.update(
        {
            "HTTP_PROXY": "http://127.0.0.1:9",
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "POWERTOOLS_DEV": "false",
        }
    )
    page = Page(path, project, env, free_port())
    try:
        for block in read_blocks(path):
            if "file" in block.attrs:
                target = page.cwd / block.attrs["file"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.text, encoding="utf-8")
            elif block.lang in ("bash", "sh", "shell", "console"):
                for argv in commands(block):
                    page.run(argv, session=botocore_session, sam_help=sam_help)
    finally:
        page.stop()
    assert page.ran or page.checked or not any(b.lang == "bash" for b in read_blocks(path))


# ----------------------------------------------------------------------------- what the pages claim


def test_getting_started_lists_exactly_what_sam_deploy_guided_asks(tmp_path: Path) -> None:
    """The prompt table is the template's parameters in template order with their defaults, between
    SAM CLI's own prompts (read from the installed SAM CLI's guided deploy)."""
    from workerless_devkit.local.template import parse_template_text

    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    prompts = re.findall(r"^\| `([^`]+)` \|", text, re.MULTILINE)
    parameters = parse_template_text((ROOT / "template.yaml").read_text(encoding="utf-8"), source="template.yaml")[
        "Parameters"
    ]
    expected_parameters = [f"Parameter {name} [{props.get('Default', '')}]" for name, props in parameters.items()]
    assert prompts[2 : 2 + len(parameters)] == expected_parameters
    # The page deploys the application `workerless init orders` writes: its samconfig.toml (the stack
    # named after the directory) and the template rendered from the framework's (the same Parameters).
    from workerless_devkit.devtools.init import init_application

    assert "workerless init orders " in text
    app = init_application(tmp_path / "orders", job_type="charge-payment").directory
    samconfig = (app / "samconfig.toml").read_text(encoding="utf-8")
    stack = re.search(r'stack_name = "([^"]+)"', samconfig)
    assert stack is not None
    assert prompts[:2] == [f"Stack Name [{stack.group(1)}]", "AWS Region [us-east-1]"]
    after = prompts[2 + len(parameters) :]
    assert after == [
        "Confirm changes before deploy [Y/n]",
        "Allow SAM CLI IAM role creation [Y/n]",
        "Disable rollback [y/N]",
        "Save arguments to configuration file [Y/n]",
        "SAM configuration file [samconfig.toml]",
        "SAM configuration environment [default]",
    ]
    assert "confirm_changeset = true" in samconfig  # why "Confirm changes" defaults to Y
    guided = next(
        (ROOT / ".venv-sam").glob("lib/python3*/site-packages/samcli/commands/deploy/guided_context.py"), None
    )
    if guided is None:
        pytest.skip("no SAM CLI in .venv-sam (run `make sam-venv`)")
    source = guided.read_text(encoding="utf-8")
    for prompt in ["Stack Name", "AWS Region", "Parameter {parameter_key}", *(p.split(" [")[0] for p in after)]:
        assert prompt in source, f"SAM CLI's guided deploy no longer asks {prompt!r}"


def test_relative_links_between_pages_resolve() -> None:
    for path in PAGES:
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            assert (path.parent / target).exists(), f"{page_id(path)} links to missing {target}"


def test_readme_layout_names_every_docs_page() -> None:
    # A newcomer finds the docs through the README's layout block; a page missing from it is a page
    # nobody reads. Top-level pages are named by stem, subdirectories by "name/".
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(row for row in readme.splitlines() if row.startswith("docs/ "))
    named = {word.strip() for word in line.split(None, 1)[1].split(",")}
    for entry in sorted((ROOT / "docs").iterdir()):
        expected = entry.name + "/" if entry.is_dir() else entry.stem
        if entry.is_dir() or entry.suffix == ".md":
            assert expected in named, f"README's layout does not list docs/{expected} (it lists {named})"


def test_every_test_file_the_docs_write_is_under_make_tests_testpaths() -> None:
    # The docs tell a user where to put a handler's test; `make test` must then run it, so each
    # ``file=tests/...`` block must sit under one of pyproject's testpaths.
    import tomllib

    testpaths = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"][
        "testpaths"
    ]
    written = [
        (page_id(path), name)
        for path in PAGES
        for name in re.findall(r"```python file=(tests/\S+)", path.read_text(encoding="utf-8"))
    ]
    assert written, "no page writes a test file any more; this test checks nothing"
    for page, name in written:
        assert any(name.startswith(prefix.rstrip("/") + "/") for prefix in testpaths), (
            f"{page} tells the user to write {name}, which `make test` (testpaths {testpaths}) does not collect"
        )


def test_operating_names_every_alarm_and_metric() -> None:
    text = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    source = (ROOT / "template.yaml").read_text(encoding="utf-8")
    # Every alarm the stack gets: the route loop expanded as CloudFormation expands it.
    expanded = expand_language_extensions(parse_template_text(source), {})
    alarms = [lid for lid, r in expanded["Resources"].items() if r.get("Type") == "AWS::CloudWatch::Alarm"]
    stems = "|".join(template_routes(source))
    assert stems and alarms
    for alarm in alarms:
        per_type = re.sub(rf"^({stems})(QueueAgeAlarm)$", r"<route>\2", alarm)
        assert f"`{per_type}`" in text, f"operating.md does not describe {alarm}"
    for name in observability.METRICS:
        assert f"`{name}`" in text, f"operating.md does not describe the metric {name}"


def test_the_command_reader_handles_comments_continuations_and_chains() -> None:
    block = Block("bash", {}, "make demo   # note\ncd x && make test\naws logs tail \\\n  g --follow\n", 1)
    assert commands(block) == [
        ["make", "demo"],
        ["cd", "x"],
        ["make", "test"],
        ["aws", "logs", "tail", "g", "--follow"],
    ]
    assigned = commands(Block("bash", {}, 'G=$(aws sqs list-queues --output text)\naws logs tail "$G"\n', 1))
    assert assigned == [["G=$(aws", "sqs", "list-queues", "--output", "text)"], ["aws", "logs", "tail", "$G"]]


def test_every_page_and_the_scaffold_key_a_once_only_effect_on_workflow_key() -> None:
    # Issue 27, 5: job.key is new per engine attempt, job.workflow_key stable across retries. A
    # charge keyed on job.key is charged again on every retry, so no example may key an effect on
    # it, and no text may call job.key stable across retries.
    from workerless_devkit.devtools import scaffold

    sources = {page_id(path): path.read_text(encoding="utf-8") for path in PAGES}
    sources["scaffold.py"] = Path(scaffold.__file__).read_text(encoding="utf-8")
    keyed = 0
    for name, text in sources.items():
        for line in text.splitlines():
            for found in re.finditer(r"idempotency_key=([\w.]+)", line):
                keyed += 1
                assert found.group(1) == "job.workflow_key", f"{name}: {line.strip()}"
            if "job.key" in line or "`key`" in line:
                assert not re.search(r"stable across (the engine's )?retries", line), f"{name}: {line.strip()}"
    assert keyed >= 3, "the examples no longer show an idempotency key; this test checks nothing"
    assert "job.workflow_key" in sources["scaffold.py"] and "job.key is new per attempt" in sources["scaffold.py"]
