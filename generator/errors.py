"""The small exception hierarchy of GKR; only the CLI turns these into messages and exit codes.

Every error has a `category` (runtime.errors.Category, shared with the runtime's errors), and
the category is the exit code the README documents:
  0 success · 1 invalid input (spec, catalog, flags) · 2 usage error (from the CLI parser)
  3 the committed tree is stale (`gkr render --check`) · 4 a tool or service the command
  needs failed (kubectl, the cluster API) · 5 a check found a fault (preflight, policy)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from runtime.errors import Category


class GkrError(Exception):
    """Base of every error GKR reports to a user. Never raised itself: a subclass says what
    went wrong, and so the exit code."""

    category: ClassVar[Category]

    def __new__(cls, *args: Any, **kwargs: Any) -> GkrError:
        if cls is GkrError:
            raise TypeError("raise a subclass of GkrError: its category decides the exit code")
        return super().__new__(cls, *args, **kwargs)

    @property
    def exit_code(self) -> int:
        return int(self.category)


@dataclass(frozen=True)
class Problem:
    """One mistake in one input, located as precisely as the input allows."""

    file: str
    line: int | None
    field: str
    message: str

    def sort_key(self) -> tuple[str, int, str, str]:
        return (self.file, self.line or 0, self.field, self.message)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class InvalidInput(GkrError):
    """One or more user inputs are wrong; carries every problem found, sorted."""

    category = Category.INVALID_INPUT

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(set(problems), key=Problem.sort_key)
        super().__init__("\n".join(str(p) for p in self.problems))


class BadRequest(GkrError):
    """What the user asked for cannot be done as asked, and no file or line is to blame: a flag
    value, a name that does not exist, a branch already taken. The message says what to do."""

    category = Category.INVALID_INPUT


class StaleTree(GkrError):
    """The committed rendered tree differs from what `gkr render` would write."""

    category = Category.STALE


class ToolFailed(GkrError):
    """An external tool or service (kubectl, the Kubernetes API, Temporal) failed."""

    category = Category.SERVICE


class CheckFailed(GkrError):
    """A check ran and found a fault (preflight, policy, schema of a rendered manifest)."""

    category = Category.CHECK
