"""The report as Markdown, for a pull-request comment: summary, findings table, details."""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.report.paths import short_path
from advisor.rulekit.rule import Finding, Verification
from advisor.stats import run_noise_said, settling_note

if TYPE_CHECKING:
    from advisor.report.schema import Report

SEVERITY_ICONS = {"high": "🔴", "medium": "🟠", "low": "🔵", "info": "⚪"}


def render_markdown(report: Report) -> str:
    if report.readiness is not None:
        return _readiness(report)
    target = report.target
    lines = [f"## advisor: {escape_cell(target.model_class or 'model')} ({target.mode}, {target.device})", ""]
    summary = []
    if report.timing is not None:
        t = report.timing
        said = "".join(f"; {text}" for text in (run_noise_said(t), settling_note(t)) if text)
        summary.append(f"step **{t.median_ms:.3g} ms** (IQR {t.p25_ms:.3g}–{t.p75_ms:.3g}, n={len(t.samples_ms)}{said})")
    summary.append(f"**{len(report.findings)}** finding(s)")
    combined = report.verification.combined
    if combined is not None and combined.speedup is not None:
        summary.append(f"all verified fixes together **{combined.speedup:.2f}×** [{combined.ci_low:.2f}–{combined.ci_high:.2f}]")
    lines += [" · ".join(summary), ""]
    if report.quality.state in ("contended", "inconsistent"):
        lines += [f"> ⚠️ **Machine**: {escape_cell(report.quality.summary)}", ""]
    elif report.quality.state == "quiet":
        lines += [f"Machine: {escape_cell(report.quality.summary)}", ""]
    for contended_fix in report.quality.verifications:
        lines += [f"> ⚠️ measured under contention: {escape_cell(contended_fix)}", ""]
    for error in report.errors:
        lines.append(f"> ⚠️ **{error.stage}** ({error.kind}): {escape_cell(error.message)}")
    if report.errors:
        lines.append("")
    if report.findings:
        lines += ["| | code | finding | where | fix |", "|---|---|---|---|---|"]
        for finding in report.findings:
            lines.append(f"| {SEVERITY_ICONS.get(severity_of(finding), '')} {severity_of(finding)} | `{finding.code}` {finding.slug} | "
                         f"{escape_cell(finding.message)} | {place_of(finding)} | {_verdict(finding.verification)} |")
        lines.append("")
        for finding in report.findings:
            lines += _details(finding)
    else:
        lines.append("No findings.")
    if report.ranks:
        lines += ["", "| rank | step ms | data wait ms | communication ms | outside communication ms |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r.rank} | {r.step_ms:.4g} | {r.data_wait_ms:.3g} | {_ms(r.comm_ms)} | {_ms(r.compute_ms)} |"
                  for r in report.ranks]
        lines.append("")
    lines += _roofline(report) + _memory(report)
    lines += _files(report)
    lines.append(f"<sub>advisor {report.advisor_version} · {report.created}</sub>")
    return "\n".join(lines) + "\n"


def _roofline(report: Report) -> list[str]:
    if report.roofline is None or not report.roofline.operators:
        return []
    peaks = report.roofline.peaks
    roofs = ", ".join(f"{dtype} {peak / 1e9:.3g} GFLOP/s" for dtype, peak in peaks.flops_per_s.items())
    lines = ["<details><summary>Operators against this machine's roofline</summary>", "",
             f"Roofs ({escape_cell(peaks.provenance())}; {escape_cell(peaks.device)}): {roofs}; "
             f"bandwidth {peaks.bandwidth_bytes_per_s / 1e9:.3g} GB/s.",
             "", "| operator | where | ms / step | share | GFLOP/s | of its roof | bound |", "|---|---|---|---|---|---|---|"]
    for op in report.roofline.operators:
        where = f"`{short_path(op.file)}:{op.line}`" if op.file else "–"
        lines.append(f"| `{op.op}`{' (backward)' if op.backward else ''} | {where} | {op.us_per_step / 1000:.3g} | "
                     f"{op.share_of_step:.1%} | {op.achieved_flops_per_s / 1e9:.3g} | {op.efficiency:.0%} | {op.bound} |")
    return lines + ["", "</details>", ""]


def _memory(report: Report) -> list[str]:
    memory = report.memory
    if memory is None:
        return []
    kinds = ", ".join(f"{kind} {held / 2**20:.3g} MB" for kind, held in memory.kinds.items())
    reserved = (f"; the caching allocator reserved {memory.reserved_bytes / 2**20:.3g} MB, "
                f"{memory.cached_free_bytes / 2**20:.3g} MB of it in free cached blocks" if memory.reserved_bytes is not None else "")
    lines = [f"Memory: peak {memory.peak_bytes / 2**20:.3g} MB ({kinds}){reserved}"
             + (f"; grows {memory.growth_bytes_per_step / 2**20:.3g} MB a step" if memory.growth_bytes_per_step > 0 else "")]
    if memory.larger_batch is not None:
        batch = memory.larger_batch
        lines[-1] += (f"; a {batch.factor}x batch measured {batch.samples_per_s_ratio:.2f}x the samples/s "
                      f"({batch.larger_step_ms:.3g} ms against {batch.step_ms:.3g} ms a step)")
    return lines + [""]


def _files(report: Report) -> list[str]:
    files = report.files
    if files is None or not (files.written or files.experiment_runs or files.unrouted or files.not_kept):
        return []
    lines = ["", "**Your files.** "
             + (f"The audited run wrote {', '.join(f'`{escape_cell(c.path)}` ({c.change})' for c in files.written)}; "
                if files.written else "The audited run wrote nothing; ")
             + escape_cell(files.stopped or "") + "."]
    if files.experiment_runs:
        lines.append(f"{len(files.experiment_runs)} experiment run(s) wrote only into advisor's shadow; "
                     + (f"**changed while they ran: {', '.join(files.changed)}**" if files.changed else "none of your files changed")
                     + f" ({files.checked} path(s) checked).")
    lines += [f"- {escape_cell(line)}" for line in files.not_kept + files.unrouted]
    return lines + [""]


_STATUS_ICONS = {"fail": "❌", "warn": "⚠️", "pass": "✅", "skipped": "➖"}


def _readiness(report: Report) -> str:
    """Failed and warned checks first, each with its lines; the latency table; the rest in one line."""
    readiness = report.readiness
    lines = [f"## advisor ready: {escape_cell(report.target.model_class or 'model')} ({report.target.device})", ""]
    counts = {status: sum(1 for c in readiness.checks if c.status == status) for status in _STATUS_ICONS}
    lines += [" · ".join(f"{_STATUS_ICONS[s]} {n} {s}" for s, n in counts.items() if n), ""]
    for error in report.errors:
        lines.append(f"> ⚠️ **{error.stage}** ({error.kind}): {escape_cell(error.message)}")
    flagged = [c for c in readiness.checks if c.status in ("fail", "warn")]
    if flagged:
        lines += ["| | check | what | where |", "|---|---|---|---|"]
        for check in flagged:
            where = ", ".join(f"`{short_path(loc.file)}:{loc.line}`" for loc in check.locations[:3])
            lines.append(f"| {_STATUS_ICONS[check.status]} {check.status} | `{check.id}` | {escape_cell(check.message)} | {where} |")
        lines.append("")
    rest = [f"{_STATUS_ICONS[c.status]} `{c.id}`" for c in readiness.checks if c.status not in ("fail", "warn")]
    if rest:
        lines += [" · ".join(rest), ""]
    if readiness.latency:
        lines += ["| batch | p50 ms | p90 ms | p99 ms | calls | items/s | peak MB |", "|---|---|---|---|---|---|---|"]
        for row in readiness.latency:
            if row.error:
                lines.append(f"| {row.batch_size} | fails: {escape_cell(row.error)} | | | | | |")
            else:
                lines.append(f"| {row.batch_size} | {row.p50_ms:.3g} | {row.p90_ms:.3g} | {row.p99_ms:.3g} "
                             f"[{row.p99.ci_low:.3g}–{row.p99.ci_high:.3g}] | {row.samples} | "
                             f"{row.throughput_per_s:.4g} | {row.peak_memory_mb if row.peak_memory_mb is not None else ''} |")
        lines.append("")
    if readiness.recommended_batch_size is not None:
        lines += [f"Recommended batch size: **{readiness.recommended_batch_size}** (largest whose p99 meets "
                  f"{readiness.latency_budget_ms:g} ms)", ""]
    lines.append(f"<sub>advisor {report.advisor_version} · {report.created}</sub>")
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def severity_of(finding: Finding) -> str:
    return finding.severity.value if finding.severity else "info"


def place_of(finding: Finding) -> str:
    if not finding.locations:
        return ""
    first = finding.locations[0]
    place = f"`{short_path(first.file)}:{first.line}`" if first.file else escape_cell(first.label())
    more = len(finding.locations) - 1
    return place + (f" (+{more})" if more else "")


def _verdict(v: Verification | None) -> str:
    if v is None:
        return "not verified"
    if v.memory is not None:
        return f"{v.status} for memory: {escape_cell(v.memory.peaks_line())}"
    if v.speedup is not None:
        return f"{v.status} {v.speedup:.2f}× [{v.ci_low:.2f}–{v.ci_high:.2f}]" + (" (its source patch)" if v.source_patch else "")
    return v.status


def _details(finding: Finding) -> list[str]:
    lines = [f"<details><summary><code>{finding.code}</code> {escape_cell(finding.title)}</summary>", ""]
    for location in finding.locations:
        place = f"{short_path(location.file)}:{location.line}" if location.file else location.label()
        lines.append(f"- `{place}` `{location.code}` {escape_cell(location.note)}".rstrip())
    if finding.fix is not None:
        lines += ["", f"**Fix:** {escape_cell(finding.fix.summary)}", ""]
        if finding.fix.before or finding.fix.after:
            lines += ["```diff"] + [f"- {line}" for line in finding.fix.before.splitlines()] + \
                     [f"+ {line}" for line in finding.fix.after.splitlines()] + ["```"]
    if finding.verification is not None and finding.verification.note:
        lines += ["", f"Verification: {_verdict(finding.verification)} — {escape_cell(finding.verification.note)}"]
    if finding.demoted:
        lines += ["", f"Demoted to info: {escape_cell(finding.demoted)}."]
    if finding.unreliable:
        lines += ["", f"Unreliable here: {escape_cell(finding.unreliable)}."]
    lines += ["", "</details>", ""]
    return lines


def escape_cell(text: str) -> str:
    """Keep user-controlled text from becoming table cells, markup or HTML."""
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\n", " "))
