"""advisor run's numerics check across runs of the script: pure logic over recorded first results."""

from __future__ import annotations

import torch

from advisor.rulekit.engine import load_rules
from advisor.run.window_spec import WindowSpec
from advisor.verify.arms import Arm, RunVerifier


def _results(loss: float, gradient: float) -> dict:
    return {"losses": [torch.tensor(loss, dtype=torch.float64)], "gradients": [torch.full((3,), gradient)],
            "outputs": []}


def _arm(*results: dict) -> Arm:
    arm = Arm()
    for recorded in results:
        arm.add({"samples_ms": [1.0]}, recorded)
    return arm


def _verifier() -> RunVerifier:
    return RunVerifier(command=[], window=WindowSpec(steps=20), ruleset=load_rules(), budget_s=10, timeout=10)


def test_equal_first_results_pass_and_say_what_was_compared():
    failed, fields = _verifier()._numerics(_arm(_results(2.0, 0.5), _results(2.0, 0.5)), _arm(_results(2.0, 0.5)),
                                           1e-4, loader_only=False)
    assert failed is None and fields["max_rel_error"] == 0.0 and "losses of the first backward calls" in fields["note"]


def test_results_beyond_the_tolerance_fail():
    failed, _ = _verifier()._numerics(_arm(_results(2.0, 0.5), _results(2.0, 0.5)), _arm(_results(2.0, 0.9)),
                                      1e-4, loader_only=False)
    assert failed is not None and failed.status == "numerics-failed" and "more than the 0.0001 allowed" in failed.note


def test_a_script_that_differs_run_to_run_is_not_judged():
    failed, fields = _verifier()._numerics(_arm(_results(2.0, 0.5), _results(2.1, 0.5)), _arm(_results(9.0, 9.0)),
                                           1e-4, loader_only=False)
    assert failed is None and fields["note"].startswith("numerics not checked: two runs without the fix already differ")


def test_loader_fixes_leave_the_step_alone_and_inference_compares_outputs():
    failed, fields = _verifier()._numerics(_arm(), _arm(), 1e-4, loader_only=True)
    assert failed is None and "only the loader's settings differ" in fields["note"]
    outputs = {"losses": [], "gradients": [], "outputs": [torch.ones(2, 2)]}
    changed = {"losses": [], "gradients": [], "outputs": [torch.ones(2, 2) * 1.5]}
    failed, _ = _verifier()._numerics(_arm(outputs, outputs), _arm(changed), 1e-4, loader_only=False)
    assert failed is not None and "the model's first outputs differ by 0.5 of their magnitude" in failed.note


def test_runs_in_a_reduced_precision_are_judged_at_its_rounding():
    bf16 = {**_results(2.0, 0.5), "precision": "bfloat16"}
    close = {**_results(2.0, 0.501), "precision": "bfloat16"}
    failed, fields = _verifier()._numerics(_arm(bf16, bf16), _arm(close), 1e-4, loader_only=False)
    assert failed is None and fields["tolerance"] == 1e-2 and "computes in bfloat16" in fields["note"]
    failed, _ = _verifier()._numerics(_arm(_results(2.0, 0.5), _results(2.0, 0.5)), _arm(_results(2.0, 0.501)),
                                      1e-4, loader_only=False)
    assert failed is not None  # float32: the fix's own tolerance
