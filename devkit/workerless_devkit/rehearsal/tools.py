"""SAM CLI as the rehearsal runs it: where it is, which Python runs it, and the environment it gets.

SAM CLI lives in its own virtual environment (.venv-sam: its pins clash with the application's), so
it always runs as a subprocess. Every subprocess here gets SAM CLI's telemetry off, a fresh SAM CLI
config directory whose weekly version check is not due, fake credentials, no AWS config files, and
a proxy on a closed loopback port for everything but loopback: a call that would leave the machine
fails at once instead of reaching AWS. The one exception is `sam build`, which may reach the package
index for the layer's wheels exactly as `make build` does (:func:`build_env`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workerless_devkit.rehearsal.errors import ToolError

#: A subprocess of SAM CLI that runs longer than this has hung (a build of the layer takes ~30 s cold).
SUBPROCESS_TIMEOUT = 600.0
#: Nothing listens here: a request that slipped past NO_PROXY fails at once, locally.
CLOSED_PROXY = "http://127.0.0.1:9"
#: Credentials the emulator accepts; never a real key.
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "rehearsal", "AWS_SECRET_ACCESS_KEY": "rehearsal"}
#: Variables that could point a subprocess at a developer's real account or a proxy.
_DROPPED = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_ENDPOINT_URL",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    # A pytest run under make must not hand its make flags to the layer's make.
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
)


@dataclass(frozen=True, slots=True)
class SamCli:
    """The `sam` script and the interpreter that runs it (where samcli and samtranslator import)."""

    sam: Path
    python: Path
    version: str


def locate_sam(root: Path, explicit: str | None = None) -> SamCli:
    """SAM CLI as the tests find it: ``explicit`` (the Makefile's WORKERLESS_SAM), else root/.venv-sam."""
    chosen = explicit if explicit is not None else os.environ.get("WORKERLESS_SAM")
    sam = Path(chosen) if chosen else root / ".venv-sam" / "bin" / "sam"
    if not sam.is_file():
        raise ToolError(f"no SAM CLI at {sam}: run `make sam-venv` (or set WORKERLESS_SAM to a sam script)")
    python = _sam_python(sam)
    return SamCli(sam=sam, python=python, version=_sam_version(python))


def _sam_python(sam: Path) -> Path:
    first = sam.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    if first.startswith("#!") and Path(first[2:].strip()).is_file():
        return Path(first[2:].strip())
    sibling = sam.parent / "python"
    if not sibling.is_file():
        raise ToolError(f"cannot find the Python that runs {sam} (no shebang interpreter, no {sibling})")
    return sibling


def _sam_version(python: Path) -> str:
    # The distribution's own metadata: `sam --version` would start SAM CLI's whole CLI (~1 s).
    result = run(
        [str(python), "-c", "from importlib.metadata import version; print(version('aws-sam-cli'))"],
        env=dict(os.environ),
        what="reading SAM CLI's version",
        timeout=60,
    )
    text = result.stdout.strip()
    if not re.fullmatch(r"\d+\.\d+\.\d+\S*", text):
        raise ToolError(f"{python} reports aws-sam-cli version {text!r}, not a version number")
    return text


def sam_config_dir(parent: Path) -> Path:
    """A SAM CLI config directory whose version check was "just made": SAM CLI makes no PyPI call."""
    app_dir = parent / "sam-cli-config"
    app_dir.mkdir(parents=True, exist_ok=True)
    (app_dir / "metadata.json").write_text(
        json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}), encoding="utf-8"
    )
    return app_dir


def _base_env(app_dir: Path, region: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith("AWS_ENDPOINT_URL")}
    env.update(
        {
            "SAM_CLI_TELEMETRY": "0",
            "__SAM_CLI_APP_DIR": str(app_dir),
            # Phase 1 of the transform, as samconfig.toml's language_extensions = true asks (SAM CLI
            # reads samconfig.toml only beside the template, not beside a build directory's).
            "SAM_CLI_ENABLE_LANGUAGE_EXTENSIONS": "1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(app_dir / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(app_dir / "no-aws-credentials"),
            "AWS_DEFAULT_REGION": region,
            "AWS_REGION": region,
        }
    )
    return env


def build_env(app_dir: Path, region: str) -> dict[str, str]:
    """`sam build`'s environment: no credentials at all, and the network the layer's pip needs."""
    return _base_env(app_dir, region)


def loopback_env(app_dir: Path, region: str, endpoint: str, s3_endpoint: str) -> dict[str, str]:
    """A subprocess's environment that reaches AWS only as the emulator at ``endpoint`` on loopback."""
    env = _base_env(app_dir, region)
    env.update(FAKE_CREDENTIALS)
    env.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            # moto's CloudFormation reads a TemplateURL as path-style only when its host is
            # "localhost" (or s3*.amazonaws.com): SAM CLI builds the URL from S3's endpoint.
            "AWS_ENDPOINT_URL_S3": s3_endpoint,
            "HTTP_PROXY": CLOSED_PROXY,
            "HTTPS_PROXY": CLOSED_PROXY,
            "ALL_PROXY": CLOSED_PROXY,
            "NO_PROXY": "127.0.0.1,localhost",
        }
    )
    return env


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    what: str,
    cwd: Path | None = None,
    timeout: float = SUBPROCESS_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Runs ``args``; a non-zero exit or a timeout is a :class:`ToolError` saying ``what`` failed and why.

    The error carries the last lines of stderr (SAM CLI's tracebacks are long; their last lines say
    what was wrong). Nothing secret is in these environments, and no environment is logged.
    """
    result = run_unchecked(args, env=env, what=what, cwd=cwd, timeout=timeout)
    if result.returncode != 0:
        raise ToolError(f"{what} failed (exit {result.returncode}): {tail(result.stderr or result.stdout)}")
    return result


def run_unchecked(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    what: str,
    cwd: Path | None = None,
    timeout: float = SUBPROCESS_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Runs ``args`` and returns whatever it did; only a timeout or a missing program raises."""
    try:
        return subprocess.run(
            list(args), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise ToolError(f"{what} did not finish within {timeout:.0f} s") from None
    except OSError as exc:
        raise ToolError(f"{what} could not start: {exc}") from None


def tail(text: str, lines: int = 12) -> str:
    """The last non-empty ``lines`` of ``text``, for an error message."""
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:]) if kept else "(no output)"
