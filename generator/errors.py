"""The small exception hierarchy of GKR; only the CLI turns these into messages and exit codes.

Exit codes (documented in the README):
  0 success · 1 invalid input (spec, catalog, flags) · 2 usage error (from the CLI parser)
  3 the committed tree is stale (`gkr render --check`) · 4 a tool or service the command
  needs failed (kubectl, the cluster API) · 5 a check found a fault (preflight, policy)
"""

from __future__ import annotations

from dataclasses import dataclass


class GkrError(Exception):
    """Base of every error GKR reports to a user."""

    exit_code = 1


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

    exit_code = 1

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(set(problems), key=Problem.sort_key)
        super().__init__("\n".join(str(p) for p in self.problems))


class StaleTree(GkrError):
    """The committed rendered tree differs from what `gkr render` would write."""

    exit_code = 3


class ToolFailed(GkrError):
    """An external tool or service (kubectl, the Kubernetes API, Temporal) failed."""

    exit_code = 4


class CheckFailed(GkrError):
    """A check ran and found a fault (preflight, policy, schema of a rendered manifest)."""

    exit_code = 5
