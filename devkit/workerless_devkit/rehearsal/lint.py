"""cfn-lint at each stage: the packaged template, the expanded one and the transformed one.

Each stage is what some tool or CloudFormation itself reads next, and each hides mistakes from the
others: the packaged template still has its loops (cfn-lint expands them its own way), the
expanded one has SAM resources, the transformed one is plain CloudFormation with every generated
resource written out. An E-level finding at any stage stops the rehearsal; W and I findings are
kept for the report (some are what a transform leaves by design: a mapping only the loop used, a
parameter every reference to which was resolved).

One kind of E finding is kept apart, not waved through: one on a resource whose Condition is false
(``not_created``). AWS::LanguageExtensions rewrites such a resource on purpose: SAM CLI's
implementation, "to match" CloudFormation's, replaces every reference it cannot resolve in it
with AWS::NoValue and drops it (an alarm's Dimension loses its ``Value: !Ref PollerFunction``
when AlarmTopicArn is empty). CloudFormation never creates that resource; cfn-lint still holds
its properties to the schema. Such findings are reported with ``not_created`` set.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from workerless_devkit.rehearsal.errors import LintError


@dataclass(frozen=True, slots=True)
class Finding:
    """One cfn-lint match."""

    stage: str
    rule: str
    message: str
    path: str
    #: On a resource whose Condition is false: CloudFormation does not create it.
    not_created: bool = False

    @property
    def level(self) -> str:
        return self.rule[:1]

    def as_json(self) -> dict[str, str | bool]:
        return {
            "stage": self.stage,
            "rule": self.rule,
            "message": self.message,
            "path": self.path,
            "not_created": self.not_created,
        }

    def __str__(self) -> str:
        return f"{self.stage}: {self.rule} {self.message} ({self.path})"


def lint(stage: str, text: str, regions: Sequence[str], not_created: Collection[str] = ()) -> tuple[Finding, ...]:
    """cfn-lint's findings on ``text`` (YAML or JSON) for ``regions``; raises on any E-level one.

    ``not_created``: logical IDs of resources whose Condition is false (see the module's docstring).
    """
    from cfnlint.api import lint as cfn_lint

    matches: list[Any] = cfn_lint(text, regions=list(regions))
    findings = []
    for m in matches:
        path = [str(p) for p in m.path or ()]
        findings.append(
            Finding(
                stage=stage,
                rule=str(m.rule.id),
                message=str(m.message),
                path="/".join(path),
                not_created=len(path) > 1 and path[0] == "Resources" and path[1] in not_created,
            )
        )
    errors = [f for f in findings if f.level == "E" and not f.not_created]
    if errors:
        shown = "\n".join(f"  {f}" for f in errors[:20])
        raise LintError(f"cfn-lint: {len(errors)} error(s) in the {stage} template:\n{shown}")
    return tuple(findings)
