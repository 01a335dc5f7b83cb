"""What ``advisor fix`` hands over: the patch (``<stem>.patch``), the report with each finding's edit
(``<stem>.fix.json``, ``<stem>.fix.html``), and a terminal summary: the diff on stdout, one line per edit
on stderr."""

from __future__ import annotations

import os

import click

from advisor.report.schema import Report
from advisor.report.write import write_reports


def write_patch(report: Report, patch: str, out_dir: str, stem: str) -> dict[str, str]:
    """``<stem>.patch`` where an edit was made (no empty file where none was), and the report with each finding's
    edit as ``<stem>.fix.json`` and ``.fix.html``."""
    written = write_reports(report, out_dir, f"{stem}.fix", ("json", "html"))
    path = os.path.join(out_dir, f"{stem}.patch")
    if patch:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(patch)
        written["patch"] = path
    elif os.path.exists(path):
        os.remove(path)  # an earlier run's patch is not this run's
    return written


def edit_line(finding) -> str:
    """One line per finding with an edit: what became of it and why."""
    edit = finding.edit
    where = f" at {os.path.basename(edit.file)}:{edit.lines[0]}" if edit.file else ""
    line = f"{finding.slug}: {edit.status}{where}"
    measured = edit.verification
    if measured is not None:
        line += f"; patched source {measured.status}"
        if measured.speedup is not None:
            line += f" {measured.speedup:.2f}x [{measured.ci_low:.2f}-{measured.ci_high:.2f}]"
        elif measured.note:
            line += f" ({measured.note})"
    if edit.cleared is not None:
        line += ", finding cleared" if edit.cleared else ", finding NOT cleared by the edit"
    if edit.reason:
        line += f" ({edit.reason})"
    return line


def print_patch(report: Report, patch: str, written: dict[str, str]) -> None:
    if patch:
        click.echo(patch, nl=False)
    lines = [edit_line(f) for f in report.findings if f.edit is not None]
    lines += [f"{f.slug}: not patched (no edit was planned for it)" for f in report.findings if f.edit is None]
    for line in lines or ["no finding to patch"]:
        click.echo(f"[advisor] {line}", err=True)
    if not patch:
        click.echo("[advisor] no edit was made, so no patch was written", err=True)
    whole = report.verification.combined
    if whole is not None:
        measured = (f" {whole.speedup:.2f}x [{whole.ci_low:.2f}-{whole.ci_high:.2f}]" if whole.speedup is not None
                    else f" ({whole.note})")
        click.echo(f"[advisor] the whole patch: patched source {whole.status}{measured}", err=True)
    if written:
        where = f"patch: {written['patch']}; " if "patch" in written else ""
        click.echo(f"[advisor] {where}report: {written['html']} and {written['json']}", err=True)
    if written.get("applied"):
        click.echo(f"[advisor] applied to {written['applied']} (each original kept as <file>.advisor-orig)", err=True)
