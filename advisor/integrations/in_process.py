"""The step window of ``advisor run``, installed in this very process by a framework's callback: the training's
steps after a warm-up timed, a few profiled, the model described; then the evidence read back and the report
assembled and written here, as ``advisor run`` does in its parent. The training is never stopped (the window runs
as under ``--full``). Fixes are advised in the framework's words (``framework_advice.py``), not measured:
measuring one means running the training again with it (``advisor run -- python train.py``)."""

from __future__ import annotations

import os
import sys
import tempfile

from advisor.run.window_spec import PROFILED_STEPS, TIMED_STEPS, WARMUP_STEPS, WindowSpec

NOT_MEASURED = ("audited from a training callback: the fixes are advised, not measured (measuring one means "
                "training again with it: advisor run -- python train.py)")


class InProcessAudit:
    def __init__(self, out: str = "reports", warmup_steps: int = WARMUP_STEPS, steps: int = TIMED_STEPS,
                 profile_steps: int = PROFILED_STEPS, formats: tuple[str, ...] = ("html", "json")):
        self.out, self.formats = out, formats
        self.script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".py") else "<training>"
        self.spec = WindowSpec(script=self.script, warmup_steps=warmup_steps, steps=steps,
                               profile_steps=profile_steps, full=True, mode="train")
        self.window = None
        self.settings = None  # what the framework was configured with (framework_advice.TrainingSettings)
        self.report = None
        self.written: dict[str, str] = {}

    def start(self) -> None:
        """Install the window now (torch is imported: the framework runs on it)."""
        from advisor.script.window import StepWindow

        self.scratch = tempfile.mkdtemp(prefix="advisor-callback-")
        self.window = StepWindow(self.spec.model_copy(update={"out_dir": self.scratch}))
        self.window.install()

    @property
    def measured(self) -> bool:
        return self.window is not None and self.window.state.done

    def finish(self) -> None:
        """The report from what the window wrote, once: at the window's end, or when the training ends first."""
        if self.window is None or self.report is not None:
            return
        if not self.window.state.done:
            self.window.end.end_early()
            self.window.end.finish(stopped=False, ended_early=True)
        from advisor.assembly.build import assemble_report
        from advisor.report.schema import VerificationSettings
        from advisor.report.write import write_reports
        from advisor.rulekit.engine import RuleConfig
        from advisor.run.gathered_run import gathered_run
        from advisor.run.launch import ScriptRun

        run = ScriptRun(command=[sys.executable, *sys.argv], scratch=self.scratch)
        gathered = gathered_run(run, self.script, timeout=0.0)
        self.report = assemble_report(gathered, RuleConfig.load(),
                                      VerificationSettings(enabled=False, note=NOT_MEASURED))
        if self.settings is not None:
            from advisor.integrations.framework_advice import in_framework_words

            self.settings.environment = self.report.environment
            in_framework_words(self.report.findings, self.settings)
        stem = os.path.splitext(os.path.basename(self.script))[0] if self.script.endswith(".py") else "training"
        self.written = write_reports(self.report, self.out, stem, self.formats)
