"""The verification stage of the supervised child: each finding's fix measured on fresh copies of the
loaded model (``copies.py``), after the capture's load stage."""

from __future__ import annotations

from typing import Callable

from advisor.sandbox.registry import StagePlan, stage

VERIFY = StagePlan(modules=("advisor.capture.stages", "advisor.verify.stage"), stages=("load", "verify"))


@stage("verify")
def _verify(state: dict, progress: Callable[[str], None]) -> str:
    from advisor.rulekit.engine import load_rules
    from advisor.rulekit.rule import Finding
    from advisor.verify.copies import verify_all

    spec = state["spec"]
    ruleset = load_rules(spec.get("rule_dirs", []))
    findings = [Finding.model_validate(item) for item in spec["verify"]]
    measured = verify_all(state["target"], ruleset, findings, spec["budget_s"], progress,
                          together=spec.get("together", False))
    return measured.model_dump_json()
