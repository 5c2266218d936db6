"""What can stop a deploy rehearsal, one class per stage, each naming what was wrong.

They are :class:`~workerless.errors.ConfigurationError`: every one of them means the template, the
build or the toolchain would not deploy (or cannot be rehearsed) as it is, and retrying the same
run changes nothing.
"""

from __future__ import annotations

from workerless.errors import ConfigurationError


class RehearsalError(ConfigurationError):
    """The rehearsal stopped: the message says at which step and what it saw."""


class ToolError(RehearsalError):
    """A tool the rehearsal runs is missing, or a subprocess of it failed or ran past its time."""


class PackagingError(RehearsalError):
    """`sam package` wrote a template CloudFormation would refuse (e.g. a loop function without code)."""


class TransformError(RehearsalError):
    """A server-side transform (AWS::LanguageExtensions, AWS::Serverless) failed or left a construct behind."""


class LintError(RehearsalError):
    """cfn-lint found an error (E-level) in a template at one of the stages."""


class StackError(RehearsalError):
    """The stack was not created on the emulated CloudFormation, or is not what the template declares."""


class SkippedResourceError(RehearsalError):
    """A resource moto's CloudFormation skipped fails its check against the transformed template."""


class ArtifactError(RehearsalError):
    """An uploaded artifact is missing, or does not hold what its function or layer needs."""
