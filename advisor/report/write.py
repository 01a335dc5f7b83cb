"""Write a Report in the chosen formats, named after the model file."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from advisor.report.html import render_html
from advisor.report.markdown import render_markdown
from advisor.report.sarif import render_sarif

if TYPE_CHECKING:
    from advisor.report.model import Report

FORMATS = ("html", "json", "md", "sarif")
RENDERERS = {
    "html": render_html,
    "json": lambda report: report.model_dump_json(indent=2),
    "md": render_markdown,
    "sarif": render_sarif,
}


def write_reports(report: Report, out_dir: str, stem: str, formats: tuple[str, ...]) -> dict[str, str]:
    """Write ``<out_dir>/<stem>.<format>`` for each format."""
    os.makedirs(out_dir, exist_ok=True)
    written = {}
    for fmt in formats:
        path = os.path.join(out_dir, f"{stem}.{fmt}")
        text = RENDERERS[fmt](report)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        written[fmt] = path
    return written
