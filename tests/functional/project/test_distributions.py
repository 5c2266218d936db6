"""The two distributions as a user gets them (issue 27, 1): `python -m build` makes each a wheel and
an sdist (the wheel built from the sdist, as a downstream rebuild would), and a fresh virtual
environment with only those wheels and their dependencies runs `workerless demo` to completion.

No network: the build backend and every dependency come from the wheelhouse `make wheelhouse`
collects (.cache/wheelhouse; `make test` makes it first), with pip's index and config switched off.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
import workerless

ROOT = Path(__file__).resolve().parents[3]
WHEELHOUSE = ROOT / ".cache" / "wheelhouse"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pyc")

pytestmark = pytest.mark.slow


def _offline_pip_env() -> dict[str, str]:
    """pip with no index, no config file (the machine's may add one), only the wheelhouse."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(WHEELHOUSE),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONNOUSERSITE="1",
    )
    return env


def _run(args: list[str | Path], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, (
        f"{args} exited {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


def build_distributions(source: Path, *, version: str | None = None) -> Path:
    """Both distributions built (wheel and sdist each) from a copy of the checkout in ``source``; their
    directory. The copy has the checkout's layout: the devkit reads the version from
    ../layers/workerless and copies the framework an application renders (template.yaml, the
    library's functions, the layer's build) into its package. ``version``: a release of the copy at
    that version (its one version line changed, as a release changes it)."""
    if not (WHEELHOUSE / ".complete").is_file():
        pytest.fail(f"no wheelhouse at {WHEELHOUSE}: `make wheelhouse` collects it (`make test` does first)")
    shutil.copytree(ROOT / "layers" / "workerless", source / "layers" / "workerless", ignore=_IGNORE)
    if version is not None:
        version_file = source / "layers" / "workerless" / "workerless" / "_version.py"
        text = version_file.read_text(encoding="utf-8")
        released = text.replace(f'__version__ = "{workerless.__version__}"', f'__version__ = "{version}"')
        assert released != text, "the version line is not where a release changes it"
        version_file.write_text(released, encoding="utf-8")
    shutil.copytree(ROOT / "devkit", source / "devkit", ignore=_IGNORE)
    shutil.copyfile(ROOT / "template.yaml", source / "template.yaml")
    for function in ("poller", "heartbeat", "deadletter"):
        shutil.copytree(ROOT / "functions" / function, source / "functions" / function, ignore=_IGNORE)
    out = source / "dist"
    env = _offline_pip_env()
    for project in (source / "layers" / "workerless", source / "devkit"):
        _run([sys.executable, "-m", "build", "--outdir", out, project], cwd=source, env=env)
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_distributions(tmp_path_factory.mktemp("source"))


def test_both_distributions_build_as_wheel_and_sdist_at_the_one_version(dist: Path) -> None:
    version = workerless.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    names = sorted(p.name for p in dist.iterdir())
    assert names == [
        f"workerless-{version}-py3-none-any.whl",
        f"workerless-{version}.tar.gz",
        f"workerless_devkit-{version}-py3-none-any.whl",
        f"workerless_devkit-{version}.tar.gz",
    ]


def test_every_distribution_ships_the_license_its_metadata_declares(dist: Path) -> None:
    # License-Expression says Apache-2.0; the wheel's dist-info and the sdist carry the text itself,
    # the repository's LICENSE byte for byte (issue 27, the metadata's license with its file).
    license_text = (ROOT / "LICENSE").read_bytes()
    for wheel in sorted(dist.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
            text = archive.read(metadata).decode("utf-8")
            assert "License-Expression: Apache-2.0" in text, wheel.name
            assert "License-File: LICENSE" in text, wheel.name
            shipped = metadata.replace("/METADATA", "/licenses/LICENSE")
            assert shipped in names, (wheel.name, names)
            assert archive.read(shipped) == license_text, wheel.name
    for sdist in sorted(dist.glob("*.tar.gz")):
        with tarfile.open(sdist) as archive:
            top = sdist.name.removesuffix(".tar.gz")
            member = archive.extractfile(f"{top}/LICENSE")
            assert member is not None, sdist.name
            assert member.read() == license_text, sdist.name


def test_a_fresh_venv_with_only_the_wheels_runs_the_demo(dist: Path, tmp_path: Path) -> None:
    version = workerless.__version__
    env = _offline_pip_env()
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    bin_dir = target / "bin"
    _run(
        [bin_dir / "python", "-m", "pip", "install", "-q", "--find-links", dist, f"workerless-devkit=={version}"],
        cwd=tmp_path,
        env=env,
    )
    shown = _run([bin_dir / "pip", "show", "workerless", "workerless-devkit"], cwd=tmp_path, env=env).stdout
    assert shown.count(f"Version: {version}") == 2
    assert "Editable project location" not in shown
    assert _run([bin_dir / "workerless", "--version"], cwd=tmp_path, env=env).stdout.strip() == f"workerless {version}"

    # Both packages are the installed wheels' (their py.typed with them), not this checkout's source.
    probe = "import workerless, workerless_devkit; print(workerless.__file__); print(workerless_devkit.__file__)"
    files = _run([bin_dir / "python", "-c", probe], cwd=tmp_path, env=env).stdout.split()
    site = target.resolve()
    for file in files:
        assert Path(file).resolve().is_relative_to(site), file
        assert (Path(file).parent / "py.typed").is_file()

    # The demo, run by the installed console script: the example template and its handlers, the
    # runtime they import being the installed wheel's (the checkout's source is not on the path).
    demo_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    result = _run(
        [bin_dir / "workerless", "demo", "--template", ROOT / "template.yaml", "--jobs", "3"],
        cwd=tmp_path,
        env=demo_env,
    )
    assert "demo: all 3 jobs completed" in result.stdout
