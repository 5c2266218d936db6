"""cfn-lint at each stage: the packaged template, the expanded one and the transformed one.

Each stage is what some tool or CloudFormation itself reads next, and each hides mistakes from the
others: the packaged template still has its loops (cfn-lint expands them its own way), the
expanded one has SAM resources, the transformed one is plain CloudFormation with every generated
resource written out. An E-level finding at any stage stops the rehearsal; W and I findings are
kept for the report (some are what a transform leaves by design: a mapping only the loop used, a
parameter every reference to which was resolved).
"""

from __future__ import annotations

from collections.abc import Sequence
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

    @property
    def level(self) -> str:
        return self.rule[:1]

    def as_json(self) -> dict[str, str]:
        return {"stage": self.stage, "rule": self.rule, "message": self.message, "path": self.path}

    def __str__(self) -> str:
        return f"{self.stage}: {self.rule} {self.message} ({self.path})"


def lint(stage: str, text: str, regions: Sequence[str]) -> tuple[Finding, ...]:
    """cfn-lint's findings on ``text`` (YAML or JSON) for ``regions``; raises on any E-level one."""
    from cfnlint.api import lint as cfn_lint

    matches: list[Any] = cfn_lint(text, regions=list(regions))
    findings = tuple(
        Finding(stage=stage, rule=str(m.rule.id), message=str(m.message), path="/".join(map(str, m.path or ())))
        for m in matches
    )
    errors = [f for f in findings if f.level == "E"]
    if errors:
        shown = "\n".join(f"  {f}" for f in errors[:20])
        raise LintError(f"cfn-lint: {len(errors)} error(s) in the {stage} template:\n{shown}")
    return findings
