"""advisor: a PyTorch performance auditor. From Python: ``advisor.audit(model, inputs)``, ``advisor.save(report,
path)``; in Jupyter a Report shows as its HTML report."""

import sys

from advisor.version import __version__

__all__ = ["__version__", "audit", "save"]


def audit(model, inputs, **options):
    """Audit a live model in this process; see advisor.commands.api.audit. Returns the Report."""
    from advisor.commands.api import audit as run

    return run(model, inputs, **options)


def save(report, path: str) -> str:
    """Write ``report`` to ``path``: .html, .json, .md or .sarif, by its suffix. Returns the path."""
    from advisor.report.write import save as write

    return write(report, path)


def notebook_html(report) -> str:
    """The HTML a notebook shows for a Report (registered with IPython's display formatter on import)."""
    from advisor.report.html import render_html

    return render_html(report)


def _show_reports_in_notebooks() -> None:
    """A Report is data (it renders nothing itself): where advisor is imported inside IPython, the shell's HTML
    formatter is told how to show one, by the class's name (nothing is imported for it until a Report is shown)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type_by_name("advisor.report.schema", "Report",
                                                                         notebook_html)


_show_reports_in_notebooks()
