"""A training callback's fixes measured in the training itself: after the audit's window, each fix that can be
switched between two steps (the model's forward: compile, autocast, a graph rewrite; the optimizer's options; a
library flag; the loader through a twin) is switched on and off by blocks of the training's own steps, as
``advisor run``'s verification does in a run of its own (``verify/switched.py``, judged by ``measure_switched``),
and switched off for good once decided. The rest (the model's layout or modules, DDP's options, a memory fix) needs
whole runs, which a callback cannot start: said so, with ``advisor run`` as the way to measure them.

The one verification method runs on a thread of its own (``verify_findings``, ``measure_fixes``); each of its runs
asks the training's thread for a window, installed at the end of a training step (``pump``) in the training's
process (``WindowSpec.in_training``: no reseeding, no stop, every change taken back at its end), and waits for its
blocks. The training never waits: when it ends first, the window's pairs so far are what was measured.

While a fix is on, the training's steps run with it (its numerics compared once, at the first such step, on the
same batch: within the rule's tolerance).
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Callable

from advisor.rulekit.engine import RuleSet
from advisor.rulekit.rule import Finding, Verification
from advisor.run.window_spec import BlocksSpec, WindowSpec

ENDED = "the training ended before its fix was measured"
WHOLE_RUNS = ("{why}: measured in whole runs of the script, which a training callback cannot start "
              "(advisor run -- python train.py measures it)")


@dataclass
class Request:
    """One switched window the verification thread waits for."""

    spec: WindowSpec
    done: threading.Event = field(default_factory=threading.Event)
    outcome: tuple[dict, dict | None] | Verification | None = None


@dataclass
class InRunVerifier:
    """``measure_switched``'s verifier over windows in this very process: ``run`` is called on the verification
    thread, ``pump`` and ``training_ended`` on the training's."""

    window: WindowSpec  # the audit window's spec with its kind, device, model and step time
    ruleset: RuleSet
    pairs: int | None = None
    switched_s: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: Request | None = None
    active: tuple[Request, object] | None = None  # the request and its StepWindow
    ended: bool = False

    def measure(self, findings: list[Finding], share_s: float) -> Verification:
        from advisor.machine.conditions import Watch
        from advisor.verify.switched_arms import measure_switched

        fixes = [f.model_copy(update={"verification": None}) for f in findings]
        why = self._why_whole_runs(findings, fixes)
        if why:
            return Verification(status="not-verifiable-here", note=WHOLE_RUNS.format(why=why))
        tolerance = max((self.ruleset.get(f.slug).fix_spec.tolerance_for(f) for f in findings), default=1e-5)
        with Watch() as watch:  # the training's process is its own; anything else is contention
            outcome = measure_switched(self, fixes, tolerance, share_s)
        if isinstance(outcome, str):  # fewer than the least pairs: the training ended, or the fix's share of the budget
            why = ("the training ended first: a longer training, or advisor run, measures it" if self.ended else
                   "its share of budget_s ran out first (a first compilation's time among it): a larger budget_s "
                   "measures it")
            return Verification(status="skipped", note=f"fewer than {outcome.removeprefix('the script ended before ')}"
                                                        f": {why}")
        outcome.device = outcome.device or self.window.device
        if outcome.speedup is not None:
            outcome.conditions = watch.conditions
            outcome.note = "; ".join(part for part in (outcome.note, "switched inside the user's own training by "
                                                       "advisor's callback") if part)
        return outcome

    def _why_whole_runs(self, findings: list[Finding], fixes: list[Finding]) -> str:
        from advisor.rulekit.rule import NotVerifiable
        from advisor.verify.switched_arms import why_not_switched_here

        for finding in findings:
            spec = self.ruleset.get(finding.slug).fix_spec
            if spec is None:
                return "no fix to switch"
            if spec.measures == "memory":
                return "a memory fix"
        try:
            return why_not_switched_here(self.window, self.ruleset, findings, fixes)
        except NotVerifiable as reason:
            return str(reason)

    # --- the verification thread's side ------------------------------------------------------------------------

    def run(self, fixes: list[Finding], patched: bool = False,
            switched: BlocksSpec | None = None) -> tuple[dict, dict | None] | Verification:
        if switched is None:
            return Verification(status="not-verifiable-here", note=WHOLE_RUNS.format(why="not switchable"))
        request = Request(self.window.model_copy(update={"measure_only": True, "fixes": fixes, "switched": switched,
                                                         "in_training": True, "full": True}))
        with self.lock:
            if self.ended:
                return Verification(status="skipped", note=ENDED)
            self.pending = request
        request.done.wait()
        return request.outcome

    # --- the training thread's side ----------------------------------------------------------------------------

    def pump(self) -> None:
        """At the end of a training step: a finished window's outcome handed back; a window asked for installed."""
        with self.lock:
            if self.active is not None and self.active[1].state.done:
                self._answer(*self.active)
                self.active = None
            if self.active is None and self.pending is not None:
                request, self.pending = self.pending, None
                self.active = (request, self._install(request))

    def training_ended(self) -> None:
        """The training is over: a window still running ends with the pairs it has; nothing more is asked."""
        with self.lock:
            self.ended = True
            if self.active is not None:
                request, window = self.active
                if not window.state.done:
                    window.end.end_early()
                    window.end.finish(stopped=False, ended_early=True)
                self._answer(request, window)
                self.active = None
            if self.pending is not None:
                self.pending.outcome = Verification(status="skipped", note=ENDED)
                self.pending.done.set()
                self.pending = None

    @staticmethod
    def _install(request: Request):
        from advisor.script.window import StepWindow

        folder = tempfile.mkdtemp(prefix="advisor-verify-")
        window = StepWindow(request.spec.model_copy(update={"out_dir": folder}))
        window.install()
        return window

    @staticmethod
    def _answer(request: Request, window) -> None:
        """Between two steps: the fix off for good, then what the window measured handed to the waiting thread."""
        if window.verification is not None:
            window.verification.withdraw()
        request.outcome = outcome_of(window.state.out)
        request.done.set()


def outcome_of(folder: str) -> tuple[dict, dict | None] | Verification:
    """What a switched window in the training left in its folder, as ``measure_switched`` reads a run's."""
    import json

    from advisor.verify import switched_probe as switched_run
    from advisor.verify.switched_arms import fix_not_applied

    def read(name: str) -> dict | None:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    if (not_applied := fix_not_applied(read)) is not None:
        return not_applied
    window = read("window.json")
    if window and window.get("switch_failed"):
        return Verification(status="fix-failed", note=f"{window['switch_failed']} (switched off at once; the training "
                                                      "went on without it)")
    if not window or not (window.get("blocks") or {}).get("baseline_ms") and not window.get("ended_early"):
        return Verification(status="skipped", note=ENDED)
    return window, switched_run.load(folder)


def verify_in_training(report, rules, verifier: InRunVerifier, budget_s: float | None,
                       written: Callable[[], None]) -> threading.Thread:
    """The one verification method over ``report``'s findings, on a thread of its own; ``written()`` once done.
    ``budget_s=None``: no time limit (the verifier measures a fixed number of pairs)."""
    from advisor.assembly.verification import verify_findings
    from advisor.verify.orchestrate import measure_fixes

    def verify() -> None:
        try:
            verify_findings(report, rules, list(report.errors), lambda findings: measure_fixes(
                findings, verifier.measure, budget_s, device=verifier.window.device))
        except Exception as broken:  # noqa: BLE001 - advisor's failure never reaches the user's training
            report.verification.note = f"verification failed ({type(broken).__name__}: {broken})"
        written()
    thread = threading.Thread(target=verify, name="advisor-verify", daemon=True)
    thread.start()
    return thread
