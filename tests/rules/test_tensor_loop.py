"""tensor-loop: a Python loop over parameters found at the loop, from the trace and the source's loops; a loop
over time steps, the optimizer's own work and loops of operators with no foreach form are not it."""

from __future__ import annotations

import pytest

from advisor.rulekit.loops import enclosing_loop
from conftest import SAMPLES, check_rule, line_of
from devkit.saved_evidence import saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("tensor-loop")


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


LOOP_FORMS = {
    "assigned data": "k.data = k.data * m + q.data * (1.0 - m)",
    "terms and factors swapped": "k.data = (1 - m) * q.data + m * k.data",
    "copied in": "k.data.copy_(k.data * m + q.data * (1 - m))",
    "scaled and added in place": "k.mul_(m).add_(q, alpha=1 - m)",
    "interpolated": "k.lerp_(q, 1 - m)",
    "interpolated by keyword": "k.data.lerp_(q.data, weight=1 - m)",
    "a manual SGD step": "k.data -= lr * q.data",
    "added in place": "k.add_(q)",
    "scaled": "k.mul_(m)",
}


@pytest.mark.parametrize("form", sorted(LOOP_FORMS))
def test_each_update_loop_is_rewritten_as_foreach_calls_that_compute_the_same_tensors(tmp_path, form):
    """The patched function run beside the original on real tensors of several shapes: the same results, the
    loop gone."""
    import torch

    from advisor.patch.codemods import Source
    from advisor.patch.edits import applied
    from advisor.rules.model.tensor_loop.foreach_edit import foreach_changes

    path = tmp_path / "update.py"
    path.write_text("import torch\n\n\n"
                    "@torch.no_grad()\n"
                    "def update(queries, keys, m, lr=0.1):\n"
                    "    # the key encoder follows the query encoder\n"
                    "    for q, k in zip(queries, keys):\n"
                    f"        {LOOP_FORMS[form]}\n"
                    "    return keys\n", encoding="utf-8")
    source = Source.read(str(path))
    patched = applied(source, foreach_changes(source, 7))
    assert "\n    for q, k in" not in patched and "torch._foreach_" in patched
    assert "    # the key encoder follows the query encoder\n    pairs = [" in patched  # its comment kept

    def run(code: str) -> list:
        namespace: dict = {}
        exec(compile(code, str(path), "exec"), namespace)
        generator = torch.Generator().manual_seed(0)
        shapes = [(3, 4), (5,), (2, 2, 2)]
        queries = [torch.randn(shape, generator=generator) for shape in shapes]
        keys = [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in shapes]
        return namespace["update"](queries, keys, 0.9)
    for before, after in zip(run(path.read_text()), run(patched)):
        torch.testing.assert_close(after, before, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("body, why", [
    ("k.data = k.data * q.data + q.data", "not one tensor times one value"),
    ("k.mul_(q.norm())", "differs per tensor"),
    ("k = k * m + q * (1 - m)", "assigns to a name"),
    ("k.data.mul_(m)\n        k.data.add_(q.data)", "more than one update"),
    ("k.data = k.data * m + q.data * (1 - m)\n    print(k)", "read after it"),
    ("targets = 1\n        k.data.mul_(m)", "more than one update"),
    ("k.clamp_(min=0)", "no foreach form"),
])
def test_a_loop_advisor_cannot_rewrite_with_certainty_is_left_with_the_reason(tmp_path, body, why):
    from advisor.patch.codemods import NoEdit, Source
    from advisor.rules.model.tensor_loop.foreach_edit import foreach_changes

    path = tmp_path / "update.py"
    path.write_text("def update(queries, keys, m):\n"
                    "    for q, k in zip(queries, keys):\n"
                    f"        {body}\n", encoding="utf-8")
    with pytest.raises(NoEdit, match=why):
        foreach_changes(Source.read(str(path)), 2)


def test_the_new_names_are_not_taken_from_the_function(tmp_path):
    from advisor.patch.codemods import NoEdit, Source
    from advisor.rules.model.tensor_loop.foreach_edit import foreach_changes

    path = tmp_path / "update.py"
    path.write_text("def update(queries, keys, m):\n"
                    "    pairs = 3\n"
                    "    for q, k in zip(queries, keys):\n"
                    "        k.mul_(m)\n"
                    "    return pairs\n", encoding="utf-8")
    with pytest.raises(NoEdit, match="already uses the name"):
        foreach_changes(Source.read(str(path)), 3)


def test_the_loop_is_measured_as_its_patch_where_the_entry_point_runs_a_patched_copy():
    """advisor audit and advisor fix measure a patched copy; a script's run (or the Python API) says why not."""
    from advisor.rulekit.engine import load_rules, run_rules
    from advisor.verify.plan import plan_verification

    rules = load_rules()
    findings, _ = run_rules(rules, saved_evidence("momentum_encoder"))
    loop = [f for f in findings if f.slug == "tensor-loop"]
    assert rules.get("tensor-loop").patch_measured and not rules.get("kernel-storm").patch_measured
    measured, _ = plan_verification(loop, rules, "cpu", patches=True)
    assert measured == loop
    measured, decided = plan_verification(loop, rules, "cpu")
    assert measured == [] and "advisor fix writes and measures it" in decided.results[loop[0].id].note


@pytest.mark.slow
def test_the_audit_verifies_the_loops_patch_on_a_copy_of_the_source_and_leaves_the_users_file(tmp_path):
    import shutil

    from conftest import audit

    shutil.copy(SAMPLES / "momentum_encoder.py", tmp_path)
    before = (tmp_path / "momentum_encoder.py").read_text()
    result = audit(tmp_path / "momentum_encoder.py", tmp_path / "reports", verify=True, pairs=6,
                   disabled=("kernel-storm", "optimizer-foreach"))
    [finding] = [f for f in result.report.findings if f.slug == "tensor-loop"]
    v = finding.verification
    assert v.source_patch and v.samples == 6 and v.speedup is not None, v
    assert v.status not in ("fix-failed", "numerics-failed") and v.max_rel_error <= v.tolerance == 1e-5
    assert (tmp_path / "momentum_encoder.py").read_text() == before
    assert result.report.verification.combined in (None, v)  # a patch is not measured with the runtime fixes
    assert ("tensor-loop" in result.report.verification.apart) == (v.status == "verified")


def test_a_fix_measured_as_its_patch_is_said_apart_from_the_runtime_fixes_together():
    from advisor.rulekit.rule import Finding, Verification
    from advisor.verify.orchestrate import measure_fixes

    findings = [Finding(id="loop", slug="tensor-loop", message="a loop"),
                Finding(id="storm", slug="kernel-storm", message="a storm")]

    def measured(chosen, seconds):  # what each side's measurement gave: the orchestration decides the rest
        return Verification(status="verified", speedup=1.2, ci_low=1.1, ci_high=1.3,
                            source_patch=chosen[0].slug == "tensor-loop")
    fixes = measure_fixes(findings, measured, None, joins=lambda outcome: not outcome.source_patch)
    assert fixes.apart == ["tensor-loop"] and fixes.combined is fixes.results["storm"]
