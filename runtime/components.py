"""Swappable parts of a run, by Hydra's instantiate convention: a config section names a
class or function by its dotted import path in `_target_`, and its other keys are that
target's keyword arguments (hydra.utils.instantiate's contract; `model._target_=mylab.MyLM`
on the command line swaps the model).

A section is checked before any rank starts: the target imports, and its signature accepts
the keys and the arguments the driver passes (`fixed`). A wrong one is a ConfigError naming
the field and what is allowed. Building goes through Hydra's own `instantiate`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from pydantic import BaseModel, ConfigDict, Field

from runtime.errors import ConfigError

TARGET = "_target_"


class Component(BaseModel):
    """`_target_` plus the keyword arguments it is called with."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    target: str = Field(
        alias=TARGET, pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$",
        description="Dotted import path of the class or function (Hydra's `_target_`).",
    )

    @property
    def kwargs(self) -> dict[str, Any]:
        """The section's other keys."""
        return dict(self.model_extra or {})

    def resolve(self, field: str) -> Callable[..., Any]:
        """The target itself; an unknown one is a ConfigError on `<field>._target_`."""
        try:
            found = get_object(self.target)
        except Exception as error:  # Hydra raises ImportError or its own wrapper
            raise ConfigError(f"{field}.{TARGET}", f"cannot import {self.target!r} "
                              f"({_first_line(error)}); the working directory is importable, "
                              "so a class of your own is `module.Class` there") from error
        if not callable(found):
            raise ConfigError(f"{field}.{TARGET}", f"{self.target!r} is not a class or "
                              "function")
        return found

    def check(self, field: str, *fixed: str) -> Callable[..., Any]:
        """The target, once its signature accepts `fixed` (the positional arguments the
        driver passes, by name) and the section's keys."""
        target = self.resolve(field)
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):  # builtins without a signature: nothing to check
            return target
        try:
            signature.bind(*fixed, **self.kwargs)
        except TypeError as error:
            accepted = [name for name in signature.parameters if name not in fixed
                        and signature.parameters[name].kind not in (
                            inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
            raise ConfigError(field, f"{self.target} does not take these arguments ({error});"
                              f" it accepts: {', '.join(accepted) or 'none'}") from error
        return target

    def build(self, field: str, *args: Any, **extra: Any) -> Any:
        """Call the target with `args`, the section's keys and `extra` (Hydra instantiate)."""
        self.resolve(field)
        try:
            return instantiate({TARGET: self.target, **self.kwargs, **extra}, *args,
                               _convert_="all")
        except InstantiationException as error:
            cause = error.__cause__ or error
            raise ConfigError(field, f"{self.target} failed to build: "
                              f"{type(cause).__name__}: {_first_line(cause)}") from error


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
