"""Compare two reports: step time change, findings added and resolved, readiness checks and latency
percentiles — a CI gate that does not flap.

A change is called only when the bootstrap interval of the new/old ratio (each run's saved samples
resampled on its own) clears the threshold; a finding present in one run only whose deciding
value lay within its noise of the threshold is "borderline", not added or resolved. A run measured
on a contended machine (its report's ``quality``) decides nothing it rests on: its step time is not
judged against the other's, and a finding in one run only whose verdict either run marked unreliable
is "unreliable", not added or resolved.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field

from jinja2 import Environment, select_autoescape

from advisor.report.schema import Report
from advisor.rulekit.rule import Finding, Layer
from advisor.stats import percentile, ratio_interval, run_to_run_half_width, widened


class DiffInputError(ValueError):
    """A report file is missing or is not an advisor JSON report."""


MIN_SAMPLES = 5  # fewer timed steps than this on either side: the change is reported, not judged
# The run-to-run noise of a report that did not measure its own (a script's window, a slow step timed in one
# window, a report from before the windows): the most one audit's windows spread in bench/gate_noise.py on a shared
# 2-core machine (5.2% of samples/gpt_block.py's step), taken as if measured from three windows.
UNKNOWN_RUN_NOISE = 0.05
UNKNOWN_RUN_WINDOWS = 3


@dataclass
class Change:
    """new/old of a median (or a percentile) with a bootstrap interval, judged against a threshold."""

    ratio: float
    ci_low: float
    ci_high: float
    threshold: float
    noise: float = 0.0  # the run-to-run part of the interval's half-width, relative (0.04: ±4%)
    judged: bool = True  # False: too few samples to compute an interval, or a run measured under contention
    contended: bool = False
    incomparable: str = ""  # why the two runs' times say nothing of each other (another machine, torch, device)

    @property
    def verdict(self) -> str:
        if self.ci_low > 1 + self.threshold:
            return "slower"
        if self.ci_high < 1 - self.threshold:
            return "faster"
        if self.ci_low <= 1 - self.threshold or self.ci_high >= 1 + self.threshold:
            return "within noise"  # the interval reaches past the threshold: the runs are too noisy to call it
        return "unchanged"

    @property
    def half_width(self) -> float:
        """The interval's half-width, relative: the noise a verdict had to clear."""
        return max(self.ratio - self.ci_low, self.ci_high - self.ratio) / self.ratio if self.ratio > 0 else 0.0


def compare_samples(old: list[float], new: list[float], threshold: float, statistic=None,
                    run_noise: float = 0.0) -> Change | None:
    """The change of ``statistic`` (the median) from ``old`` to ``new`` samples, with a 95% interval: the
    bootstrap's (each side resampled on its own: the noise inside each run) widened by ``run_noise`` (the
    half-width, relative, that runs of the same code differ by: ``between_runs``), combined in log space.
    Called a change only when the interval clears the threshold."""
    statistic = statistic or statistics.median
    if not old or not new or statistic(old) <= 0:
        return None
    ratio = statistic(new) / statistic(old)
    if len(old) < MIN_SAMPLES or len(new) < MIN_SAMPLES:
        return Change(ratio, ratio, ratio, threshold, judged=False)
    low, high = widened(ratio, *ratio_interval(old, new, statistic), run_noise)
    return Change(ratio, low, high, threshold, noise=run_noise)


def between_runs(*runs) -> float:
    """The 95% half-width, relative, that run-to-run noise adds to the ratio of two runs' times. ``runs``:
    what each run measured (a Timing, or a readiness LatencyRow), with its windows' medians (``windows_ms``)
    and their spread (``run_noise``); a run that did not measure its noise counts as UNKNOWN_RUN_NOISE."""
    return run_to_run_half_width([(run.run_noise, len(run.windows_ms)) if getattr(run, "run_noise", None) is not None
                                  else (UNKNOWN_RUN_NOISE, UNKNOWN_RUN_WINDOWS) for run in runs])


@dataclass
class CheckChange:
    id: str
    old: str
    new: str
    borderline: bool = False  # either run decided it within its noise: not called a change by the gate


@dataclass
class LatencyChange:
    batch_size: int
    p50: Change | None
    p99: Change | None


@dataclass
class ReportDiff:
    old: Report
    new: Report
    threshold: float
    added: list[Finding] = field(default_factory=list)
    resolved: list[Finding] = field(default_factory=list)
    kept: list[tuple[Finding, Finding]] = field(default_factory=list)
    borderline: list[Finding] = field(default_factory=list)  # in one run only, decided within its noise
    unreliable: list[Finding] = field(default_factory=list)  # in one run only, decided under contention
    checks: list[CheckChange] = field(default_factory=list)  # readiness checks whose status changed
    latency: list[LatencyChange] = field(default_factory=list)
    judge_step: bool = True  # False: the step time is judged elsewhere (a CI gate's diff --remeasure)

    @property
    def moved(self) -> list[tuple[Finding, str]]:
        """Findings in both runs (the same rule at the same code) whose numbers, severity or lines moved, with
        what moved: unchanged to the gate, shown so a reader sees the drift."""
        return [(new, said) for old, new in self.kept if (said := what_moved(old, new))]

    @property
    def contended(self) -> list[str]:
        """Which runs were measured on a contended machine, with what contended."""
        return [f"{label}: {report.quality.summary}" for label, report in (("old", self.old), ("new", self.new))
                if report.quality.state in ("contended", "inconsistent")]

    @property
    def step(self) -> Change | None:
        if self.old.timing is None or self.new.timing is None:
            return None
        change = compare_samples(self.old.timing.samples_ms, self.new.timing.samples_ms, self.threshold,
                                 run_noise=between_runs(self.old.timing, self.new.timing))
        if change is not None and self.contended:
            change.judged, change.contended = False, True
        if change is not None and self.incomparable:
            change.judged, change.incomparable = False, self.incomparable
        return change

    @property
    def incomparable(self) -> str:
        return incomparable(self.old, self.new)

    @property
    def step_change(self) -> float | None:
        """Relative change of the median step time (+0.10: 10% slower)."""
        step = self.step
        return None if step is None else step.ratio - 1

    @property
    def regressed(self) -> bool:
        """The gate: the step, or a latency percentile, is slower beyond the threshold with the interval
        clear of it; or a readiness check got worse (pass -> warn/fail, warn -> fail)."""
        step = self.step if self.judge_step else None
        if step is not None and not step.contended and not step.incomparable and (
                step.verdict == "slower" if step.judged else step.ratio - 1 > self.threshold):
            return True
        if not self.incomparable and any(c is not None and c.verdict == "slower"
                                         for row in self.latency for c in (row.p50, row.p99)):
            return True
        return any(STATUS_RANK.get(c.new, 0) > STATUS_RANK.get(c.old, 0) and not c.borderline for c in self.checks)


STATUS_RANK = {"skipped": 0, "pass": 0, "warn": 1, "fail": 2}


def load_report(path: str) -> Report:
    if not os.path.isfile(path):
        raise DiffInputError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as handle:
            return Report.model_validate_json(handle.read())
    except ValueError as bad:
        first = str(bad).strip().splitlines()[0] if str(bad).strip() else type(bad).__name__
        raise DiffInputError(f"{path}: not an advisor JSON report ({first})") from None


def diff_reports(old: Report, new: Report, threshold: float = 0.05, judge_step: bool = True) -> ReportDiff:
    """``judge_step=False``: findings, readiness and latency only, the step time shown but not judged."""
    result = ReportDiff(old=old, new=new, threshold=threshold, judge_step=judge_step)
    old_by_key = {f.id: f for f in old.findings}  # the engine's ids: the rule and every place it points at
    new_by_key = {f.id: f for f in new.findings}
    only_new = [f for k, f in new_by_key.items() if k not in old_by_key]
    only_old = [f for k, f in old_by_key.items() if k not in new_by_key]
    result.borderline = [f for f in only_old + only_new if f.margin is not None and f.margin.borderline]
    marked = {run.slug for report in (old, new) for run in report.rules if run.unreliable}
    # a hardware finding in one run only (another job on the cores, a throttled clock) is the runner's state while
    # that run was measured, not the change's
    result.unreliable = [f for f in only_old + only_new if f not in result.borderline
                         and (f.unreliable or f.slug in marked or f.layer == Layer.HARDWARE)]
    settled = result.borderline + result.unreliable
    result.added = [f for f in only_new if f not in settled]
    result.resolved = [f for f in only_old if f not in settled]
    result.kept = [(old_by_key[k], f) for k, f in new_by_key.items() if k in old_by_key]
    if old.readiness is not None and new.readiness is not None:
        _diff_readiness(result, old.readiness, new.readiness)
    if why := result.incomparable:
        for change in (c for row in result.latency for c in (row.p50, row.p99) if c is not None):
            change.judged, change.incomparable = False, why
    return result


def incomparable(old: Report, new: Report) -> str:
    """Why two runs' times cannot be compared, or '': another CPU or GPU model, core count, torch or device.
    What a report does not record (an older report, a trace read offline) is not held against it."""
    pairs = [("device", old.target.device, new.target.device)]
    if old.environment is not None and new.environment is not None:
        before, after = old.environment, new.environment
        pairs += [("CPU", before.cpu_model, after.cpu_model), ("usable cores", before.cpu_cores_available,
                  after.cpu_cores_available), ("torch", before.torch_version, after.torch_version),
                  ("GPU", before.device_name, after.device_name)]
    differ = [f"{what} {a} vs {b}" for what, a, b in pairs if a and b and a != b]
    return f"the runs differ in {', '.join(differ)}: their times are not compared" if differ else ""


def what_moved(old: Finding, new: Finding) -> str:
    """What changed between two runs' records of one finding (its id held): '' when nothing did."""
    changes = []
    if old.severity != new.severity:
        changes.append(f"severity {_value(old.severity)} -> {_value(new.severity)}")
    if old.impact is not None and new.impact is not None and f"{old.impact:.1%}" != f"{new.impact:.1%}":
        changes.append(f"share of the step {old.impact:.1%} -> {new.impact:.1%}")
    elif old.margin is not None and new.margin is not None and old.margin.value != new.margin.value:
        changes.append(f"{new.margin.quantity} {old.margin.value:.3g} -> {new.margin.value:.3g}")
    before, after = _lines(old), _lines(new)
    if before != after:
        changes.append(f"now at {', '.join(after)} (was {', '.join(before)}): the code there is the same")
    if not changes and old.message != new.message:
        changes.append(f"its numbers moved: {new.message}")
    return "; ".join(changes)


def _value(severity) -> str:
    return getattr(severity, "value", str(severity))


def _lines(finding: Finding) -> list[str]:
    return sorted(f"{os.path.basename(loc.file)}:{loc.line}" for loc in finding.locations if loc.file)


def _diff_readiness(result: ReportDiff, old, new) -> None:
    before = {c.id: c for c in old.checks}
    result.checks = [CheckChange(c.id, before[c.id].status, c.status, before[c.id].borderline or c.borderline)
                     for c in new.checks if c.id in before and before[c.id].status != c.status]
    old_rows = {row.batch_size: row for row in old.latency if not row.error and row.samples_ms}
    for row in new.latency:
        if row.error or not row.samples_ms or row.batch_size not in old_rows:
            continue
        before = old_rows[row.batch_size]
        noise = between_runs(before, row)
        result.latency.append(LatencyChange(
            row.batch_size, compare_samples(before.samples_ms, row.samples_ms, result.threshold, run_noise=noise),
            compare_samples(before.samples_ms, row.samples_ms, result.threshold, statistic=_p99, run_noise=noise)))


def _p99(samples: list[float]) -> float:
    return percentile(samples, 99)


def change_note(change: Change) -> str:
    if change.incomparable:
        return f"{change.ratio - 1:+.1%}: not judged ({change.incomparable})"
    if change.contended:
        return f"{change.ratio - 1:+.1%}: not judged (a run was measured on a contended machine)"
    if not change.judged:
        verdict = "REGRESSION" if change.ratio - 1 > change.threshold else "not judged (fewer than 5 samples)"
        return f"{change.ratio - 1:+.1%}: {verdict}"
    if change.verdict == "within noise" and math.isinf(change.ci_high):  # a few noisy pairs bound no slowdown
        return f"{change.ratio - 1:+.1%} [{change.ci_low - 1:+.1%}, unbounded]: within noise (too few samples to bound it)"
    verdict = {"slower": "REGRESSION", "faster": "faster", "unchanged": "within threshold",
               "within noise": f"within noise (±{change.half_width:.1%}"
                               + (f", ±{change.noise:.1%} of it run-to-run)" if change.noise else ")")}[change.verdict]
    return f"{change.ratio - 1:+.1%} [{change.ci_low - 1:+.1%}, {change.ci_high - 1:+.1%}]: {verdict}"


def render_text(diff: ReportDiff) -> str:
    lines = [f"UNRELIABLE {run}" for run in diff.contended]
    step = diff.step
    if step is None:
        lines.append("step time: not comparable (a report has no timing)")
    elif not diff.judge_step:
        lines.append(f"step time: {diff.old.timing.median_ms:.4g} ms -> {diff.new.timing.median_ms:.4g} ms, not judged "
                     "here (--no-step-time: two separate runs; time them against each other with --remeasure)")
    else:
        lines.append(f"step time: {diff.old.timing.median_ms:.4g} ms -> {diff.new.timing.median_ms:.4g} ms "
                     f"({change_note(step)}; threshold ±{diff.threshold:.0%}, 95% interval of the ratio of medians, "
                     "the noise inside each run and between runs)")
        if step.judged and step.verdict == "within noise" and diff.old.target.model_file:
            files = ("OLD_MODEL_FILE NEW_MODEL_FILE" if diff.old.target.step is None  # an audit's model file
                     else "OLD_SCRIPT NEW_SCRIPT [-- ARGS]")  # a script's run
            lines.append(f"  to settle it: advisor diff --remeasure {files} (the two revisions timed against each "
                         "other, interleaved)")
    for title, findings in (("added", diff.added), ("resolved", diff.resolved)):
        lines.append(f"{title}: {len(findings)}")
        lines += [f"  {f.code} {f.slug}: {f.message}" for f in findings]
    if diff.borderline:
        lines.append(f"borderline (in one run only, decided within the noise of its threshold): {len(diff.borderline)}")
        lines += [f"  {f.code} {f.slug}: {f.margin.quantity} {f.margin.value:.3g} against {f.margin.threshold:.3g} "
                  f"(noise ±{f.margin.noise:.2g})" for f in diff.borderline]
    if diff.unreliable:
        lines.append(f"unreliable (in one run only: the machine's state then, or decided on a contended machine): "
                     f"{len(diff.unreliable)}")
        lines += [f"  {f.code} {f.slug}: {f.message}" for f in diff.unreliable]
    lines.append(f"unchanged: {len(diff.kept)}")
    lines += [f"  {f.code} {f.slug}: {said}" for f, said in diff.moved]
    for check in diff.checks:
        lines.append(f"check {check.id}: {check.old} -> {check.new}"
                     + (" (borderline: decided within the noise of its threshold)" if check.borderline else ""))
    for row in diff.latency:
        parts = [f"{name} {change_note(change)}" for name, change in (("p50", row.p50), ("p99", row.p99)) if change is not None]
        lines.append(f"batch {row.batch_size}: " + "; ".join(parts))
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
{% for run in contended %}<p class="bad">Unreliable {{ run }}</p>{% endfor %}
{% if change is not none %}<p>Step time {{ "%.4g"|format(old.timing.median_ms) }} ms → {{ "%.4g"|format(new.timing.median_ms) }} ms:
<span class="{{ 'bad' if regressed else 'good' }}">{{ "%+.1f"|format(change * 100) }}%</span>
(threshold ±{{ "%.0f"|format(threshold * 100) }}%; {{ step_note }})</p>{% else %}<p>Step time not comparable.</p>{% endif %}
{% for title, items in [("Added", added), ("Resolved", resolved),
                         ("Borderline (one run only, within the noise of its threshold)", borderline),
                         ("Unreliable (one run only: the machine's state, or decided on a contended machine)",
                          unreliable)] %}
<h2>{{ title }} ({{ items|length }})</h2>
<table>{% for f in items %}<tr><td>{{ f.code }}</td><td>{{ f.slug }}</td><td>{{ f.message }}</td></tr>{% endfor %}</table>
{% endfor %}<p>Unchanged: {{ kept|length }}</p>
{% if moved %}<table>{% for f, said in moved %}<tr><td>{{ f.code }}</td><td>{{ f.slug }}</td><td>{{ said }}</td></tr>
{% endfor %}</table>{% endif %}
{% if checks %}<h2>Readiness checks that changed</h2><table>
{% for c in checks %}<tr><td>{{ c.id }}</td><td>{{ c.old }} → {{ c.new }}</td></tr>{% endfor %}</table>{% endif %}
{% if latency %}<h2>Latency by batch size</h2><table><tr><th>batch</th><th>p50</th><th>p99</th></tr>
{% for row in latency %}<tr><td>{{ row.batch_size }}</td>
{% for change in (row.p50, row.p99) %}<td>{% if change %}{{ "%+.1f"|format((change.ratio - 1) * 100) }}%
({{ change.verdict }}){% endif %}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
</body></html>
""")


def render_html(diff: ReportDiff) -> str:
    step = diff.step
    return _HTML.render(old=diff.old, new=diff.new, change=diff.step_change, regressed=diff.regressed,
                        step_note=change_note(step) if step is not None else "",
                        threshold=diff.threshold, added=diff.added, resolved=diff.resolved, kept=diff.kept,
                        borderline=diff.borderline, unreliable=diff.unreliable, contended=diff.contended, moved=diff.moved,
                        checks=diff.checks, latency=diff.latency)
