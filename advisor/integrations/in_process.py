"""The step window of ``advisor run``, installed in this very process by a framework's callback: the training's
steps after a warm-up timed, a few profiled, the model described; then the evidence read back and the report
assembled and written here, as ``advisor run`` does in its parent. The training is never stopped (the window runs
as under ``--full``). Fixes are said in the framework's words (``framework_advice.py``) and, where one can be
switched between two steps, measured in the training's own later steps (``in_run_verification.py``); the report is
written again with their verdicts."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

from advisor.run.window_spec import PROFILED_STEPS, TIMED_STEPS, WARMUP_STEPS, WindowSpec

NOT_MEASURED = ("audited from a training callback with verify=False: the fixes are advised, not measured "
                "(advisor run -- python train.py measures them in runs of its own)")
IN_TRAINING = ("each fix that can be switched between two steps is switched on and off by blocks of the training's "
               "own steps after the audit's window, then off for good; the others need whole runs of the script "
               "(advisor run)")
VERIFY_BUDGET_S = 120.0


class InProcessAudit:
    def __init__(self, out: str = "reports", warmup_steps: int = WARMUP_STEPS, steps: int = TIMED_STEPS,
                 profile_steps: int = PROFILED_STEPS, formats: tuple[str, ...] = ("html", "json"),
                 verify: bool = True, budget_s: float = VERIFY_BUDGET_S, pairs: int | None = None):
        """``pairs``: each fix measured in exactly this many pairs of blocks, whatever the time (as --pairs)."""
        self.out, self.formats, self.verify, self.budget_s, self.pairs = out, formats, verify, budget_s, pairs
        self.script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".py") else "<training>"
        self.spec = WindowSpec(script=self.script, warmup_steps=warmup_steps, steps=steps,
                               profile_steps=profile_steps, full=True, mode="train")
        self.window = None
        self.settings = None  # what the framework was configured with (framework_advice.TrainingSettings)
        self.report = None
        self.written: dict[str, str] = {}
        self.verifier = None  # in_run_verification.InRunVerifier, once the report has fixes to measure
        self.verifying = None  # its thread

    def start(self) -> None:
        """Install the window now (torch is imported: the framework runs on it)."""
        from advisor.script.window import StepWindow

        self.scratch = tempfile.mkdtemp(prefix="advisor-callback-")
        self.window = StepWindow(self.spec.model_copy(update={"out_dir": self.scratch}))
        self.window.install()

    @property
    def measured(self) -> bool:
        return self.window is not None and self.window.state.done

    def at_step_end(self) -> None:
        """After each training step: the report once the window's steps are measured, then the fixes' windows."""
        with self._never_the_trainings_end():
            if self.measured and self.report is None:
                self.finish()
            if self.verifier is not None:
                self.verifier.pump()

    def training_ended(self) -> None:
        """The training is over: the report if not yet made; a verification under way ends with what it has."""
        with self._never_the_trainings_end():
            self.finish()
            if self.verifier is not None:
                self.verifier.training_ended()
                self.verifying.join(timeout=60)

    @contextlib.contextmanager
    def _never_the_trainings_end(self):
        """advisor's own failure is said and ends advisor's work here, never the user's training."""
        try:
            yield
        except Exception as broken:  # noqa: BLE001
            print(f"advisor: the callback's audit failed ({type(broken).__name__}: {broken}); the training goes on "
                  "without it", file=sys.stderr)
            if self.verifier is not None:
                self.verifier.training_ended()
            self.window, self.verifier = None, None

    def finish(self) -> None:
        """The report from what the window wrote, once: at the window's end, or when the training ends first."""
        if self.window is None or self.report is not None:
            return
        if not self.window.state.done:
            self.window.end.end_early()
            self.window.end.finish(stopped=False, ended_early=True)
        from advisor.assembly.build import assemble_report
        from advisor.report.schema import VerificationSettings
        from advisor.rulekit.engine import RuleConfig
        from advisor.run.gathered_run import gathered_run
        from advisor.run.launch import ScriptRun

        run = ScriptRun(command=[sys.executable, *sys.argv], scratch=self.scratch)
        gathered = gathered_run(run, self.script, timeout=0.0)
        rules = RuleConfig.from_file(self.script)  # the training script's [tool.advisor], as advisor run reads it
        verify = self.verify and self.window.state.kind is not None
        self.report = assemble_report(gathered, rules, VerificationSettings(
            enabled=verify, budget_s=self.budget_s, pairs=self.pairs, note=IN_TRAINING if verify else NOT_MEASURED))
        if self.settings is not None:
            from advisor.integrations.framework_advice import in_framework_words

            self.settings.environment = self.report.environment
            in_framework_words(self.report.findings, self.settings)
        self.write()
        if verify and self.report.findings:
            self._verify(rules)

    def write(self) -> None:
        from advisor.report.write import write_reports

        stem = os.path.splitext(os.path.basename(self.script))[0] if self.script.endswith(".py") else "training"
        self.written = write_reports(self.report, self.out, stem, self.formats)

    def _verify(self, rules) -> None:
        from advisor.integrations.in_run_verification import InRunVerifier, verify_in_training
        from advisor.run.window_spec import AuditedModel

        target, timing = self.report.target, self.report.timing
        known = self.spec.model_copy(update={
            "kind": self.window.state.kind, "device": target.device, "mode": target.mode,
            "step_ms": timing.median_ms if timing is not None else None,
            "model": AuditedModel.of(target)})
        self.verifier = InRunVerifier(known, rules.ruleset, pairs=self.pairs)
        self.verifying = verify_in_training(self.report, rules, self.verifier, None if self.pairs else self.budget_s,
                                            self.write)


class AuditingCallback:
    """What both frameworks' callbacks hold (mixed in before the framework's own base): the audit, configured alike."""

    def __init__(self, out: str = "reports", warmup_steps: int = WARMUP_STEPS, steps: int = TIMED_STEPS,
                 profile_steps: int = PROFILED_STEPS, verify: bool = True, budget_s: float = VERIFY_BUDGET_S,
                 pairs: int | None = None):
        """``verify``: measure each fix that can be switched between two steps in the training's own later steps
        (``in_run_verification.py``); ``budget_s``: the seconds of training those measurements may take; ``pairs``:
        exactly this many pairs of blocks per fix instead, whatever the time."""
        self.audit = InProcessAudit(out, warmup_steps, steps, profile_steps, verify=verify, budget_s=budget_s,
                                    pairs=pairs)
