#!/usr/bin/env python3
"""Write tests/durations.json, the seconds each test module took, from pytest's JUnit reports:
the conftest starts the longest modules first so that no long one trails at the end of a
parallel run. Refresh it after adding a slow module:

    .venv/bin/pytest -n 2 --dist loadfile --junitxml=/tmp/run.xml
    tools/test-durations.py /tmp/run.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def module_seconds(reports: list[str]) -> dict[str, float]:
    """Seconds per module path (tests/x/test_y.py), the mean over the reports given."""
    total: Counter[str] = Counter()
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            total[case.get("classname", "").replace(".", "/") + ".py"] += float(
                case.get("time", 0))
    return {module: round(seconds / len(reports), 1) for module, seconds in sorted(total.items())}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    OUT.write_text(json.dumps(module_seconds(sys.argv[1:]), indent=0) + "\n")
    print(f"wrote {OUT}")
