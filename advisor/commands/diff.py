"""``advisor diff``: two saved reports compared; exit 1 when the new one regressed. Nothing is run."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.report.compare import ReportDiff, diff_reports, load_report, render_html, render_text


@dataclass(kw_only=True)
class DiffOptions:
    old_report: str
    new_report: str
    threshold: float = 0.05
    html_path: str | None = None


@dataclass
class DiffResult:
    diff: ReportDiff
    text: str

    @property
    def exit_code(self) -> int:
        return 1 if self.diff.regressed else 0


def run_diff(options: DiffOptions) -> DiffResult:
    """Raises DiffInputError naming the file when a report is missing or is not an advisor report."""
    compared = diff_reports(load_report(options.old_report), load_report(options.new_report), options.threshold)
    if options.html_path:
        with open(options.html_path, "w", encoding="utf-8") as handle:
            handle.write(render_html(compared))
    return DiffResult(compared, render_text(compared))
