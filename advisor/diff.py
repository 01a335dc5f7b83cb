"""Compare two audit reports: step time change, findings added and resolved — a CI gate."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from jinja2 import Environment, select_autoescape

from advisor.report.model import Report
from advisor.rule import Finding


class DiffInputError(ValueError):
    """A report file is missing or is not an advisor JSON report."""


@dataclass
class ReportDiff:
    old: Report
    new: Report
    threshold: float
    added: list[Finding] = field(default_factory=list)
    resolved: list[Finding] = field(default_factory=list)
    kept: list[tuple[Finding, Finding]] = field(default_factory=list)

    @property
    def step_change(self) -> float | None:
        """Relative change of the median step time (+0.10: 10% slower)."""
        if self.old.timing is None or self.new.timing is None or self.old.timing.median_ms <= 0:
            return None
        return self.new.timing.median_ms / self.old.timing.median_ms - 1

    @property
    def regressed(self) -> bool:
        change = self.step_change
        return change is not None and change > self.threshold


def load_report(path: str) -> Report:
    if not os.path.isfile(path):
        raise DiffInputError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as handle:
            return Report.model_validate_json(handle.read())
    except ValueError as bad:
        first = str(bad).strip().splitlines()[0] if str(bad).strip() else type(bad).__name__
        raise DiffInputError(f"{path}: not an advisor JSON report ({first})") from None


def _key(finding: Finding) -> tuple:
    place = finding.locations[0] if finding.locations else None
    where = (os.path.basename(place.file), place.line, place.function) if place else ()
    return (finding.slug, where)


def diff_reports(old: Report, new: Report, threshold: float = 0.05) -> ReportDiff:
    result = ReportDiff(old=old, new=new, threshold=threshold)
    old_by_key = {_key(f): f for f in old.findings}
    new_by_key = {_key(f): f for f in new.findings}
    result.added = [f for k, f in new_by_key.items() if k not in old_by_key]
    result.resolved = [f for k, f in old_by_key.items() if k not in new_by_key]
    result.kept = [(old_by_key[k], f) for k, f in new_by_key.items() if k in old_by_key]
    return result


def render_text(diff: ReportDiff) -> str:
    lines = []
    change = diff.step_change
    if change is None:
        lines.append("step time: not comparable (a report has no timing)")
    else:
        verdict = "REGRESSION" if diff.regressed else ("faster" if change < 0 else "within threshold")
        lines.append(f"step time: {diff.old.timing.median_ms:.4g} ms -> {diff.new.timing.median_ms:.4g} ms "
                     f"({change:+.1%}; threshold +{diff.threshold:.0%}): {verdict}")
    for title, findings in (("added", diff.added), ("resolved", diff.resolved)):
        lines.append(f"{title}: {len(findings)}")
        lines += [f"  {f.code} {f.slug}: {f.message}" for f in findings]
    lines.append(f"unchanged: {len(diff.kept)}")
    for label, report in (("old", diff.old), ("new", diff.new)):
        combined = report.verification.combined
        if combined is not None and combined.speedup is not None:
            lines.append(f"{label}: all verified fixes together {combined.speedup:.2f}x "
                         f"[{combined.ci_low:.2f}–{combined.ci_high:.2f}]")
    return "\n".join(lines)


_HTML = Environment(autoescape=select_autoescape(default=True, default_for_string=True)).from_string("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>advisor diff</title>
<style>body{font:15px/1.5 sans-serif;max-width:960px;margin:24px auto;color:#1d2330}
.bad{color:#c62828;font-weight:700}.good{color:#2e7d32;font-weight:700}td,th{padding:4px 8px;text-align:left;
border-bottom:1px solid #dde2ea}table{border-collapse:collapse;width:100%}</style></head><body>
<h1>advisor diff</h1>
<p>{{ old.target.model_class }} ({{ old.created }}) → {{ new.target.model_class }} ({{ new.created }})</p>
{% if change is not none %}<p>Step time {{ "%.4g"|format(old.timing.median_ms) }} ms → {{ "%.4g"|format(new.timing.median_ms) }} ms:
<span class="{{ 'bad' if regressed else 'good' }}">{{ "%+.1f"|format(change * 100) }}%</span>
(threshold +{{ "%.0f"|format(threshold * 100) }}%)</p>{% else %}<p>Step time not comparable.</p>{% endif %}
{% for title, items in [("Added", added), ("Resolved", resolved)] %}<h2>{{ title }} ({{ items|length }})</h2>
<table>{% for f in items %}<tr><td>{{ f.code }}</td><td>{{ f.slug }}</td><td>{{ f.message }}</td></tr>{% endfor %}</table>
{% endfor %}<p>Unchanged: {{ kept|length }}</p></body></html>
""")


def render_html(diff: ReportDiff) -> str:
    return _HTML.render(old=diff.old, new=diff.new, change=diff.step_change, regressed=diff.regressed,
                        threshold=diff.threshold, added=diff.added, resolved=diff.resolved, kept=diff.kept)
