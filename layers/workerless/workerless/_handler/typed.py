"""Typed handlers: the pydantic model a handler's input is validated against, read once per
container from its annotation (``def handler(job: Job[ChargeInput])``) or the decorator's ``input=``,
and whether the handler is a coroutine function.

Validation happens before the user code runs: invalid variables are a terminal failure (the same
input always gives the same answer) whose message names each bad field and why, as pydantic says.
A returned model becomes the job's variables (``model_dump(by_alias=True, mode="json")``).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic is imported only by typed handlers: a plain handler's cold start skips it
    from pydantic import BaseModel, ValidationError

__all__ = ["HandlerSpec", "InputValidationError", "describe_validation_error", "spec_of"]


class InputValidationError(ValueError):
    """The job's variables do not fit the handler's input model; the message names each field."""


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """What the wrapper needs to know about a handler function, computed once."""

    input_model: type[BaseModel] | None
    is_async: bool

    def parse(self, variables: Mapping[str, Any]) -> BaseModel | None:
        """The validated input model (None for an untyped handler). Raises InputValidationError."""
        if self.input_model is None:
            return None
        from pydantic import ValidationError

        try:
            return self.input_model.model_validate(dict(variables))
        except ValidationError as exc:
            raise InputValidationError(describe_validation_error(exc, self.input_model)) from exc


def describe_validation_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """``invalid input for ChargeInput: amount: Input should be greater than 0; orderId: Field required``:
    every error pydantic found, field path first (pydantic's own wording; no input values, which may
    hold secrets)."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in error.get("loc", ())) or "(input)"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return f"invalid input for {model.__name__}: " + "; ".join(parts)


def spec_of(fn: Callable[..., Any], input_model: type[BaseModel] | None = None) -> HandlerSpec:
    """The :class:`HandlerSpec` of ``fn``: ``input_model`` when given, else the model its first
    parameter is annotated with (``Job[Model]``). Cached per function: one inspection per container."""
    if input_model is not None:
        from pydantic import BaseModel

        if not (isinstance(input_model, type) and issubclass(input_model, BaseModel)):
            raise TypeError(f"input= must be a pydantic model class, got {input_model!r}")
        return HandlerSpec(input_model, inspect.iscoroutinefunction(fn))
    return _spec_from_annotation(fn)


@functools.cache
def _spec_from_annotation(fn: Callable[..., Any]) -> HandlerSpec:
    return HandlerSpec(_annotated_model(fn), inspect.iscoroutinefunction(fn))


def _annotated_model(fn: Callable[..., Any]) -> type[BaseModel] | None:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if not params:
        return None
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # NameError, TypeError, ...: whatever resolving the annotation raised
        annotation = params[0].annotation
        if isinstance(annotation, str) and "[" in annotation:
            # It asks for a model we cannot see (a class defined inside a function, a typo): running
            # untyped would hand the user code job.input = None, a crash far from the cause.
            raise TypeError(
                f"cannot resolve {fn.__qualname__}'s annotation {annotation!r} ({type(exc).__name__}: {exc}); "
                "define the model at module level or pass input=Model to @job_handler"
            ) from exc
        return None  # an unresolvable annotation of something else: untyped, as before
    hint = hints.get(params[0].name)
    args = typing.get_args(hint)
    if args and isinstance(args[0], type):
        from pydantic import BaseModel

        if issubclass(args[0], BaseModel):
            return args[0]
    return None
