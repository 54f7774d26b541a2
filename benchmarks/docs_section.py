"""Shared by the benchmarks: write a JSON report and replace one section of docs/benchmarks.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_report(section_name: str, report: dict, lines: list[str], slug: str | None = None) -> Path:
    """docs/benchmarks/<slug>.json gets the report; the '## <section>' section gets `lines`."""
    slug = slug or re.sub(r"\W+", "_", section_name.lower()).strip("_")
    out_json = ROOT / "docs" / "benchmarks" / f"{slug}.json"
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(report, indent=2, default=str))
    replace_section("\n".join([f"## {section_name}", "", *lines, ""]))
    return out_json


def replace_section(section: str) -> None:
    """Replace the docs/benchmarks.md section with the same '## ' heading (or append it)."""
    name = section.splitlines()[0].removeprefix("## ")
    md = ROOT / "docs" / "benchmarks.md"
    text = md.read_text() if md.exists() else "# Benchmarks\n\n"
    pattern = re.compile(rf"## {re.escape(name)}\n.*?(?=\n## |\Z)", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else \
        text.rstrip("\n") + "\n\n" + section
    md.write_text(text.rstrip("\n") + "\n")
