"""The schema's migration files (runtime/telemetry/schema): read by the store, which applies
them, and by the cluster form of each (runtime.telemetry.cluster_schema)."""

from __future__ import annotations

import re
from importlib import resources

_MIGRATION = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def migrations() -> list[tuple[int, str, str]]:
    """The schema files as (version, name, SQL), in version order."""
    folder = resources.files("runtime.telemetry") / "schema"
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def statements(sql: str) -> list[str]:
    """The statements of a schema file: `--` comments dropped, split at `;` ending a line."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in re.split(r";\s*$", "\n".join(lines), flags=re.M) if s.strip()]
