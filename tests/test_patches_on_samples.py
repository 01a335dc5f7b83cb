"""``advisor fix``'s edits over every sample's saved evidence: each finding with a source form is planned against
the sample's own file, into code that compiles or with the reason it is not patched. Apart from the fixtures of
``test_patches.py``: it reads every sample's trace, the longest test of the fast tier, and a file of its own lets
the workers share the tier."""

from __future__ import annotations

from pathlib import Path

from advisor.patch.patch_plan import plan_patch
from advisor.rulekit.engine import load_rules

PATCHES = Path(__file__).parent / "data" / "patches"


def test_every_samples_source_fixable_finding_is_patched_into_code_that_compiles_or_says_why_not():
    """The rules over every sample's saved evidence, and each finding with a source form planned against the
    sample's own file: an edit whose patched file compiles, or no edit and the reason (never a guess)."""
    from advisor.rulekit.engine import run_rules
    from devkit.saved_evidence import recorded_samples, saved_evidence

    rules = load_rules()
    patched, refused = set(), {}
    for sample in recorded_samples():
        evidence = saved_evidence(sample)
        findings, _ = run_rules(rules, evidence)
        before = Path(evidence.target.model_file).read_text()
        plan = plan_patch(findings, rules, entry=evidence.target.model_file, root=str(PATCHES), unsafe=True)
        for finding in findings:
            edit = plan.edits.get(finding.id)
            if edit is None:
                continue
            if edit.status == "patched":
                patched.add((sample, finding.slug))
            else:
                assert edit.status == "not patched" and edit.reason, (sample, edit)
                refused[(sample, finding.slug)] = edit.reason
        for path, text in plan.texts().items():
            compile(text, path, "exec")  # the patched file is Python
        assert Path(evidence.target.model_file).read_text() == before
    assert {("anomaly_left_on", "anomaly-detection"), ("zero_grad_in_place", "zero-grad"),
            ("per_tensor_adam", "optimizer-foreach"), ("dataloader_workers", "dataloader-workers"),
            ("dataloader_workers", "dataloader-pin-memory"), ("kernel_storm", "kernel-storm"),
            ("conv_bias_bn", "channels-last"), ("oversubscribed_threads", "cpu-threads"),
            ("forgot_eval", "train-mode-inference"), ("empty_cache_step", "empty-cache"),
            ("gradcheck_left_in", "debug-apis"), ("non_contiguous", "non-contiguous"),
            ("manual_attention", "manual-attention"), ("momentum_encoder", "tensor-loop")} <= patched
    # a model the file takes from torch.nn (no forward of its own to put under autocast): no edit, and why
    assert "returns no instance of a class the file defines" in refused[("missing_amp", "missing-amp")]
