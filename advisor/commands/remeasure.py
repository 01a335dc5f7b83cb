"""``advisor diff --remeasure OLD NEW``: two revisions of a model file timed against each other, to settle a
diff whose step time was within noise. The measurement is ``advisor fix``'s of a patched copy (``ModelFile``):
one fresh child loads both files, warms both steps up and times them in interleaved pairs, each on its own
fresh copy of the model, its writes in a shadow; only the outputs are not compared (two revisions may compute
different things by design). The verdict is the diff's: the ratio NEW/OLD with its 95% interval against the
threshold."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Callable

from advisor.commands.fix import FixOptions, ModelFile
from advisor.files.session import FileSession
from advisor.report.compare import Change, DiffInputError, said
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Verification

MODEL_FILE_NEEDS = ("get_model", "get_inputs")


@dataclass(kw_only=True)
class RemeasureOptions:
    old_file: str
    new_file: str
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
        if m.speedup is None or not m.ci_low or not m.ci_high:
            return None
        return Change(1 / m.speedup, 1 / m.ci_high, 1 / m.ci_low, self.threshold)

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
        return (f"remeasured step time: {m.baseline_ms:.4g} ms -> {m.candidate_ms:.4g} ms ({said(change)}; threshold "
                f"±{self.threshold:.0%}, 95% interval of {m.samples} interleaved pairs in one fresh process; {m.note})")


def run_remeasure(options: RemeasureOptions, progress: Callable[[str], None] = lambda text: None) -> RemeasureResult:
    """Raises DiffInputError naming the file when either is missing or is not a model file."""
    for path in (options.old_file, options.new_file):
        _check_model_file(path)
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


def _check_model_file(path: str) -> None:
    if not os.path.isfile(path):
        raise DiffInputError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
    except (OSError, SyntaxError, UnicodeDecodeError) as bad:
        raise DiffInputError(f"{path}: cannot be read as Python ({bad})") from None
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = [name for name in MODEL_FILE_NEEDS if name not in defined]
    if missing:
        raise DiffInputError(f"{path}: not a model file (no {' or '.join(missing)}); --remeasure times two model "
                             "files, not scripts: compare two `advisor run` reports of a script with diff")
