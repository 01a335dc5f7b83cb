"""tensor-loop: a Python loop over parameters found at the loop, from the trace and the source's loops; a loop
over time steps, the optimizer's own work and loops of operators with no foreach form are not it."""

from __future__ import annotations

import pytest

from advisor.rulekit.loops import enclosing_loop
from conftest import SAMPLES, check_rule, line_of
from devkit.saved_evidence import saved_evidence


def test_the_momentum_update_is_found_at_its_loop_with_its_body_and_the_foreach_form():
    path = SAMPLES / "momentum_encoder.py"
    [finding] = check_rule("tensor-loop", saved_evidence("momentum_encoder"))
    loop, body = line_of(path, "for param_q, param_k in zip("), line_of(path, "param_k.data = param_k.data")
    assert [(loc.line, loc.note) for loc in finding.locations] == [(loop, "the loop"), (body, "its body's torch calls")]
    assert finding.evidence["operators"] == ["add", "mul"] and finding.evidence["tensor_shapes"] >= 2
    assert finding.evidence["calls_per_step"] == 88  # 22 pairs: two products, a sum, each a call
    assert "torch._foreach_lerp_" in finding.fix.summary and 0.05 <= finding.impact <= 1


def test_torch_versions_of_foreach_are_read_from_the_run_and_an_unknown_operator_stands_it_down():
    evidence = saved_evidence("momentum_encoder")
    without_mul = [name for name in ("add", "lerp", "zero") if name != "mul"]
    changed = evidence.model_copy(update={"env": evidence.env.model_copy(update={"foreach_operators": without_mul})})
    assert check_rule("tensor-loop", changed) == []  # mul has no foreach form in that torch: nothing to advise


@pytest.mark.parametrize("sample", ["recurrent_cell", "kernel_storm", "per_tensor_adam"])
def test_loops_over_time_steps_and_optimizers_own_loops_are_not_it(sample):
    assert check_rule("tensor-loop", saved_evidence(sample)) == []


def test_a_line_is_placed_in_its_innermost_loop_or_comprehension(tmp_path):
    source = tmp_path / "loops.py"
    source.write_text("import torch\n"
                      "for epoch in range(3):\n"
                      "    for p in params:\n"
                      "        p.mul_(0.9)\n"
                      "    norms = [g.norm() for g in grads]\n"
                      "x = 1\n", encoding="utf-8")
    path = str(source)
    assert enclosing_loop(path, 4) == 3 and enclosing_loop(path, 3) == 2 and enclosing_loop(path, 5) == 5
    assert enclosing_loop(path, 6) is None and enclosing_loop(str(tmp_path / "absent.py"), 4) is None


def test_the_fallback_foreach_operators_are_torch_2_13s():
    import torch

    from advisor.capture.env import foreach_operators
    from advisor.opnames import FOREACH_OPERATORS_TORCH_2_13

    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"the fallback is torch 2.13's list; this is torch {torch.__version__}")
    assert set(foreach_operators()) == FOREACH_OPERATORS_TORCH_2_13
