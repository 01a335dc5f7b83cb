"""``advisor diff --remeasure OLD NEW``: two revisions of a model file (or of a script) timed against each other, to settle a
diff whose step time was within noise. The measurement is ``advisor fix``'s of a patched copy (``ModelFile``):
one fresh child loads both files, warms both steps up and times them in interleaved pairs, each on its own
fresh copy of the model, its writes in a shadow; only the outputs are not compared (two revisions may compute
different things by design). Two scripts are timed as ``advisor run`` verifies a fix of a script: the old one's
window of steps read once, then whole runs of each, alternating, that window timed in each. The verdict is the
diff's: the ratio NEW/OLD with its 95% interval against the threshold."""

from __future__ import annotations

import ast
import math
import os
from dataclasses import dataclass
from typing import Callable

from advisor.commands.fix import FixOptions, ModelFile
from advisor.files.session import FileSession
from advisor.report.compare import Change, DiffInputError, change_note
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Verification

MODEL_FILE_NEEDS = ("get_model", "get_inputs")


@dataclass(kw_only=True)
class RemeasureOptions:
    old_file: str
    new_file: str
    script_args: tuple[str, ...] = ()  # two scripts: both run as `python FILE *script_args`
    threshold: float = 0.05
    budget: float = 60.0  # seconds of interleaved pairs
    pairs: int | None = None  # exactly this many pairs instead (the same work on any machine)
    timeout: float = 300.0
    device: str = "auto"
    mode: str = "auto"


@dataclass
class RemeasureResult:
    measured: Verification
    threshold: float

    @property
    def change(self) -> Change | None:
        """NEW's step over OLD's (the inverse of the A/B's speedup), judged as the diff judges a step."""
        m = self.measured
        if not m.speedup or m.ci_low is None or not m.ci_high:
            return None
        # a low end of 0 is a measured interval too wide to bound the slowdown (a few noisy pairs), not "not measured"
        return Change(1 / m.speedup, 1 / m.ci_high, 1 / m.ci_low if m.ci_low > 0 else math.inf, self.threshold)

    @property
    def exit_code(self) -> int:
        change = self.change
        if change is None:
            return 2
        return 1 if change.verdict == "slower" else 0

    @property
    def text(self) -> str:
        m, change = self.measured, self.change
        if change is None:
            return f"remeasured: not measured ({m.status}: {m.note})"
        return (f"remeasured step time: {m.baseline_ms:.4g} ms -> {m.candidate_ms:.4g} ms ({change_note(change)}; threshold "
                f"±{self.threshold:.0%}, 95% interval of {m.samples} interleaved pairs "
                f"{'of whole runs' if m.timed.startswith('run') else 'in one fresh process'}; {m.note})")


def run_remeasure(options: RemeasureOptions, progress: Callable[[str], None] = lambda text: None) -> RemeasureResult:
    """Raises DiffInputError naming the file when either is missing, or one is a model file and the other not."""
    kinds = {path: _is_model_file(path) for path in (options.old_file, options.new_file)}
    if len(set(kinds.values())) > 1:
        script = next(path for path, model in kinds.items() if not model)
        raise DiffInputError(f"{script}: not a model file (no {' or '.join(MODEL_FILE_NEEDS)}) while the other is: "
                             "--remeasure times two model files, or two scripts")
    if kinds[options.old_file] and options.script_args:
        raise DiffInputError(f"{options.old_file}: a model file takes no arguments ({' '.join(options.script_args)})")
    if not kinds[options.old_file]:
        return RemeasureResult(_remeasure_scripts(options, progress), options.threshold)
    workload = ModelFile(FixOptions(model_file=options.old_file, mode=options.mode, device=options.device,
                                    timeout=options.timeout, pairs=options.pairs),
                         RuleConfig.load([], [], []), progress)
    files = FileSession.start()
    try:
        measured = workload.measure(os.path.abspath(options.new_file), "remeasure", options.budget, None, False, [],
                                    files)
    finally:
        files.close()
    return RemeasureResult(measured, options.threshold)


def _remeasure_scripts(options: RemeasureOptions, progress: Callable[[str], None]) -> Verification:
    """Two scripts, each run as ``python FILE ARGS``: the old one's window of steps read by an ``advisor run`` of it
    (an experiment: its writes go to a shadow), then whole runs of each, alternating, that window timed."""
    import sys
    import tempfile

    from advisor.commands.run import RunOptions, run_script
    from advisor.verify.arms import RunsInterrupted, RunVerifier

    rules = RuleConfig.load([], [], [])
    old = [sys.executable, os.path.abspath(options.old_file), *options.script_args]
    with tempfile.TemporaryDirectory(prefix="advisor-remeasure-") as scratch:  # the report is not kept: only its window
        audited = run_script(RunOptions(command=tuple(old), out_dir=scratch, timeout=options.timeout, verify=False,
                                        experiment=True), progress, rules)
    if audited.run_window is None:
        return Verification(status="skipped", note=f"the run of {options.old_file} gave no window of steps to time")
    files = FileSession.start()
    try:
        verifier = RunVerifier(old, audited.run_window, rules.ruleset, options.budget, options.timeout, files=files,
                               progress=progress, pairs=options.pairs, timing_only=True,
                               candidate_command=[sys.executable, os.path.abspath(options.new_file),
                                                  *options.script_args])
        return verifier.measure([], options.budget)
    except RunsInterrupted as stopped:
        return Verification(status="skipped", note=f"interrupted ({stopped.stopped_by})")
    finally:
        files.close()


def _is_model_file(path: str) -> bool:
    if not os.path.isfile(path):
        raise DiffInputError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
    except (OSError, SyntaxError, UnicodeDecodeError) as bad:
        raise DiffInputError(f"{path}: cannot be read as Python ({bad})") from None
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return all(name in defined for name in MODEL_FILE_NEEDS)
