"""`sam build`, `sam package` and `sam deploy --no-execute-changeset`, as subprocesses of SAM CLI.

`sam deploy` runs `sam package` first; then it uploads the packaged template and asks
CloudFormation for a change set, which CloudFormation transforms server-side. The first two steps
run here against moto's S3; the change set is attempted against moto's CloudFormation and its
outcome recorded as it is (:class:`DeployAttempt`), since moto does not run AWS::LanguageExtensions
(docs/assumptions.md): the rehearsal then applies the transforms itself (:mod:`.transform`).

`sam package` exits 0 even when it could not place a loop function's code: it prints "Could not
find S3 URI for CodeUri in expanded resource ..." and writes an empty ``SAMCodeUri<Loop>`` mapping.
Both are a :class:`PackagingError` here (CloudFormation would refuse the template).
"""

from __future__ import annotations

import fcntl
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workerless_devkit.local.template import TemplateError, parse_template_text
from workerless_devkit.rehearsal.errors import PackagingError
from workerless_devkit.rehearsal.tools import SamCli, run, run_unchecked, tail

#: What SAM CLI 1.170 prints for a loop resource whose code it did not upload or map.
NOT_FOUND = "Could not find S3 URI"
#: The mappings `sam package` generates for Fn::ForEach loops with a dynamic CodeUri/ContentUri.
GENERATED_MAPPING = re.compile(r"^SAMCodeUri|^SAMContentUri")


def build(sam: SamCli, root: Path, build_dir: Path, cache_dir: Path, env: Mapping[str, str]) -> Path:
    """`make build`'s `sam build` into ``build_dir`` (not the developer's .aws-sam); the built template.

    Two builds sharing ``cache_dir`` (two test modules on two xdist workers, or `make rehearse`
    beside `make test`) take turns: `sam build --cached` rewrites the cache's entries in place.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir.parent / f"{cache_dir.name}.lock").open("w") as lock:
        # Blocks until the other build is done; the lock goes with the file when this one ends.
        fcntl.flock(lock, fcntl.LOCK_EX)
        run(
            [
                str(sam.sam),
                "build",
                "--language-extensions",
                "--build-dir",
                str(build_dir),
                "--cache-dir",
                str(cache_dir),
                "--cached",
                "--parallel",
            ],
            # The layer's Makefile runs pip under the Python it is given (make build: .venv-sam's).
            env={**env, "PYTHON": str(sam.python)},
            cwd=root,
            what="sam build",
        )
    built = build_dir / "template.yaml"
    if not built.is_file():
        raise PackagingError(f"sam build succeeded but wrote no {built}")
    return built


@dataclass(frozen=True, slots=True)
class Packaged:
    """What `sam package` wrote and said."""

    template: Path
    data: dict[str, Any]
    stderr: str


def package(sam: SamCli, built: Path, bucket: str, output: Path, env: Mapping[str, str]) -> Packaged:
    """`sam package` of ``built`` into ``bucket``; refuses what CloudFormation would refuse."""
    result = run(
        [
            str(sam.sam),
            "package",
            "--language-extensions",
            "--template-file",
            str(built),
            "--s3-bucket",
            bucket,
            "--output-template-file",
            str(output),
            "--no-progressbar",
        ],
        env=env,
        cwd=built.parent,
        what="sam package",
    )
    missing = [line.strip() for line in result.stderr.splitlines() if NOT_FOUND in line]
    if missing:
        raise PackagingError(
            f"sam package could not place the code of a loop resource ({len(missing)} times): {missing[0]}. "
            "CloudFormation would refuse the packaged template (an empty mapping, FindInMap keys it does not hold)."
        )
    try:
        data = parse_template_text(output.read_text(encoding="utf-8"), source=str(output))
    except (OSError, TemplateError) as exc:
        raise PackagingError(f"sam package wrote no readable template at {output}: {exc}") from None
    empty = [
        name for name, value in (data.get("Mappings") or {}).items() if GENERATED_MAPPING.match(name) and not value
    ]
    if empty:
        raise PackagingError(f"sam package wrote empty generated mappings {', '.join(empty)} (no code location)")
    return Packaged(template=output, data=data, stderr=result.stderr)


@dataclass(frozen=True, slots=True)
class DeployAttempt:
    """`sam deploy --no-execute-changeset` against the emulator, as it went."""

    command: tuple[str, ...]
    returncode: int
    #: SAM CLI's own "Error: ..." lines (else the end of its output).
    sam_said: str
    #: The emulator's server-side exception, when it raised one (the last line of its traceback).
    server_said: str

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0

    def as_json(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "returncode": self.returncode,
            "succeeded": self.succeeded,
            "sam_said": self.sam_said,
            "server_said": self.server_said,
        }


def deploy_without_executing(
    sam: SamCli,
    packaged: Path,
    *,
    stack_name: str,
    bucket: str,
    region: str,
    parameters: Mapping[str, str],
    env: Mapping[str, str],
) -> DeployAttempt:
    """What `sam deploy` does up to the change set it would ask you to confirm; never raises on its outcome."""
    args = [
        str(sam.sam),
        "deploy",
        "--language-extensions",
        "--template-file",
        str(packaged),
        "--stack-name",
        stack_name,
        "--s3-bucket",
        bucket,
        "--region",
        region,
        "--capabilities",
        "CAPABILITY_IAM",
        "--no-execute-changeset",
        "--no-confirm-changeset",
        "--no-progressbar",
        "--parameter-overrides",
        *(f"{key}={value}" for key, value in parameters.items()),
    ]
    with _server_errors() as errors:
        result = run_unchecked(args, env=env, cwd=packaged.parent, what="sam deploy --no-execute-changeset")
    said = [line.strip() for line in (result.stderr + "\n" + result.stdout).splitlines() if line.startswith("Error")]
    server = [line for text in errors for line in text.splitlines() if line.strip()]
    command = ("sam", *args[1:])
    return DeployAttempt(
        command=command,
        returncode=result.returncode,
        sam_said="\n".join(said) if said else tail(result.stderr or result.stdout, 4),
        server_said=server[-1].strip() if server else "",
    )


@contextmanager
def _server_errors() -> Iterator[list[str]]:
    """Collects (instead of printing) what moto's server logs at ERROR: an exception it raised."""
    logger = logging.getLogger("werkzeug")
    texts: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            texts.append(self.format(record))

    handler = _Keep(level=logging.ERROR)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield texts
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
