"""The verification stage of the supervised child: each finding's fix measured on fresh copies of the
loaded model (``copies.py``), after the capture's load stage."""

from __future__ import annotations

from typing import Callable

from advisor.sandbox.registry import StagePlan, stage
from advisor.sandbox.specs import VerifySpec

VERIFY = StagePlan(modules=("advisor.capture.stages", "advisor.verify.stage"), stages=("load", "verify"))


@stage("verify")
def _verify(state: dict, progress: Callable[[str], None]) -> str:
    """The findings' fixes applied together, as one candidate, against the baseline."""
    from advisor.rulekit.engine import load_rules
    from advisor.verify.copies import Budget, verify_one

    spec: VerifySpec = state["spec"]
    ruleset = load_rules(spec.rule_dirs)
    findings = spec.verify
    fixes = [(finding, ruleset.get(finding.slug).fix_spec) for finding in findings]
    label = findings[0].slug if len(findings) == 1 else "all fixes"
    return verify_one(state["target"], fixes, Budget(spec.budget_s), progress, label, spec.pairs).model_dump_json()


VERIFY_PATCH = StagePlan(modules=("advisor.capture.stages", "advisor.verify.stage"),
                         stages=("process-flags", "load", "verify-patch"))


@stage("process-flags", before_load=True)
def _process_flags(state: dict, progress: Callable[[str], None]) -> str:
    """The library flags before any user file is imported: what the patched file starts from, where it no
    longer sets what the original set at its top (anomaly mode, threads)."""
    from advisor.verify.copies import process_flags

    state["flags_before_user_code"] = process_flags()
    return ""


@stage("verify-patch")
def _verify_patch(state: dict, progress: Callable[[str], None]) -> str:
    """The patched copy of the model file (``advisor fix``) against the original, as a fix's candidate is:
    numerics, then interleaved timing of the step."""
    from advisor.verify.copies import Budget, verify_patched

    spec: VerifySpec = state["spec"]
    return verify_patched(state["target"], spec.patched_model_file, spec.tolerance, Budget(spec.budget_s),
                          progress, spec.pairs, spec.fetch_deadline_s, spec.through_loader,
                          state.get("flags_before_user_code")).model_dump_json()
