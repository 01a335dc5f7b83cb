"""advisor: a PyTorch performance auditor. From Python: ``advisor.audit(model, inputs)``, ``advisor.analyze(trace)``,
``advisor.diff(old, new)``, ``advisor.save(report, path)``; in Jupyter a Report and a diff show as their HTML."""

import os
import sys

from advisor.version import __version__

__all__ = ["__version__", "analyze", "audit", "diff", "save"]


def audit(model, inputs, **options):
    """Audit a live model in this process; see advisor.commands.api.audit. Returns the Report."""
    from advisor.commands.api import audit as run

    return run(model, inputs, **options)


def analyze(*paths, rules=(), settings=(), disable=()):
    """Audit recorded Kineto traces (``.json``/``.json.gz`` files, or a folder of per-rank traces) in this process, as
    ``advisor analyze`` does. Returns the Report; a trace that cannot be read is in its ``errors``."""
    from advisor.commands.analyze import AnalyzeOptions, run_analyze

    options = AnalyzeOptions(paths=tuple(os.fspath(p) for p in paths), rule_dirs=tuple(rules),
                             settings=tuple(settings), disabled=tuple(disable))
    return run_analyze(options).report


def diff(old, new, threshold: float = 0.05):
    """Two reports compared, as ``advisor diff`` does: each a Report or the path of a saved JSON report. Returns the
    ReportDiff (``regressed``, ``added``, ``resolved``, the step's change)."""
    from advisor.report.compare import diff_reports, load_report

    def report_of(value):
        return load_report(os.fspath(value)) if isinstance(value, (str, os.PathLike)) else value
    return diff_reports(report_of(old), report_of(new), threshold)


def save(report, path: str) -> str:
    """Write ``report`` to ``path``: .html, .json, .md or .sarif, by its suffix. Returns the path."""
    from advisor.report.write import save as write

    return write(report, path)


def notebook_html(report) -> str:
    """The HTML a notebook shows for a Report or a ReportDiff (registered with IPython's display formatter on
    import)."""
    from advisor.report.compare import ReportDiff
    from advisor.report.compare import render_html as render_diff
    from advisor.report.html import render_html

    return render_diff(report) if isinstance(report, ReportDiff) else render_html(report)


def _show_reports_in_notebooks() -> None:
    """A Report is data (it renders nothing itself): where advisor is imported inside IPython, the shell's HTML
    formatter is told how to show one, by the class's name (nothing is imported for it until a Report is shown)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is not None:
        formatter = shell.display_formatter.formatters["text/html"]
        formatter.for_type_by_name("advisor.report.schema", "Report", notebook_html)
        formatter.for_type_by_name("advisor.report.compare", "ReportDiff", notebook_html)


_show_reports_in_notebooks()
