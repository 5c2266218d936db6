"""IAM policy evaluation for one principal's identity-based policies, as AWS evaluates them.

What is modelled (AWS's policy evaluation logic, same-account, identity-based policies only):

- an explicit ``Deny`` that applies beats any ``Allow``; otherwise an ``Allow`` that applies is
  needed (no statement applying is an implicit deny);
- a statement applies when its ``Action`` matches the action (or ``NotAction`` does not) and its
  ``Resource`` matches the resource ARN (or ``NotResource`` does not);
- wildcards ``*`` (any run of characters) and ``?`` (exactly one character); actions compare
  case-insensitively (``sqs:sendmessage`` is ``sqs:SendMessage``), resource ARNs case-sensitively;
  in an ARN a wildcard stays inside its colon-separated segment, except a ``*`` that ends a segment,
  which may run on across colons (IAM's rule: ``...:log-group:name:*`` covers the group's streams);
- ``Condition`` blocks are not evaluated: a conditional ``Allow`` never allows and a conditional
  ``Deny`` always denies (local mode must be at least as strict as AWS).

Example:
    >>> statements = parse_statements(
    ...     {"Statement": [{"Effect": "Allow", "Action": "sqs:Send*", "Resource": "arn:aws:sqs:*:*:jobs"}]}, "doc"
    ... )
    >>> evaluate(statements, "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:jobs").allowed
    True
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workerless.errors import ConfigurationError


class PolicyError(ConfigurationError):
    """A policy document that IAM would reject (names the statement and what is wrong)."""


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement of an identity-based policy, its intrinsics already resolved to strings."""

    effect: str
    actions: tuple[str, ...] = ()
    not_actions: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    not_resources: tuple[str, ...] = ()
    conditional: bool = False
    sid: str | None = None
    #: Where the statement comes from, for messages: "PollerFunctionRole/workerless#FanOut".
    source: str = ""

    def matches_action(self, action: str) -> bool:
        if self.not_actions:
            return not any(action_matches(p, action) for p in self.not_actions)
        return any(action_matches(p, action) for p in self.actions)

    def matches_resource(self, resource: str) -> bool:
        if self.not_resources:
            return not any(resource_matches(p, resource) for p in self.not_resources)
        return any(resource_matches(p, resource) for p in self.resources)

    def applies(self, action: str, resource: str | None) -> bool:
        """Whether the statement covers ``action`` on ``resource`` (None: the resource is not compared)."""
        return self.matches_action(action) and (resource is None or self.matches_resource(resource))


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of evaluating one (action, resource) request."""

    allowed: bool
    explicit_deny: bool = False
    #: The statement that allowed or explicitly denied it (None for an implicit deny).
    statement: Statement | None = None


def evaluate(statements: Iterable[Statement], action: str, resource: str | None) -> Decision:
    """Whether ``statements`` allow ``action`` on ``resource`` (explicit deny > allow > implicit deny).

    ``resource`` None compares actions only (a call whose resource local mode does not model).
    """
    allowing: Statement | None = None
    for statement in statements:
        if not statement.applies(action, resource):
            continue
        if statement.effect == "Deny":
            # A Deny with a Condition we cannot evaluate is taken to apply: stricter than AWS at worst.
            return Decision(allowed=False, explicit_deny=True, statement=statement)
        if allowing is None and not statement.conditional:
            # An Allow with a Condition is not known to apply, so it does not allow.
            allowing = statement
    if allowing is not None:
        return Decision(allowed=True, statement=allowing)
    return Decision(allowed=False)


def action_matches(pattern: str, action: str) -> bool:
    """IAM action matching: the whole ``service:Action``, ``*`` and ``?``, case-insensitive."""
    return _action_regex(pattern).fullmatch(action) is not None


def resource_matches(pattern: str, arn: str) -> bool:
    """IAM resource matching: case-sensitive, wildcards within an ARN segment (a segment-final ``*``
    may run across colons); ``*`` alone matches every resource."""
    if pattern == "*":
        return True
    return _resource_regex(pattern).fullmatch(arn) is not None


@functools.lru_cache(maxsize=1024)
def _action_regex(pattern: str) -> re.Pattern[str]:
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


@functools.lru_cache(maxsize=4096)
def _resource_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    for index, char in enumerate(pattern):
        if char == "*":
            ends_segment = index + 1 == len(pattern) or pattern[index + 1] == ":"
            out.append(".*" if ends_segment else "[^:]*")
        elif char == "?":
            out.append("[^:]")
        else:
            out.append(re.escape(char))
    return re.compile("".join(out), re.DOTALL)


def parse_statements(document: Any, source: str) -> tuple[Statement, ...]:
    """The statements of a policy document (a mapping with ``Statement``: one statement or a list).

    Raises :class:`PolicyError` for what IAM rejects: no Effect Allow/Deny, neither or both of
    Action/NotAction or Resource/NotResource, a value that is not a string.
    """
    if not isinstance(document, Mapping):
        raise PolicyError(f"{source}: a policy document must be a mapping, got {type(document).__name__}")
    raw = document.get("Statement")
    items = raw if isinstance(raw, list) else [raw] if raw is not None else []
    statements: list[Statement] = []
    for index, item in enumerate(items):
        where = f"{source} statement {index}"
        if not isinstance(item, Mapping):
            raise PolicyError(f"{where}: a statement must be a mapping")
        sid = item.get("Sid")
        if isinstance(sid, str) and sid:
            where = f"{source}#{sid}"
        effect = item.get("Effect")
        if effect not in ("Allow", "Deny"):
            raise PolicyError(f"{where}: Effect must be Allow or Deny, got {effect!r}")
        actions, not_actions = _pair(item, "Action", "NotAction", where)
        resources, not_resources = _pair(item, "Resource", "NotResource", where)
        statements.append(
            Statement(
                effect=str(effect),
                actions=actions,
                not_actions=not_actions,
                resources=resources,
                not_resources=not_resources,
                conditional=bool(item.get("Condition")),
                sid=sid if isinstance(sid, str) and sid else None,
                source=where,
            )
        )
    return tuple(statements)


def _pair(item: Mapping[str, Any], key: str, not_key: str, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    has, has_not = key in item, not_key in item
    if has == has_not:
        raise PolicyError(f"{where}: a statement needs exactly one of {key} or {not_key}")
    value = item[key] if has else item[not_key]
    values = _strings(value, f"{where}.{key if has else not_key}")
    return (values, ()) if has else ((), values)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    items: Sequence[Any] = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise PolicyError(f"{where}: expected a string (intrinsics resolved), got {item!r}")
        out.append(item)
    if not out:
        raise PolicyError(f"{where}: an empty list allows nothing and IAM rejects it")
    return tuple(out)
