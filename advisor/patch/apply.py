"""``advisor fix --apply``: the held edits written into the user's files, and only then: after the
re-audit held them, into files unchanged since the audit read them, each original kept beside it as
``<file>.advisor-orig`` (restore it by moving it back). Every file is checked before any is written."""

from __future__ import annotations

import os
import shutil

from advisor.patch.patch_plan import PatchPlan

BACKUP_SUFFIX = ".advisor-orig"


class ApplyRefused(ValueError):
    """Why no file was written."""


def apply_patch(plan: PatchPlan) -> list[str]:
    """Write the held edits; returns the files changed. Raises ApplyRefused (nothing written)."""
    texts = plan.texts(plan.patched)
    if not texts:
        raise ApplyRefused("no edit held after the re-audit, so there is nothing to apply")
    for path in texts:
        with open(path, encoding="utf-8") as handle:
            if handle.read() != plan.sources[path].text:
                raise ApplyRefused(f"{path} changed since the audit read it; run advisor fix again")
        if not os.access(path, os.W_OK) or not os.access(os.path.dirname(path) or ".", os.W_OK):
            raise ApplyRefused(f"{path} (or its folder, for the backup) is read-only")
        if os.path.exists(path + BACKUP_SUFFIX):
            raise ApplyRefused(f"{path + BACKUP_SUFFIX} exists already (an earlier fix's backup): move it away first")
    for path, text in texts.items():
        shutil.copy2(path, path + BACKUP_SUFFIX)
        partial = path + ".advisor-new"
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(text)
        shutil.copymode(path, partial)
        os.replace(partial, path)  # never a half-written source file
    return sorted(texts)
