"""Where a benchmark's report goes: NAME.json (the data) and NAME.md (the table) in --out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def save_report(out: Path | None, name: str, report: Any, text: str) -> None:
    """Write `report` as out/NAME.json and `text` as out/NAME.md (the folder made); nothing without `out`."""
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    (out / f"{name}.md").write_text(text)
