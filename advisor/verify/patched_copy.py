"""A scratch copy of the model's folder with some findings' edits written into it, and the patched model measured
against the original in a verification child: how ``advisor fix`` measures each edit, and how ``advisor audit``
verifies a rule whose fix exists only as an edit of the source (``Rule.patch_measured``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Callable

from advisor.files.session import FileSession
from advisor.patch.patch_plan import PatchPlan
from advisor.rulekit.rule import Finding, Rule, Verification
from advisor.sandbox.specs import VerifySpec
from advisor.sandbox.supervisor import run_capture

SKIPPED_DIRS = {".git", "__pycache__", "reports", ".venv", "venv", "node_modules", ".mypy_cache", ".pytest_cache"}


def patch_tolerance(rule: Rule, finding: Finding) -> float:
    """What the patched source may change: the runtime fix's tolerance, else the patch's own."""
    if rule.fix_spec is not None and rule.fix_spec.apply is not None:
        return rule.fix_spec.tolerance_for(finding)
    return rule.patch_spec.tolerance if rule.patch_spec is not None else 1e-5


def measure_patched_model(spec: VerifySpec, patched: str, label: str, timeout: float, files: FileSession,
                          progress: Callable[[str], None]) -> Verification:
    """The patched copy against the model file ``spec`` names (numerics within ``spec.tolerance``, then the
    interleaved timing of the step), in a verification child whose writes go to a shadow of the user's files."""
    from advisor.verify.stage import VERIFY_PATCH

    environment, arm = files.shadow_environment()
    began = time.monotonic()
    try:
        outcome = run_capture(spec.model_copy(update={"patched_model_file": patched}), timeout, VERIFY_PATCH,
                              lambda text: progress(f"patch: {text}"), environment=environment, scratch_in=arm)
    finally:
        files.finish_run(arm, f"patched source: {label}", time.monotonic() - began, None, "")
    text = outcome.result("verify-patch")
    if text is None:
        failure = next(iter(outcome.errors), None)
        # the fix command says "the patched source did not run: " before the note, as for a failure the child reports
        return Verification(status="fix-failed", note=failure.message if failure else "no result and no error")
    return Verification.model_validate_json(text).model_copy(update={"source_patch": True})


class patched_copy:
    """A scratch copy of the model's folder (its Python files copied, everything else linked) with the
    given findings' edits written into it; removed on exit. The user's files are only read."""

    def __init__(self, plan: PatchPlan, finding_ids: list[str], model_file: str):
        self.plan, self.finding_ids, self.model_file = plan, finding_ids, model_file

    def __enter__(self) -> str:
        folder = os.path.dirname(self.model_file)
        self.scratch = tempfile.mkdtemp(prefix="advisor-fix-")
        copy = os.path.join(self.scratch, os.path.basename(folder) or "model")
        mirror(folder, copy)
        for path, text in self.plan.texts(self.finding_ids).items():
            target = os.path.join(copy, os.path.relpath(path, folder))  # inside: plan_patch refuses the rest
            if os.path.islink(target):
                os.unlink(target)
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)
        return os.path.join(copy, os.path.basename(self.model_file))

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


MAX_MIRRORED = 20_000  # entries: a model file in a home folder is not copied whole


def mirror(source: str, copy: str, count: list | None = None) -> None:
    count = count if count is not None else [0]
    os.makedirs(copy)
    for entry in os.scandir(source):
        count[0] += 1
        if count[0] > MAX_MIRRORED:
            raise ValueError(f"the model's folder {source} holds more than {MAX_MIRRORED} entries, too many to copy "
                             "for the re-audit; move the model file into its project's folder")
        if entry.name in SKIPPED_DIRS:
            continue
        target = os.path.join(copy, entry.name)
        if entry.is_dir(follow_symlinks=False):
            mirror(entry.path, target, count)
        elif entry.name.endswith(".py"):
            shutil.copy2(entry.path, target)
        else:
            os.symlink(entry.path, target)  # data the model reads; the run's writes go to the experiment's shadow
