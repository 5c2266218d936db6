"""The deploy rehearsal (issue 25): `sam build`, `sam package`, the server-side transforms and the
created stack, all on loopback, checked at every step, and written as a bundle local mode can run.

`make rehearse` (``python -m workerless_devkit.rehearsal``) runs it; tests/functional/
test_deploy_rehearsal.py runs it once per test session. docs/operating.md says what it checks and
what only a real AWS account can show; docs/assumptions.md where moto's CloudFormation differs.
"""

from workerless_devkit.rehearsal.errors import (
    ArtifactError,
    LintError,
    PackagingError,
    RehearsalError,
    SkippedResourceError,
    StackError,
    ToolError,
    TransformError,
)
from workerless_devkit.rehearsal.run import (
    RehearsalOptions,
    RehearsalResult,
    StackRehearsal,
    StackTarget,
    default_parameters,
    rehearse,
)

__all__ = [
    "ArtifactError",
    "LintError",
    "PackagingError",
    "RehearsalError",
    "RehearsalOptions",
    "RehearsalResult",
    "SkippedResourceError",
    "StackError",
    "StackRehearsal",
    "StackTarget",
    "ToolError",
    "TransformError",
    "default_parameters",
    "rehearse",
]
