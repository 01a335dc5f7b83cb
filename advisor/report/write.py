"""Write a Report in the chosen formats, named after the model file."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from advisor.report.schema import Report

FORMATS = ("html", "json", "md", "sarif")


def render(fmt: str, report: Report) -> str:
    """Each renderer imported when its format is asked for (the HTML one brings jinja2)."""
    if fmt == "html":
        from advisor.report.html import render_html

        return render_html(report)
    if fmt == "md":
        from advisor.report.markdown import render_markdown

        return render_markdown(report)
    if fmt == "sarif":
        from advisor.report.sarif import render_sarif

        return render_sarif(report)
    return report.model_dump_json(indent=2)


def save(report: Report, path: str) -> str:
    """Write the report to ``path``; the format follows the suffix: .html, .json, .md or .sarif."""
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    if suffix not in FORMATS:
        raise ValueError(f"{path}: unknown report format {suffix!r}; use .html, .json, .md or .sarif")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(render(suffix, report))
    return path


STDOUT = "-"  # --out -: the one format asked for, printed for a pipe


def write_reports(report: Report, out_dir: str, stem: str, formats: tuple[str, ...]) -> dict[str, str]:
    """Write ``<out_dir>/<stem>.<format>`` for each format; with ``out_dir`` ``-``, the one format to stdout."""
    if out_dir == STDOUT:
        if len(formats) != 1:
            raise ValueError(f"--out - prints one format, not {','.join(formats)}: pick one with --format")
        sys.stdout.write(render(formats[0], report) + "\n")
        sys.stdout.flush()
        return {formats[0]: STDOUT}
    os.makedirs(out_dir, exist_ok=True)
    written = {}
    for fmt in formats:
        path = os.path.join(out_dir, f"{stem}.{fmt}")
        text = render(fmt, report)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        written[fmt] = path
    return written
