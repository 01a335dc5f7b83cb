"""The short summary printed after an audit, and failures as one paragraph each."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from advisor.report.paths import short_path
from advisor.rulekit.rule import Verification
from advisor.stats import run_noise_said, settling_note

if TYPE_CHECKING:
    from advisor.report.schema import FilesRecord, Report

_COLOURS = {"high": "red", "medium": "yellow", "low": "cyan", "info": "white"}


def print_problems(report: Report, model_file: str, debug: bool = False) -> None:
    for error in report.errors:
        click.echo(f"advisor: {error.paragraph(model_file)}", err=True)
        if debug and error.detail:
            click.echo(error.detail, err=True)
    for problem in report.rule_problems:
        click.echo(f"advisor: rule {problem.source} {problem.message}", err=True)


def print_summary(report: Report, written: dict[str, str]) -> None:
    target = report.target
    line = f"{target.model_class or target.model_file} · {target.mode} · {target.device}"
    if report.timing is not None:
        t = report.timing
        said = "".join(f"; {text}" for text in (run_noise_said(t), settling_note(t)) if text)
        line += f" · step {t.median_ms:.3f} ms (IQR {t.p25_ms:.3f}–{t.p75_ms:.3f}, n={len(t.samples_ms)}{said})"
    click.echo(line)
    if report.quality.state != "unknown":
        contended = report.quality.state in ("contended", "inconsistent")
        click.echo(click.style(f"Machine: {report.quality.summary}", fg="yellow" if contended else None))
    for contended_fix in report.quality.verifications:
        click.echo(click.style(f"Machine: measured under contention: {contended_fix}", fg="yellow"))
    if report.configuration.file:
        off = ", ".join(report.configuration.turned_off) or "no rule"
        click.echo(f"Configuration: {short_path(report.configuration.file)} [tool.advisor] ({off} turned off)")
    if report.readiness is not None:
        print_readiness(report)
    elif not report.findings:
        click.echo("No findings.")
    for left in report.unused_noqa:
        click.echo(f"  INFO   # noqa: {', '.join(left.names)} at {short_path(left.file)}:{left.line} suppressed "
                   "nothing in this run (remove it, or it hides the next finding there)")
    if report.suppressed:
        click.echo(f"Suppressed ({len(report.suppressed)}, kept in the JSON report): " + "; ".join(
            f"{s.finding.slug} by {s.by}" for s in report.suppressed[:5]))
    for finding in report.findings:
        severity = finding.severity.value if finding.severity else "info"
        tag = click.style(f"{severity.upper():<6}", fg=_COLOURS.get(severity))
        click.echo(f"  {tag} {finding.code} {finding.slug}: {finding.message}")
        for location in finding.locations[:3]:
            place = f"at {short_path(location.file)}:{location.line}" if location.file else location.label()
            click.echo(f"         {place}  {location.code}".rstrip())
        if finding.verification is not None:
            click.echo(f"         fix: {describe_verification(finding.verification)}")
        if finding.demoted:
            click.echo(f"         demoted to info: {finding.demoted}")
        if finding.unreliable:
            click.echo(f"         unreliable here: {finding.unreliable}")
    combined = report.verification.combined
    if combined is not None and combined.speedup is not None:
        click.echo(f"All verified fixes together: {combined.speedup:.2f}x [{combined.ci_low:.2f}–{combined.ci_high:.2f}]")
    elif report.verification.note:
        click.echo(f"Verification: {report.verification.note}")
    if report.verification.apart:
        click.echo(f"Verified apart, not in the together: {', '.join(report.verification.apart)}")
    if report.files is not None:
        print_files(report.files)
    for fmt, path in written.items():
        click.echo(f"{fmt.upper()} report: {path}")


def print_files(files: FilesRecord) -> None:
    """What advisor's runs did to the user's files, in a line or two (the report has the whole list)."""
    if files.written:
        shown = ", ".join(f"{c.path} ({c.change}{', ' + _size(c.size) if c.size is not None else ''})"
                          for c in files.written[:4])
        more = f" and {len(files.written) - 4} more" if len(files.written) > 4 else ""
        click.echo(f"Your files: the audited run wrote {shown}{more}; {files.stopped}")
    if files.experiment_runs:
        verdict = ("none of your files changed" if not files.changed else
                   click.style(f"CHANGED while they ran: {', '.join(files.changed)}", fg="red"))
        click.echo(f"Your files: {len(files.experiment_runs)} experiment run(s) wrote only into advisor's shadow, "
                   f"thrown away; {verdict} ({files.checked} path(s) checked)")
    for line in files.not_kept + files.unrouted:
        click.echo(f"Your files: {line}")


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size} bytes"


_STATUS_COLOURS = {"pass": "green", "warn": "yellow", "fail": "red", "skipped": "white"}


def print_readiness(report: Report) -> None:
    readiness = report.readiness
    if report.roofs is not None:
        click.echo(f"Roofs: {report.roofs.provenance()}")
    for check in readiness.checks:
        tag = click.style(f"{check.status.upper():<7}", fg=_STATUS_COLOURS[check.status])
        click.echo(f"  {tag} {check.id}: {check.message}")
        for location in check.locations[:3]:
            click.echo(f"          at {short_path(location.file)}:{location.line}  {location.code}".rstrip())
    for row in readiness.latency:
        if row.error:
            click.echo(f"  batch {row.batch_size:>5}: fails ({row.error})")
            continue
        memory = f", peak {row.peak_memory_mb:.4g} MB" if row.peak_memory_mb is not None else ""
        click.echo(f"  batch {row.batch_size:>5}: p50 {row.p50_ms:.3g} ms, p90 {row.p90_ms:.3g} ms, p99 {row.p99_ms:.3g} ms "
                   f"(n={row.samples}), {row.throughput_per_s:.4g} items/s{memory}")
    if readiness.recommended_batch_size is not None:
        click.echo(f"Recommended batch size: {readiness.recommended_batch_size} (largest whose p99 meets "
                   f"{readiness.latency_budget_ms:g} ms)")


def describe_verification(v: Verification) -> str:
    if v.memory is not None:
        return f"{v.status} for memory: {v.memory.peaks_line()}, n={v.samples}"
    if v.speedup is not None:
        text = f"{v.status} {v.speedup:.2f}x [{v.ci_low:.2f}–{v.ci_high:.2f}], n={v.samples}"
        if v.compile_s is not None:
            text += f", compile {v.compile_s:.1f} s"
        return text + (", its source patch" if v.source_patch else "")
    return f"{v.status}: {v.note}"
