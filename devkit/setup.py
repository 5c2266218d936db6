"""The devkit's version and its pin of the runtime, both from the one version source.

The version lives in the runtime's ``workerless/_version.py`` (../layers/workerless in a checkout).
pyproject.toml cannot point there (setuptools refuses paths outside the project), so this reads it.
Built from its sdist, the checkout is not there: the sdist's PKG-INFO holds the version it was made
with (and the pin with it). The devkit and the runtime release together: the devkit pins
``workerless==`` its own version.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
RUNTIME_VERSION_FILE = HERE.parent / "layers" / "workerless" / "workerless" / "_version.py"

#: The devkit's own dependencies (beside ``workerless==VERSION``).
DEPENDENCIES = [
    # cloudformation: local mode runs the stack moto's CloudFormation creates from the transformed
    # template; server: the deploy rehearsal's S3 and CloudFormation endpoint on 127.0.0.1 for SAM CLI.
    "moto[sqs,dynamodb,secretsmanager,s3,ssm,cloudformation,server]>=5.0,<6",
    "cryptography>=42",
    "pyjwt>=2.8,<3",
    "ruamel.yaml>=0.18,<1",
    # SAM's own translator, in-process and offline: local mode renders each function's role with it
    # and enforces it (workerless_devkit.local.iam). cfn-lint does not pull it in.
    "aws-sam-translator>=1.115,<2",
]


def version() -> str:
    if RUNTIME_VERSION_FILE.is_file():
        match = re.search(r'(?m)^__version__ = "([^"]+)"$', RUNTIME_VERSION_FILE.read_text(encoding="utf-8"))
    else:
        pkg_info = HERE / "PKG-INFO"
        match = re.search(r"(?m)^Version: (\S+)$", pkg_info.read_text(encoding="utf-8")) if pkg_info.is_file() else None
    if match is None:
        raise SystemExit(f"workerless-devkit: no version found ({RUNTIME_VERSION_FILE} nor the sdist's PKG-INFO)")
    return match.group(1)


#: The framework an application of its own renders (workerless_devkit.devtools.app): copied from the
#: checkout into the package at build time, so the wheel and the sdist carry the version they were
#: built with (an sdist's build finds the copy it holds).
FRAMEWORK_FILES = {
    "template.yaml": "template.yaml",
    **{f"functions/{f}/app.py": f"functions/{f}/app.py" for f in ("poller", "heartbeat", "deadletter")},
    "layers/workerless/Makefile": "layer/Makefile",
    "layers/workerless/requirements.txt": "layer/requirements.txt",
}
FRAMEWORK_DIR = HERE / "workerless_devkit" / "framework"


def copy_framework() -> None:
    checkout = HERE.parent
    if all((checkout / source).is_file() for source in FRAMEWORK_FILES):
        for source, target in FRAMEWORK_FILES.items():
            (FRAMEWORK_DIR / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(checkout / source, FRAMEWORK_DIR / target)
    elif not all((FRAMEWORK_DIR / target).is_file() for target in FRAMEWORK_FILES.values()):
        raise SystemExit(f"workerless-devkit: no framework files (no checkout at {checkout}, nor {FRAMEWORK_DIR})")


VERSION = version()
copy_framework()
setup(version=VERSION, install_requires=[f"workerless=={VERSION}", *DEPENDENCIES])
