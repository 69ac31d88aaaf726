"""Real text that every machine has, for demos and tests: no download.

`python-stdlib`: the `.py` sources of the running interpreter's standard library
(`sysconfig.get_paths()["stdlib"]`), sorted by path, without its test suites, IDLE and
site-packages. On CPython 3.11.7 that is 674 files, 11.4 MB (measured); another Python
version gives another corpus, and meta.json's hash tells them apart.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Callable
from pathlib import Path

from runtime.errors import ConfigError

_SKIPPED = frozenset({"test", "tests", "idlelib", "site-packages", "dist-packages"})


def python_stdlib() -> list[Path]:
    """The standard library's own sources, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(path for path in root.rglob("*.py")
                  if _SKIPPED.isdisjoint(path.relative_to(root).parts) and path.is_file())


CORPORA: dict[str, Callable[[], list[Path]]] = {"python-stdlib": python_stdlib}


def corpus_files(name: str, max_files: int | None = None, field: str = "prepare_from") -> \
        list[Path]:
    """The files of corpus `name`; `max_files`: only the first ones (a quick subset)."""
    if name not in CORPORA:
        raise ConfigError(field, f"unknown corpus {name!r}; allowed: {', '.join(CORPORA)}")
    return CORPORA[name]()[:max_files]
