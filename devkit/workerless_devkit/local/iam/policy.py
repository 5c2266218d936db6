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
- ``Condition`` blocks are evaluated on the condition keys the request context carries
  (:data:`MODELLED_KEYS`: ``dynamodb:LeadingKeys``, which :mod:`~workerless_devkit.local.iam.calls`
  works out from a DynamoDB item call, and ``s3:prefix``, a listing's ``Prefix``) with the string
  operators (``StringEquals``, ``StringNotEquals``, ``StringLike``, ``StringNotLike``, their
  ``IgnoreCase`` kin where IAM has them), ``Null``, the ``...IfExists`` suffix and the set
  operators ``ForAllValues:`` (true when every value of the request's key matches; true too when
  the request has no such key: a Scan has no leading key) and ``ForAnyValue:`` (false then). Keys
  in a block AND, a key's values OR, as IAM documents. A condition local mode cannot evaluate
  (another key, another operator, a policy variable) is unknown: a statement it guards never allows
  and always denies (local mode must be at least as strict as AWS).

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


#: A request's condition-key values, by lower-case key name (IAM compares key names case-insensitively).
Context = Mapping[str, tuple[str, ...]]

#: The condition keys local mode puts in a request's context (when the call is one that carries them):
#: a condition on any other key is unknown.
MODELLED_KEYS = frozenset({"dynamodb:leadingkeys", "s3:prefix"})

#: String operators: (negated, wildcards, case-insensitive) by name.
_STRING_OPERATORS = {
    "StringEquals": (False, False, False),
    "StringNotEquals": (True, False, False),
    "StringEqualsIgnoreCase": (False, False, True),
    "StringNotEqualsIgnoreCase": (True, False, True),
    "StringLike": (False, True, False),
    "StringNotLike": (True, True, False),
}


@dataclass(frozen=True, slots=True)
class Condition:
    """One test of a statement's ``Condition`` block: ``[set operator:]operator[IfExists]`` on one key.

    Evaluated as IAM documents it ("Condition operators", "Single-valued vs. multivalued context
    keys"): the policy's values are ORed; a negated operator (``StringNotEquals``, ...) holds when the
    request's value matches none of them, and holds when the key is absent; a positive one fails
    then; ``IfExists`` makes an absent key hold; ``ForAllValues:`` holds when every value of the
    request's key satisfies the operator, and when the key is absent or empty; ``ForAnyValue:`` when
    at least one does (never for an absent key). Without a set operator, a key with several values
    in the request is not evaluated (IAM advises against it; unknown here).
    """

    operator: str
    key: str
    values: tuple[str, ...]
    qualifier: str = ""  # "", "ForAllValues" or "ForAnyValue"
    if_exists: bool = False

    @classmethod
    def parse(cls, text: str, key: str, values: tuple[str, ...]) -> Condition:
        qualifier, _, operator = text.rpartition(":")
        if_exists = operator.endswith("IfExists")
        if if_exists:
            operator = operator.removesuffix("IfExists")
        return cls(operator=operator, key=key, values=values, qualifier=qualifier, if_exists=if_exists)

    def holds(self, context: Context | None) -> bool | None:
        """True or False for the request's ``context``; None when local mode cannot tell."""
        name = self.key.lower()
        if name not in MODELLED_KEYS or context is None or self.qualifier not in ("", "ForAllValues", "ForAnyValue"):
            return None
        if any("${" in value for value in self.values):
            return None  # a policy variable: not modelled
        present = context.get(name)
        found = tuple(present) if present is not None else ()
        if self.operator == "Null":
            if self.qualifier or self.if_exists or not self.values:
                return None
            wanted = {v.lower() for v in self.values}
            return any((w == "true") == (not found) for w in wanted if w in ("true", "false"))
        if self.operator not in _STRING_OPERATORS:
            return None
        if self.qualifier == "ForAllValues":
            return all(self._one(value) for value in found)
        if self.qualifier == "ForAnyValue":
            return (self.if_exists and not found) or any(self._one(value) for value in found)
        if not found:
            return self.if_exists or _STRING_OPERATORS[self.operator][0]
        if len(found) > 1:
            return None
        return self._one(found[0])

    def _one(self, value: str) -> bool:
        negated, wildcards, fold = _STRING_OPERATORS[self.operator]
        if wildcards:
            matched = any(_string_like(pattern).fullmatch(value) is not None for pattern in self.values)
        elif fold:
            matched = any(pattern.casefold() == value.casefold() for pattern in self.values)
        else:
            matched = value in self.values
        return not matched if negated else matched


@functools.lru_cache(maxsize=1024)
def _string_like(pattern: str) -> re.Pattern[str]:
    """StringLike's match: ``*`` any run of characters, ``?`` exactly one, case-sensitive."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.DOTALL)


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
    #: The statement's ``Condition`` block, each test apart (empty: unconditional).
    conditions: tuple[Condition, ...] = ()

    def condition_holds(self, context: Context | None) -> bool | None:
        """Whether every condition holds for a request with ``context``: None when one cannot be
        evaluated (its key is not modelled, or its operator is not)."""
        known = True
        for condition in self.conditions:
            holds = condition.holds(context)
            if holds is False:
                return False
            if holds is None:
                known = False
        return True if known else None

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


def evaluate(
    statements: Iterable[Statement], action: str, resource: str | None, context: Context | None = None
) -> Decision:
    """Whether ``statements`` allow ``action`` on ``resource`` (explicit deny > allow > implicit deny).

    ``resource`` None compares actions only (a call whose resource local mode does not model).
    ``context``: the request's values of the condition keys local mode models, by lower-case key
    name (a key it models and the request lacks is absent; see :class:`Condition`).
    """
    allowing: Statement | None = None
    for statement in statements:
        if not statement.applies(action, resource):
            continue
        holds = statement.condition_holds(context) if statement.conditional else True
        if statement.effect == "Deny":
            if holds is False:
                continue
            # A Deny with a Condition we cannot evaluate is taken to apply: stricter than AWS at worst.
            return Decision(allowed=False, explicit_deny=True, statement=statement)
        if allowing is None and holds is True:
            # An Allow whose Condition is not known to hold does not allow.
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
                conditions=_conditions(item.get("Condition"), where),
            )
        )
    return tuple(statements)


def _conditions(block: Any, where: str) -> tuple[Condition, ...]:
    if not block:
        return ()
    if not isinstance(block, Mapping):
        raise PolicyError(f"{where}.Condition: expected a mapping of operators, got {type(block).__name__}")
    out: list[Condition] = []
    for operator, tests in block.items():
        if not isinstance(tests, Mapping) or not tests:
            raise PolicyError(f"{where}.Condition.{operator}: expected a mapping of condition keys to values")
        for key, values in tests.items():
            out.append(
                Condition.parse(
                    str(operator), str(key), _condition_values(values, f"{where}.Condition.{operator}.{key}")
                )
            )
    return tuple(out)


def _pair(item: Mapping[str, Any], key: str, not_key: str, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    has, has_not = key in item, not_key in item
    if has == has_not:
        raise PolicyError(f"{where}: a statement needs exactly one of {key} or {not_key}")
    value = item[key] if has else item[not_key]
    values = _strings(value, f"{where}.{key if has else not_key}")
    return (values, ()) if has else ((), values)


def _condition_values(value: Any, where: str) -> tuple[str, ...]:
    """A condition's values as IAM compares them: strings (JSON booleans and numbers as their text)."""
    items: Sequence[Any] = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, bool):
            out.append("true" if item else "false")
        elif isinstance(item, (str, int, float)):
            out.append(str(item))
        else:
            raise PolicyError(f"{where}: expected a string (intrinsics resolved), got {item!r}")
    if not out:
        raise PolicyError(f"{where}: a condition needs at least one value")
    return tuple(out)


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
