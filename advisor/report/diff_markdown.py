"""``advisor diff`` as Markdown, for the pull request's comment a CI job posts: the step, the findings the change
added and resolved (and those in one run only that the gate does not count), readiness and latency."""

from __future__ import annotations

from advisor.report.compare import ReportDiff, change_note
from advisor.report.markdown import SEVERITY_ICONS, escape_cell, place_of, severity_of
from advisor.rulekit.rule import Finding


def render_diff_markdown(diff: ReportDiff) -> str:
    lines = ["## advisor diff", ""]
    lines += [f"> ⚠️ **Unreliable** {escape_cell(run)}" for run in diff.contended]
    step, old, new = diff.step, diff.old, diff.new
    if step is None:
        lines.append("Step time: not comparable (a report has no timing).")
    elif not diff.judge_step:
        lines.append(f"Step time: {old.timing.median_ms:.4g} ms → {new.timing.median_ms:.4g} ms in two separate runs, "
                     "not judged here (the revisions are timed against each other, interleaved).")
    else:
        verdict = "**regression**" if diff.regressed and step.verdict == "slower" else escape_cell(change_note(step))
        lines.append(f"Step time: {old.timing.median_ms:.4g} ms → {new.timing.median_ms:.4g} ms: {verdict} "
                     f"(threshold ±{diff.threshold:.0%})")
    lines.append("")
    for title, findings in (("Added", diff.added), ("Resolved", diff.resolved),
                            ("In one run only, within the noise of its threshold (not counted)", diff.borderline),
                            ("In one run only, the machine's state or decided on a contended machine (not counted)",
                             diff.unreliable)):
        if findings or title in ("Added", "Resolved"):
            lines += [f"### {title}: {len(findings)}", ""] + _table(findings)
    lines.append(f"Unchanged: {len(diff.kept)}" + (f", {len(diff.moved)} with numbers or lines moved" if diff.moved
                                                    else ""))
    if diff.checks:
        lines += ["", "### Readiness checks that changed", "", "| check | old | new |", "|---|---|---|"]
        lines += [f"| {c.id} | {c.old} | {c.new}{' (borderline)' if c.borderline else ''} |" for c in diff.checks]
    if diff.latency:
        lines += ["", "### Latency by batch size", "", "| batch | p50 | p99 |", "|---|---|---|"]
        lines += [f"| {row.batch_size} | " + " | ".join(escape_cell(change_note(c)) if c else "" for c in
                                                      (row.p50, row.p99)) + " |" for row in diff.latency]
    lines += ["", f"<sub>advisor {new.advisor_version} · {old.created} → {new.created}</sub>"]
    return "\n".join(lines) + "\n"


def _table(findings: list[Finding]) -> list[str]:
    if not findings:
        return []
    rows = ["| | code | finding | where |", "|---|---|---|---|"]
    rows += [f"| {SEVERITY_ICONS.get(severity_of(f), '')} {severity_of(f)} | `{f.code}` {f.slug} | {escape_cell(f.message)} | "
             f"{place_of(f)} |" for f in findings]
    return rows + [""]
