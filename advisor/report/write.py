"""Write a Report in the chosen formats, named after the model file."""

from __future__ import annotations

import os

from advisor.report.html import render_html
from advisor.report.model import Report

FORMATS = ("html", "json")


def write_reports(report: Report, out_dir: str, stem: str, formats: tuple[str, ...]) -> dict[str, str]:
    """Write ``<out_dir>/<stem>.<format>`` for each format."""
    os.makedirs(out_dir, exist_ok=True)
    written = {}
    for fmt in formats:
        path = os.path.join(out_dir, f"{stem}.{fmt}")
        text = report.model_dump_json(indent=2) if fmt == "json" else render_html(report)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        written[fmt] = path
    return written
