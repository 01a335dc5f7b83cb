"""``advisor diff``: two saved reports compared; exit 1 when the new one regressed. Nothing is run."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.report.compare import ReportDiff, diff_reports, load_report, render_html, render_text
from advisor.report.diff_markdown import render_diff_markdown


@dataclass(kw_only=True)
class DiffOptions:
    old_report: str
    new_report: str
    threshold: float = 0.05
    html_path: str | None = None
    markdown_path: str | None = None  # the diff as Markdown, for a pull request's comment
    fail_on: str | None = None  # a severity: an added finding at or above it fails the gate too
    judge_step: bool = True  # False: the step time is judged by --remeasure instead


@dataclass
class DiffResult:
    diff: ReportDiff
    text: str
    fail_on: str | None = None

    @property
    def failing_findings(self) -> list:
        """Findings the new run added (not borderline, not decided on a contended machine) at or above fail_on."""
        if self.fail_on is None:
            return []
        from advisor.rulekit.rule import Severity

        floor = Severity(self.fail_on).rank
        return [f for f in self.diff.added if f.severity is not None and f.severity.rank >= floor]

    @property
    def exit_code(self) -> int:
        return 1 if self.diff.regressed or self.failing_findings else 0


def run_diff(options: DiffOptions) -> DiffResult:
    """Raises DiffInputError naming the file when a report is missing or is not an advisor report."""
    compared = diff_reports(load_report(options.old_report), load_report(options.new_report), options.threshold,
                            options.judge_step)
    if options.html_path:
        with open(options.html_path, "w", encoding="utf-8") as handle:
            handle.write(render_html(compared))
    if options.markdown_path:
        with open(options.markdown_path, "w", encoding="utf-8") as handle:
            handle.write(render_diff_markdown(compared))
    result = DiffResult(compared, render_text(compared), options.fail_on)
    if failing := result.failing_findings:
        result.text += (f"\nFAIL: {len(failing)} finding(s) added at or above {options.fail_on}: "
                        + ", ".join(f"{f.code} {f.slug}" for f in failing))
    return result
