"""Swappable parts of a run, named by config Hydra's way: `{_target_: dotted.path, ...keyword
arguments}` (hydra.utils.instantiate's convention; `model._target_=mylab.MyLM` on the command
line swaps the model). The task, model, tokenizer, optimizer, LR schedule, metric loggers and
the data's datasets, transform and collate are all such sections.

A section's `_target_` is a dotted import path as `hydra.utils.instantiate` reads it
(`runtime.data.synthetic.SyntheticFeatures`: the longest importable module, then
attributes); every other key is a keyword argument. `check_call` binds those arguments to
the target's signature (`inspect.signature(...).bind`) without calling it, so a wrong name
is a ConfigError before any data is read.

Callables (a transform, a collate function) are built once per process (`build_callable`):
a class is instantiated with the keyword arguments and its instance is the callable; a
function is bound to them (`functools.partial`, as Hydra's `_partial_: true`) and called
with the sample (or the list of samples) first.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.errors import ConfigError

# A dotted path of at least two Python identifiers.
TARGET_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$"
TARGET_KEY = "_target_"


class Component(BaseModel):
    """A component section: `_target_` and the keyword arguments of its call."""

    model_config = ConfigDict(extra="allow", frozen=True)

    target: str = Field(
        alias=TARGET_KEY,
        pattern=TARGET_PATTERN,
        description="Dotted import path of the class or function (Hydra's `_target_`).",
    )

    @property
    def kwargs(self) -> dict[str, Any]:
        """The section's keyword arguments: every key but `_target_`."""
        return dict(self.model_extra or {})

    def check(self, field: str, *fixed: Any) -> Any:
        """The target, once its signature accepts the section's keys after the positional
        arguments the caller will pass (`fixed`, stand-ins: the optimizer's parameters)."""
        return check_component(self, field, *fixed)

    def build(self, field: str, *args: Any) -> Any:
        """`target(*args, **kwargs)`, checked first."""
        return instantiate(self, field, *args)


def locate(path: str, field: str) -> Any:
    """The object at dotted `path`; a missing module or attribute is a ConfigError on `field`
    that lists what the nearest module defines."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # this prefix is not a module: try a shorter one
            raise ConfigError(field, f"cannot import {path!r}: {exc}") from exc
        return _attribute(module, parts[cut:], path, field)
    raise ConfigError(field, f"cannot import {path!r}: no module {parts[0]!r}")


def _attribute(module: ModuleType, names: list[str], path: str, field: str) -> Any:
    target: Any = module
    for name in names:
        if not hasattr(target, name):
            defined = ", ".join(_public_callables(module)) or "nothing callable"
            raise ConfigError(field, f"cannot import {path!r}: {module.__name__} has no "
                                     f"{name!r}; it defines {defined}")
        target = getattr(target, name)
    if not callable(target):
        raise ConfigError(field, f"{path!r} is not a class or function")
    return target


def _public_callables(module: ModuleType) -> list[str]:
    return sorted(name for name, value in vars(module).items()
                  if not name.startswith("_") and callable(value)
                  and getattr(value, "__module__", None) == module.__name__)


def check_call(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], field: str) -> None:
    """`target(*args, **kwargs)` binds to its signature; else a ConfigError naming the first
    wrong keyword (`field.name`) or the target (`field._target_`) and the accepted names."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return  # no signature to check against (some builtins): the call will tell
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        accepted = [p.name for p in signature.parameters.values()
                    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        allowed = f"accepted: {', '.join(accepted) or 'no keyword arguments'}"
        unknown = [k for k in kwargs if k not in signature.parameters]
        takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        if unknown and not takes_any:
            raise ConfigError(f"{field}.{unknown[0]}", f"not an argument of "
                                                       f"{_name(target)}; {allowed}") from exc
        raise ConfigError(f"{field}.{TARGET_KEY}", f"{_name(target)}: {exc}; {allowed}") from exc


def _name(target: Any) -> str:
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"


def check_component(component: Component, field: str, *args: Any) -> Any:
    """The located target of `component`, its keyword arguments checked (after `args`)."""
    target = locate(component.target, f"{field}.{TARGET_KEY}")
    check_call(target, args, component.kwargs, field)
    return target


def instantiate(component: Component, field: str, *args: Any) -> Any:
    """`target(*args, **kwargs)`, checked first (hydra.utils.instantiate's call)."""
    return check_component(component, field, *args)(*args, **component.kwargs)


_SAMPLE = object()  # stands for the argument a built callable is called with


def check_callable(component: Component, field: str) -> Any:
    """Check a callable section without building it: a class's keyword arguments, or a
    function's arguments after the sample it is called with."""
    target = locate(component.target, f"{field}.{TARGET_KEY}")
    check_call(target, () if inspect.isclass(target) else (_SAMPLE,), component.kwargs, field)
    return target


def build_callable(component: Component, field: str) -> Callable[..., Any]:
    """A class's instance, or the function bound to its keyword arguments."""
    target = check_callable(component, field)
    if not inspect.isclass(target):
        return functools.partial(target, **component.kwargs) if component.kwargs else target
    built = target(**component.kwargs)
    if not callable(built):
        raise ConfigError(f"{field}.{TARGET_KEY}", f"{component.target} instances are not "
                                                    "callable (they need a __call__ method)")
    return built
