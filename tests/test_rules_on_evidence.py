"""The saved evidence of real audits (tests/data/evidence) as a whole: every sample recorded and saying what it
expects, every rule with a file of its own cases (tests/rules/, each replaying the samples' evidence) and a positive
and a negative case somewhere.

The evidence was recorded by real audits of the bundled samples (``tests/record_evidence.py``); the rules run over
exactly those measurements, so each verdict is fixed and no test depends on this machine's speed or instruction
set. GPU-only rules are checked on the same evidence recorded as if it came from a CUDA device, and the trace
rules also on the real GPU traces in ../shared (tests/test_analyze.py, tests/test_kineto.py).
"""

from __future__ import annotations

from pathlib import Path

from advisor.rulekit.engine import RuleConfig, load_rules
from devkit.saved_evidence import annotated_samples, annotated_scripts, as_cuda, expected, recorded_samples, saved_evidence

RULES = RuleConfig.load()

# what each sample must make advisor say, written in the sample itself (``# expect: slug`` at its line)
EXPECTED = annotated_samples()
HEALTHY = tuple(sample for sample, expect in EXPECTED.items() if expect.nothing and not expect.on_cuda)


def findings(evidence):
    return RULES.run(evidence)[0]


def fired(evidence) -> set[str]:
    return {f.slug for f in findings(evidence)}


def only(evidence, slug: str):
    found = [f for f in findings(evidence) if f.slug == slug]
    assert len(found) == 1, [f.slug for f in findings(evidence)]
    return found[0]


def test_every_sample_has_saved_evidence_and_says_what_it_expects():
    assert set(recorded_samples()) == set(EXPECTED)
    silent = [sample for sample, expect in EXPECTED.items() if not (expect.fires or expect.nothing or expect.on_cuda)]
    assert silent == [], "a sample says neither '# expect: slug' nor '# expect nothing'"


def test_an_expectation_bounded_to_earlier_releases_is_not_held_against_later_ones(tmp_path):
    sample = tmp_path / "bounded.py"
    sample.write_text("x = 1  # expect: host-sync\n# expect anywhere before torch 2.14: graph-breaks\n", encoding="utf-8")
    expect = expected(sample)
    assert expect.fires_with("2.13.0+cpu") == {"host-sync", "graph-breaks"} == expect.fires
    assert expect.fires_with("2.14.1+cu130") == expect.fires_with("3.0.0") == {"host-sync"}


def test_every_built_in_rule_has_its_own_test_file():
    """Each rule's positive and negative cases in tests/rules/test_<its module>.py, beginning with the samples'
    saved evidence replayed (tests/rules/evidence_cases.py: each sample fires exactly the rules it expects)."""
    folder = Path(__file__).parent / "rules"
    missing = []
    for rule in load_rules().rules:
        source = Path(rule.source)
        module = source.parent.name if source.name == "__init__.py" else source.stem
        text = (folder / f"test_{module}.py").read_text(encoding="utf-8") if (folder / f"test_{module}.py").exists() else ""
        if f'replayed("{rule.slug}")' not in text:
            missing.append(rule.slug)
    assert missing == []


def test_every_rule_has_a_positive_and_a_negative_case():
    from test_analyze import SHARED_TRACE_POSITIVES
    from test_hardware_rules import RECORDED_POSITIVES
    from test_step_log import RECORDED_RUN_POSITIVES, REPLAYED_POSITIVES

    positives = set().union(*(e.fires | e.on_cuda for e in EXPECTED.values()),
                            *(e.under_torchrun for e in annotated_scripts().values()),
                            *SHARED_TRACE_POSITIVES.values(), RECORDED_POSITIVES, RECORDED_RUN_POSITIVES,
                            REPLAYED_POSITIVES)
    slugs = {rule.slug for rule in load_rules().rules}
    assert slugs <= positives, f"rules with no positive fixture: {sorted(slugs - positives)}"
    assert HEALTHY, "no sample is the negative control of every rule ('# expect nothing')"


def test_findings_carry_ids_numbers_and_fixes():
    for sample, slug in [("non_contiguous", "non-contiguous"), ("kernel_storm", "kernel-storm"),
                         ("missing_amp", "missing-amp"), ("dataloader_workers", "dataloader-workers")]:
        finding = only(saved_evidence(sample), slug)
        assert finding.id.startswith(finding.code) and any(ch.isdigit() for ch in finding.message)
        assert finding.impact is not None and 0 < finding.impact <= 1
        assert finding.fix is not None and finding.fix.summary and finding.fix.docs
    again = findings(saved_evidence("host_sync"))
    assert [f.id for f in again] == [f.id for f in findings(saved_evidence("host_sync"))]
    assert len({f.id for f in again}) == len(again)


# ---- device-aware rules: the same evidence, recorded as if on a GPU ------------------------------

def test_gpu_library_flags_are_silent_on_cpu_and_reported_on_a_gpu():
    evidence = saved_evidence("gpu_flags")
    assert not fired(evidence) & {"cudnn-benchmark", "tf32-disabled", "deterministic-algorithms"}
    on_gpu = fired(as_cuda(evidence))
    assert {"cudnn-benchmark", "tf32-disabled", "deterministic-algorithms"} <= on_gpu, on_gpu
    tuned = as_cuda(evidence, cudnn_benchmark=True, deterministic_algorithms=False, cudnn_deterministic=False,
                    tf32_matmul=True, float32_matmul_precision="high")
    assert not fired(tuned) & {"cudnn-benchmark", "tf32-disabled", "deterministic-algorithms"}
    assert "tf32-disabled" not in fired(as_cuda(evidence, gpu_capability=(7, 0)))  # no TF32 before Ampere
    assert "cudnn-benchmark" not in fired(as_cuda(saved_evidence("clean_mlp"), cudnn_benchmark=False))  # no convs
