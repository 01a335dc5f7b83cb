"""Verify ``advisor run``'s findings: run the script's window again with the rule's own fix injected.

The fix is the one ``audit`` measures, carried out inside the script's process (``inject.py``).
Every run here is an experiment: it writes into a fresh shadow over the user's files as the audited
run found them (``advisor.files``), so each starts from the same files and changes none.
Baseline and candidate runs alternate (A B A B ...), each a fresh, identically seeded process
timing the same window of steps; each pair gives a ratio of their mean step times (step + data
wait when the fix changes the loader), and the verdict and its interval come from the same
bootstrap as ``audit``'s. Numerics: the first steps' losses and gradients (or the model's first
outputs) of the first candidate run against the first baseline run, within the rule's
tolerance, once two baseline runs have shown the script gives the same values run to run (a fix that
changes the results is known then, before its second run).
A fix that can be switched between two steps of one run (the model's forward, the optimizer's options,
a library flag, the loader through a twin: ``switched.py``) is measured inside runs of the script instead:
the fix on and off by blocks of steps, many pairs in one process, its numerics compared at the first step
with it on (``switched_arms.py``); whole runs are for the rest (DDP's options, the model's layout or
modules, anomaly mode, the saves skipped), and for a script that never gets through the minimum pairs.
Fixes verified one by one are then measured together. After the minimum runs, a fix stops being
run once its interval clears the no-gain band (a verdict already decided), or when its share of
the budget is spent.
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from advisor.files.session import FileSession
from advisor.machine.conditions import Watch
from advisor.rulekit.engine import RuleSet
from advisor.rulekit.rule import Finding, Verification
from advisor.run.launch import launch
from advisor.run.window_spec import BlocksSpec, WindowSpec
from advisor.verify.judging import LOADER_NOTE, MIN_PAIRS, judged, model_not_called, within
from advisor.verify.measure import ABResult, verdict
from advisor.verify.orchestrate import measure_fixes
from advisor.verify.plan import MeasuredFixes

MAX_PAIRS = 8
REPEATABLE = 1e-6  # two baseline runs within this share of their magnitude: the script is seeded alike
NOTES = {"checkpoint-in-step": "the saves skipped: the most an asynchronous save can gain"}


@dataclass
class Arm:
    """The runs of one side of a comparison."""

    windows: list[dict] = field(default_factory=list)
    results: list[dict | None] = field(default_factory=list)  # the first two runs' first results

    def add(self, window: dict, results: dict | None) -> None:
        self.windows.append(window)
        if len(self.results) < 2:
            self.results.append(results)

    def cost(self, with_data: bool) -> list[float]:
        return [_mean_step(window, with_data) for window in self.windows]


class RunsInterrupted(Exception):
    """Ctrl-C or a signal while an experiment ran: no more runs."""

    def __init__(self, stopped_by: str):
        super().__init__(stopped_by)
        self.stopped_by = stopped_by


@dataclass
class RunVerifier:
    command: list[str]
    window: WindowSpec  # the audit run's window spec, with what the verification runs need to know of it
    ruleset: RuleSet
    budget_s: float
    timeout: float
    files: FileSession | None = None  # where every run's shadow lies (needed once a run starts)
    progress: Callable[[str], None] = lambda text: None
    interrupted: str = ""  # what stopped the experiments, when something did
    pairs: int | None = None  # exactly this many runs per side for each fix, whatever the time (no budget)
    candidate_command: list[str] | None = None  # advisor fix: the patched copy of the script, run as it is
    patched_loader: bool = False  # ... and its edits change a DataLoader: timed with the data wait
    timing_only: bool = False  # advisor diff --remeasure: two revisions of a script, their results not compared
    started: float = field(default_factory=time.monotonic)
    baseline_s: list[float] = field(default_factory=list)  # wall time of each run without a fix
    switched_s: list[float] = field(default_factory=list)  # ... and of each run with a fix switched inside it
    whole_runs: dict[tuple, str] = field(default_factory=dict)  # fixes (their findings' ids) -> why whole runs

    def minimum_s(self, findings: list[Finding]) -> float:
        """What measuring these fixes needs at the least: one run of the script where they are switched inside
        it, the minimum pairs of runs where not; judged by the runs without a fix (a fix's own cost, such as
        torch.compile's, is its own: it does not make the next fix look unaffordable)."""
        runs = self.baseline_s or self.switched_s
        run_s = statistics.median(runs) if runs else 0.0
        return run_s if not self._why_whole_runs(findings, _fixes(findings)) else 2 * run_s * MIN_PAIRS

    @property
    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def verify(self, findings: list[Finding]) -> MeasuredFixes:
        measured = MeasuredFixes()
        try:
            measured = measure_fixes(findings, self.measure, None if self.pairs else self.budget_s,
                                     self.minimum_s, self.window.device, self.progress)
        except RunsInterrupted as stopped:
            self.interrupted = stopped.stopped_by
            for finding in findings:
                measured.results.setdefault(finding.id, Verification(
                    status="skipped", note=f"interrupted ({stopped.stopped_by}) before it was measured"))
        return measured

    def measure(self, findings: list[Finding], share_s: float) -> Verification:
        with Watch() as watch:  # advisor and the script's runs are its own; anything else is contention
            outcome = self._measure(findings, share_s)
        outcome.device = outcome.device or self.window.device
        if outcome.speedup is not None:
            outcome.conditions = watch.conditions
        return outcome

    def _measure(self, findings: list[Finding], share_s: float) -> Verification:
        if any(self.ruleset.get(f.slug).fix_spec.measures == "memory" for f in findings):
            return Verification(status="not-verifiable-here", note="a memory fix is measured on copies of a model "
                                "file's step (advisor audit), not in runs of a script, which time it")
        fixes = _fixes(findings)
        tolerance = max((self.ruleset.get(f.slug).fix_spec.tolerance_for(f) for f in findings), default=1e-5)
        whole_runs = self._why_whole_runs(findings, fixes)
        if not whole_runs:
            from advisor.verify.switched_arms import measure_switched

            switched = measure_switched(self, fixes, tolerance, share_s)
            if isinstance(switched, Verification):
                return switched
            whole_runs = switched
        measured = self._measure_whole_runs(fixes, findings, tolerance, share_s)
        if measured.speedup is not None and whole_runs:
            measured.note = "; ".join(part for part in (measured.note, f"whole runs: {whole_runs}") if part)
        return measured

    def _why_whole_runs(self, findings: list[Finding], fixes: list[Finding]) -> str:
        """Why these fixes are measured in whole runs of the script, or "" when they can be switched inside one."""
        key = tuple(f.id for f in findings)
        if key not in self.whole_runs:
            self.whole_runs[key] = self._whole_runs_reason(findings, fixes)
        return self.whole_runs[key]

    def _whole_runs_reason(self, findings: list[Finding], fixes: list[Finding]) -> str:
        if self.candidate_command:
            return "the candidate is another script (a patched copy or a revision), run as it is"
        if not findings:
            return "no fix to switch"
        from advisor.rulekit.rule import NotVerifiable
        from advisor.verify.switched_arms import why_not_switched_here

        try:
            return why_not_switched_here(self.window, self.ruleset, findings, fixes)
        except NotVerifiable:
            return "the fix cannot be injected"  # the run says why (fix_refused.json)

    def _measure_whole_runs(self, fixes: list[Finding], findings: list[Finding], tolerance: float,
                            share_s: float) -> Verification:
        base, cand = Arm(), Arm()
        began = time.monotonic()
        while len(base.windows) < (self.pairs or MAX_PAIRS):
            pair_began = time.monotonic()
            for arm, injected in ((base, []), (cand, fixes)):
                run_began = time.monotonic()
                outcome = self.run(injected, patched=arm is cand)
                if isinstance(outcome, Verification):
                    return outcome
                arm.add(*outcome)
                if not injected:
                    self.baseline_s.append(time.monotonic() - run_began)
                if arm is base and len(base.windows) == 2 and not cand.windows[0]["changes_loader"]:
                    failed, _ = self._numerics(base, cand, tolerance, loader_only=False)
                    if failed is not None:
                        return failed  # known from two baselines and one candidate: no second candidate run
            pair_s = time.monotonic() - pair_began
            if not self.pairs and len(base.windows) >= MIN_PAIRS and (time.monotonic() - began + pair_s > share_s
                                                                      or self._decided(base, cand)):
                break
        first = cand.windows[0]
        if first["rewrite_unapplied"]:
            return Verification(status="not-verifiable-here", note=f"{first['rewrite_unapplied']}: the fix was "
                                                                    "not applied, so not measured")
        if first["changes_model"] and not first["model_fixed"]:
            return model_not_called(self.window)
        with_data = self._with_data(first)
        compiling = _compile_seconds(base.windows[0], first)
        numerics, errors = self._numerics(base, cand, tolerance, with_data)
        if numerics is not None and numerics.status == "numerics-failed":
            return numerics
        ab = ABResult(base.cost(with_data), cand.cost(with_data))
        low, high = ab.interval()
        what = "step + data wait" if with_data else "step"
        notes = [f"{len(base.windows)} runs of the script per side, alternating; mean {what} time over each run's "
                 f"{self.window.steps} timed steps", errors.pop("note")]
        if first["changes_loader"]:
            notes.append(LOADER_NOTE.format(options=", ".join(f"{k}={v}" for k, v in first["loader_options"].items())))
        notes += [NOTES[f.slug] for f in findings if f.slug in NOTES]
        if first["rewrite_described"]:
            notes.append(f"the candidate rewrote {first['rewrite_described']}")
        return judged(ab, (low, high), notes, samples=len(base.windows),
                            timed="run with data" if with_data else "run", compile_s=compiling, **errors)

    def _with_data(self, first: dict) -> bool:
        """Whether a run's cost counts its data wait: the fix rebuilds the loaders (or the patch edits one)."""
        return bool(first["changes_loader"]) or bool(self.candidate_command and self.patched_loader)

    def _decided(self, base: Arm, cand: Arm) -> bool:
        """The interval already clears the no-gain band: the verdict is decided at the minimum runs."""
        with_data = self._with_data(cand.windows[0])
        ab = ABResult(base.cost(with_data), cand.cost(with_data))
        return verdict(ab.speedup, ab.interval()) in ("verified", "slower")

    def _numerics(self, base: Arm, cand: Arm, tolerance: float, loader_only: bool) -> tuple[Verification | None, dict]:
        """(a numerics-failed Verification or None, the error fields and a note for the verified one)."""
        if loader_only:
            return None, {"note": "the model step is unchanged, only the loader's settings differ"}
        if self.timing_only:
            return None, {"note": "timing only: two revisions of the script compared, their results not"}
        from advisor.verify import first_results  # torch: imported by the parent only once it verifies

        baseline, repeat, candidate = base.results[0], base.results[-1], cand.results[0]
        if baseline is None or candidate is None or repeat is None or len(base.results) < 2:
            return None, {"note": "numerics not checked: the runs recorded no first results"}
        same, _ = first_results.compared(baseline, repeat)
        if not same.within(REPEATABLE):
            return None, {"note": f"numerics not checked: two runs without the fix already differ by "
                                  f"{same.max_rel_error:.3g} of their magnitude (randomness advisor's seed does not reach)"}
        from advisor.verify.numerics import tolerance_at

        return within(*first_results.compared(baseline, candidate), *tolerance_at(tolerance, baseline.get("precision")))

    def run(self, fixes: list[Finding], patched: bool = False,
             switched: BlocksSpec | None = None) -> tuple[dict, dict | None] | Verification:
        """One run of the script's window; a run that dies for a reason of its own (a port still held by
        the previous job under torchrun) is tried once more before the arm is given up. ``patched``: the
        candidate side of ``advisor fix``, the patched copy of the script (its fixes are in its source)."""
        command = self.candidate_command if patched and self.candidate_command else self.command
        fixes = [] if command is not self.command else fixes
        outcome = self._run_once(fixes, command, switched)
        if isinstance(outcome, Verification) and outcome.status in ("fix-failed", "skipped") and "window" in outcome.note:
            outcome = self._run_once(fixes, command, switched)
        return outcome

    def _run_once(self, fixes: list[Finding], command: list[str],
                  switched: BlocksSpec | None) -> tuple[dict, dict | None] | Verification:
        environment, arm = self.files.shadow_environment()
        run = launch(command, self.window.model_copy(update={"measure_only": True, "fixes": fixes, "switched": switched}),
                     self.timeout, environment=environment, scratch_in=arm, experiment=True)
        try:
            if run.interrupted:
                raise RunsInterrupted(run.stopped_by)
            if (full := self.files.full(arm)) is not None:
                return Verification(status="not-verifiable-here", note=full)
            from advisor.verify.switched_arms import fix_not_applied

            if (not_applied := fix_not_applied(run.read)) is not None:
                return not_applied
            window = run.read("window.json")
            ended = bool(switched and window and window.get("ended_early") and run.returncode == 0)
            if not window or not (window["samples_ms"] or ended or (window.get("blocks") or {}).get("baseline_ms")):
                why = failure_line(run.stderr)
                changed = bool(fixes) or command is not self.command
                return Verification(status="fix-failed" if changed else "skipped",
                                    note="the script did not complete its timed window"
                                         + (" with the fix" if changed else "") + (f": {why}" if why else ""))
            if switched:
                from advisor.verify import switched_probe as switched_run

                return window, switched_run.load(run.folder)
            from advisor.verify import first_results

            return window, first_results.load(run.folder)
        finally:
            label = ("switched " if switched else "") + ("with " + " + ".join(fix.slug for fix in fixes) if fixes
                     else "patched source" if command is not self.command else "baseline")
            self.files.finish_run(arm, label, run.seconds, run.returncode, run.stdout)  # its shadow is thrown away


def _fixes(findings: list[Finding]) -> list[Finding]:
    """The fixes as a verification run's spec carries them: their findings, without a verification."""
    return [f.model_copy(update={"verification": None}) for f in findings]


def failure_line(stderr: str) -> str:
    """The line of a failed run's output that says why: the last exception line (a rank's, under
    torchrun, whose lines are prefixed ``[rankN]:``), else the last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip() and not set(line.strip()) <= set("=-*")]
    errors = [line for line in lines if re.search(r"\b[A-Za-z_.]*(Error|Exception)\b:", line)]
    return (errors or lines or [""])[-1][:400]


def _compile_seconds(baseline: dict, candidate: dict) -> float | None:
    """How much longer the candidate's first forward took than the baseline's: torch.compile's time."""
    if not candidate["compiled"] or candidate["first_forward_s"] is None or baseline["first_forward_s"] is None:
        return None
    return round(max(0.0, candidate["first_forward_s"] - baseline["first_forward_s"]), 3)


def _mean_step(window: dict, with_data: bool) -> float:
    """The mean step of one run: a cost every k-th step (a checkpoint) counts 1/k, as in the total."""
    if with_data:
        return statistics.fmean(s + w for s, w in zip(window["samples_ms"], window["data_wait_ms"]))
    return statistics.fmean(window["samples_ms"])
