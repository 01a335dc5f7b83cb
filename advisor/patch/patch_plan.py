"""Which findings become edits of the user's source, and the patch they make: each finding's rule writes
its own edit (``@check.patch``), in order of expected gain; an edit that overlaps one already made, lands
in a library file, or finds no certain place is left out with the reason. Nothing here writes a file."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field

from advisor.patch.codemods import Change, NoEdit, Source
from advisor.patch.common_sites import Files
from advisor.patch.edits import applied, overlapping
from advisor.rulekit.engine import RuleSet
from advisor.rulekit.rule import Finding, SourceEdit, expected_gain
from advisor.sources import is_library_path


@dataclass
class PatchPlan:
    root: str  # the diff's paths are relative to this folder
    edits: dict[str, SourceEdit] = field(default_factory=dict)  # by finding id
    changes: dict[str, list[Change]] = field(default_factory=dict)  # the patched findings' changes, by finding id
    sources: dict[str, Source] = field(default_factory=dict)  # by path

    @property
    def patched(self) -> list[str]:
        return [finding_id for finding_id, edit in self.edits.items() if edit.status == "patched"]

    def texts(self, finding_ids: list[str] | None = None) -> dict[str, str]:
        """Each changed file's new text, with the changes of ``finding_ids`` (default: every patched one)."""
        chosen = [c for finding_id in (self.patched if finding_ids is None else finding_ids)
                  for c in self.changes.get(finding_id, [])]
        files = sorted({change.path for change in chosen})
        return {path: applied(self.sources[path], [c for c in chosen if c.path == path]) for path in files}

    def diff(self, finding_ids: list[str] | None = None) -> str:
        """The unified diff (``git apply``-able, paths relative to ``root``) of those findings' edits."""
        parts = []
        for path, text in self.texts(finding_ids).items():
            relative = os.path.relpath(path, self.root).replace(os.sep, "/")
            parts.append("".join(difflib.unified_diff(
                self.sources[path].text.splitlines(keepends=True), text.splitlines(keepends=True),
                fromfile=f"a/{relative}", tofile=f"b/{relative}")))
        return "".join(parts)


NO_PATCH = "no automatic rewrite: the rule's fix is advice, written in the report"
SLOWER_HERE = "slower_on_this_device"  # a finding's evidence: its edit would run slower on the audited device


def plan_patch(findings: list[Finding], ruleset: RuleSet, entry: str, root: str, unsafe: bool = False) -> PatchPlan:
    """Every finding whose rule has a source form, in order of expected gain (severity, then share)."""
    plan = PatchPlan(root=root)
    kept: list[Change] = []
    for finding in sorted(findings, key=expected_gain):
        rule = ruleset.get(finding.slug)
        spec = rule.patch_spec if rule is not None else None
        if spec is None:
            plan.edits[finding.id] = SourceEdit(status="not patched", what="", reason=NO_PATCH)
            continue
        if finding.evidence.get(SLOWER_HERE):
            plan.edits[finding.id] = SourceEdit(status="not patched", safe=spec.safe, what=spec.what, reason=(
                "this device would run the edit slower (measured here), so it is not offered: "
                "it applies where the finding's advice says"))
            continue
        if not spec.safe and not unsafe:
            plan.edits[finding.id] = SourceEdit(status="unsafe", safe=False, what=spec.what,
                                                reason="the edit changes results by design; made with --unsafe-fixes")
            continue
        try:
            changes = _changes(plan, spec.apply, finding, entry)
        except NoEdit as reason:
            plan.edits[finding.id] = SourceEdit(status="not patched", safe=spec.safe, what=spec.what, reason=str(reason))
            continue
        unsafe_why = next((change.unsafe for change in changes if change.unsafe), "")
        if unsafe_why and not unsafe:
            plan.edits[finding.id] = SourceEdit(status="unsafe", safe=False, what=spec.what,
                                                reason=f"{unsafe_why}; made with --unsafe-fixes")
            continue
        clash = next((other for change in changes if (other := overlapping(kept, change)) is not None), None)
        if clash is not None:
            plan.edits[finding.id] = SourceEdit(
                status="not patched", safe=spec.safe, what=spec.what,
                reason=f"it overlaps another edit ({clash.what}) at {os.path.basename(clash.path)}:{clash.lines[0]}")
            continue
        kept += changes
        plan.changes[finding.id] = changes
        first = changes[0]
        plan.edits[finding.id] = SourceEdit(status="patched", file=first.path, lines=first.lines,
                                            safe=spec.safe and not unsafe_why, what=spec.what or first.what)
        plan.edits[finding.id].diff = plan.diff([finding.id])
    return plan


def _changes(plan: PatchPlan, apply, finding: Finding, entry: str) -> list[Change]:
    paths = [loc.file for loc in finding.locations if loc.file]
    if paths and all(is_library_path(path) for path in paths):
        raise NoEdit(f"it points into a library ({paths[0]}), which advisor never patches")

    def source(path: str) -> Source:
        path = os.path.abspath(path)
        if is_library_path(path):
            raise NoEdit(f"{path} is a library file, which advisor never patches")
        if path not in plan.sources:
            if not os.path.isfile(path):
                raise NoEdit(f"{path} is not a file here")
            plan.sources[path] = Source.read(path)
        return plan.sources[path]

    for place in finding.locations:
        if place.file and place.code and not is_library_path(place.file):
            lines = source(place.file).text.splitlines()
            now = lines[place.line - 1].strip() if 0 < place.line <= len(lines) else ""
            if now != place.code.strip():
                raise NoEdit(f"{place.file}:{place.line} changed since the audit (it read {place.code.strip()!r}); "
                             "audit it again")
    changes = list(apply(Files(os.path.abspath(entry), source), finding) or [])
    if not changes:
        raise NoEdit("the rule found nothing to change in the source")
    folder = os.path.dirname(os.path.abspath(entry))
    for change in changes:
        if is_library_path(change.path):
            raise NoEdit(f"{change.path} is a library file, which advisor never patches")
        if os.path.relpath(os.path.abspath(change.path), folder).startswith(".."):
            raise NoEdit(f"{change.path} lies outside {folder}, the folder the re-audit copies, so an edit there "
                         "could not be checked; audit from a folder that holds both")
    return changes
