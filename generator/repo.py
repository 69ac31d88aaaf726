"""Finding the GKR repository a command works on."""

from __future__ import annotations

from pathlib import Path

from generator.errors import BadRequest

MARKERS = ("clusters", "platform/catalog")


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` holding clusters/ and platform/catalog/."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if all((folder / marker).is_dir() for marker in MARKERS):
            return folder
    raise BadRequest(f"{here} is not inside a GKR repository (no clusters/ and platform/catalog/); "
                     "run from the repository or pass --root")
