"""``advisor run``: one audit of an unmodified script, through the shared report assembly."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from typing import Callable

from advisor.assembly.build import assemble_report
from advisor.assembly.verification import verify_findings
from advisor.commands.audit import AuditResult
from advisor.commands.options import MeasureOptions
from advisor.errors import StageError
from advisor.files.session import FileSession
from advisor.report.schema import VerificationSettings
from advisor.rulekit.engine import RuleConfig
from advisor.run.gathered_run import gathered_run
from advisor.run.launch import ScriptRun, discard, launch
from advisor.run.window_spec import PROFILED_STEPS, TIMED_STEPS, WARMUP_STEPS, AuditedModel, WindowSpec
from advisor.verify.arms import RunVerifier


@dataclass(kw_only=True)
class RunOptions(MeasureOptions):
    command: tuple[str, ...]
    warmup_steps: int = WARMUP_STEPS
    steps: int = TIMED_STEPS
    profile_steps: int = PROFILED_STEPS
    full: bool = False
    show_output: bool = False
    step_marker: str = ""
    mode: str = "auto"  # train | inference: what ends a step, instead of the script's signs of training

    @property
    def script(self) -> str:
        """The first .py argument: what the report is named after and pinned to."""
        found = next((part for part in self.command if part.endswith(".py")), self.command[0])
        return os.path.abspath(found) if found.endswith(".py") else found

    @property
    def stem(self) -> str:
        return os.path.splitext(os.path.basename(self.script))[0]


def run_script(options: RunOptions, progress: Callable[[str], None] = lambda text: None,
               rules: RuleConfig | None = None) -> AuditResult:
    rules = rules or RuleConfig.of(options)
    os.makedirs(options.out_dir, exist_ok=True)
    files = FileSession.start(options.shadow_limit_mb)
    try:
        return _run_with(files, options, progress, rules)
    finally:
        files.close()


def _run_with(files: FileSession, options: RunOptions, progress: Callable[[str], None], rules: RuleConfig) -> AuditResult:
    """The audited run (the user's: its writes are real, and journaled), then the experiments (shadowed)."""
    window = WindowSpec(warmup_steps=options.warmup_steps, steps=options.steps, profile_steps=options.profile_steps,
                        full=options.full, script=options.script, step_marker=options.step_marker,
                        mode="" if options.mode == "auto" else options.mode)
    progress(f"running {' '.join(options.command)}")
    environment, scratch = (files.shadow_environment() if options.experiment
                            else (files.journal_environment(), files.folder))
    run = launch(list(options.command), window, options.timeout, progress, show_output=options.show_output,
                 environment=environment, scratch_in=scratch, experiment=options.experiment)
    try:
        gathered = gathered_run(run, options.script, options.timeout)
        trace_kept = _keep_trace(run, options)
        seen = run.read("window.json") or {}
    finally:
        discard(run)
    evidence, errors = gathered.evidence, gathered.errors
    report = assemble_report(gathered, rules, VerificationSettings(enabled=options.verify, budget_s=options.budget,
                                                                   pairs=options.pairs))
    known: WindowSpec | None = None
    if not run.interrupted:
        files.remember()
        # the verification runs step and find the model as this run did, and apply the rules' own fixes
        target = evidence.target
        known = window.model_copy(update={
            "kind": seen.get("kind"), "device": target.device, "mode": target.mode,
            "step_ms": evidence.timing.median_ms if evidence.timing is not None else None,
            "rule_dirs": list(options.rule_dirs),
            "model": AuditedModel.of(target)})
        verifier = RunVerifier(list(options.command), known, rules.ruleset, options.budget, options.timeout, files=files,
                               progress=progress, pairs=options.pairs)
        refusal = files.refusal()
        verify_findings(report, rules, errors, lambda findings: refusal or verifier.verify(findings))
        if verifier.interrupted:
            report.errors.append(StageError(stage="verify", kind="interrupted", message=(
                f"interrupted ({verifier.interrupted}) while fixes were verified; the findings not yet measured "
                "are marked skipped")))
    report.files = files.record(_how_it_ended(run, seen, options))
    if report.trace is not None and trace_kept:
        report.trace.file = os.path.basename(trace_kept)
    return AuditResult(report=report, evidence=evidence, run_window=known)


def _how_it_ended(run: ScriptRun, seen: dict, options: RunOptions) -> str:
    """How the audited run ended, in the words the report's "Your files" section uses."""
    if run.stop == "killed":
        return (f"ended at once by advisor ({'--timeout' if run.timed_out else run.stopped_by}): it did not stop "
                "between two steps when asked, so a write it had in flight may be incomplete")
    why = "--timeout" if run.timed_out else run.stopped_by
    if run.stop == "between steps" and seen.get("between_steps") is False:
        return (f"stopped by advisor ({why}) between two writes (no step ended within the wait), every file it "
                "had open flushed")
    if run.stop == "between steps":
        return f"stopped by advisor ({why}) between two steps, every file it had open flushed"
    if seen.get("stopped"):
        return ("stopped by advisor at the step window's end, between two steps, every file it had open flushed "
                "(--full lets it finish)")
    return "ran to its own end"


def _keep_trace(run: ScriptRun, options: RunOptions) -> str | None:
    """The trace next to the report; under torchrun every rank's too, as ``<stem>.ranks/rank<R>.trace.json.gz``
    (a folder ``advisor analyze`` reads as one run)."""
    ranks = os.path.join(options.out_dir, f"{options.stem}.ranks")  # shared by the nodes of a multi-node job
    if len(run.rank_folders) > 1:
        for rank, folder in run.rank_folders.items():
            if (path := run.trace_of(folder)) is not None:
                os.makedirs(ranks, exist_ok=True)
                shutil.copyfile(path, os.path.join(ranks, f"rank{rank}.trace.json.gz"))
            _keep_rank_evidence(run, folder, os.path.join(ranks, "evidence", f"rank{rank}.json"))
    if run.trace_path is None:
        return None
    kept = os.path.join(options.out_dir, f"{options.stem}.trace.json.gz")
    shutil.copyfile(run.trace_path, kept)
    return kept


def _keep_rank_evidence(run: ScriptRun, folder: str, path: str) -> None:
    """What one rank recorded (its window, DDP use, crash), beside its trace; in a subfolder, which
    ``advisor analyze`` on the traces' folder does not read."""
    recorded = {name.removesuffix(".json"): found for name in ("window.json", "ddp.json", "crash.json", "target.json")
                if (found := run.read(name, folder)) is not None}
    if recorded:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(recorded, handle, indent=1)
