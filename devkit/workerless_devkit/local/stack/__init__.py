"""Local mode on the stack a deploy creates: a rehearsal bundle's template created as a stack on
the embedded (moto) CloudFormation and read back into local mode's model.

- :mod:`~workerless_devkit.local.stack.bundle`: the bundle directory (the rehearsal's contract);
- :mod:`~workerless_devkit.local.stack.create`: artifacts uploaded, CreateStack, CREATE_COMPLETE;
- :mod:`~workerless_devkit.local.stack.read`: the stack's functions, event sources, queues, table,
  bucket, parameters and roles, as the embedded AWS answers for them (what moto's CloudFormation
  drops: from transformed.json);
- :mod:`~workerless_devkit.local.stack.code`: each function's code zip extracted, the layer held
  to the runtime this process imports.

:func:`load_stack` does all of it inside an active ``moto.mock_aws`` (``LocalTopology.from_bundle``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workerless_devkit.local.stack.bundle import Bundle, BundleError, load_bundle
from workerless_devkit.local.stack.code import CodeMismatchError
from workerless_devkit.local.stack.create import CreatedStack, StackCreateError, create_stack
from workerless_devkit.local.stack.read import StackView, read_stack

__all__ = [
    "Bundle",
    "BundleError",
    "CodeMismatchError",
    "CreatedStack",
    "StackCreateError",
    "StackView",
    "create_stack",
    "load_bundle",
    "load_stack",
    "read_stack",
]


def load_stack(
    bundle: Bundle, session: Any, code_root: Path, *, parameters: Mapping[str, str] | None = None
) -> StackView:
    """Create ``bundle``'s stack in the embedded AWS ``session`` reaches and read it back; each
    function's code is extracted under ``code_root``."""
    created = create_stack(bundle, session, parameters=parameters)
    return read_stack(bundle, created, session, code_root)
