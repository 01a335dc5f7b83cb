"""``advisor fix -- python train.py``: the script audited with ``advisor run``, and its patched copy run
as the candidate arm, alternating with the original script's runs (``run.arms.RunVerifier``): the same
window of steps, numerics from the first steps, the same bootstrap."""

from __future__ import annotations

import os
from typing import Callable

from advisor.commands.run import RunOptions, run_script
from advisor.files.session import FileSession
from advisor.report.schema import Report
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Finding, Verification
from advisor.run.window_spec import WindowSpec
from advisor.verify.arms import RunVerifier


class Script:
    def __init__(self, options, rules: RuleConfig, progress: Callable[[str], None]):
        self.options, self.rules, self.progress = options, rules, progress
        self.command = list(options.command)
        self.entry = RunOptions(command=options.command).script
        if not self.entry.endswith(".py"):
            raise ValueError(f"no .py file in the command {' '.join(self.command)}: advisor fix edits a Python script")
        self.window: WindowSpec | None = None

    def audit(self, entry: str, out_dir: str) -> Report:
        """The audited run of the user's script (theirs, as ``advisor run``'s), or of a patched copy (an
        experiment of advisor's: its writes go to a shadow)."""
        options = self.options
        run_options = RunOptions(command=tuple(self.patched_command(entry)), out_dir=out_dir, mode=options.mode,
                                 timeout=options.timeout, verify=False, rule_dirs=options.rule_dirs,
                                 settings=options.settings, disabled=options.disabled, experiment=entry != self.entry)
        result = run_script(run_options, self.progress, self.rules)
        if entry == self.entry:
            self.window = result.run_window
        return result.report

    def patched_command(self, entry: str) -> list[str]:
        """The command with the script's path replaced by ``entry`` (the patched copy's)."""
        return [entry if part.endswith(".py") and os.path.abspath(part) == self.entry else part
                for part in self.command]

    def measure(self, patched: str, label: str, seconds: float, tolerance: float, through_loader: bool,
                chosen: list[Finding], files: FileSession) -> Verification:
        if self.window is None:
            return Verification(status="skipped", note="the audit's window is not known here (--from a report): "
                                                       "run advisor fix without --from to measure the patch")
        options = self.options
        files.remember()
        verifier = RunVerifier(self.command, self.window, self.rules.ruleset, seconds, options.timeout, files=files,
                               progress=self.progress, pairs=options.pairs,
                               candidate_command=self.patched_command(patched), patched_loader=through_loader)
        return verifier.measure(chosen, seconds)
