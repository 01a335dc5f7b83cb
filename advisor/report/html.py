"""The HTML report: one self-contained file, autoescaped, no network."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jinja2 import Environment, PackageLoader, select_autoescape

from advisor.report.paths import short_path
from advisor.stats import settling_note

if TYPE_CHECKING:
    from advisor.report.schema import Report

_ENV = Environment(
    loader=PackageLoader("advisor.report", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _number(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"


_ENV.filters["short_path"] = short_path
_ENV.filters["num"] = _number
_ENV.filters["settling"] = settling_note
_ENV.filters["pct"] = lambda v: "–" if v is None else f"{100 * v:.1f}%"
_ENV.filters["mb"] = lambda v: "–" if v is None else f"{v / 2**20:,.3g} MB" if abs(v) < 1000 * 2**20 else f"{v / 2**30:,.3g} GB"


def render_html(report: Report) -> str:
    if report.readiness is not None:
        from advisor.report.latency_chart import latency_chart

        return _ENV.get_template("ready.html.j2").render(report=report, chart=latency_chart(report.readiness))
    from advisor.report.roofline_chart import roofline_chart

    chart = roofline_chart(report.roofline) if report.roofline is not None else None
    return _ENV.get_template("report.html.j2").render(report=report, roofline_chart=chart)
