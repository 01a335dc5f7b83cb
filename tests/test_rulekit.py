"""What makes the next rule easy: its documentation parsed and checked, the evidence it needs declared (a silent
rule says why), the margin it reports when silent, its Example written once, and a scaffold that writes a new
rule with its positive and negative samples, which the tests collect by their ``# expect`` annotations."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from advisor.evidence import Evidence, TargetInfo
from advisor.rulekit.docs import parse_doc
from advisor.rulekit.engine import RuleConfig, load_rules
from advisor.rulekit.rule import RuleDefinitionError
from advisor.rulekit.scaffold import scaffold
from conftest import audit, write_model
from devkit.saved_evidence import expected, saved_evidence


@pytest.mark.parametrize("rule", load_rules().rules, ids=lambda rule: rule.slug)
def test_every_rule_documents_what_why_how_and_an_example(rule):
    assert rule.docs.problems == [], f"{rule.source}: {rule.docs.problems}"


def test_a_findings_snippet_is_its_rules_example_unless_the_rule_writes_one_from_what_it_measured():
    [finding] = [f for f in RuleConfig.load().run(saved_evidence("zero_grad_in_place"))[0] if f.slug == "zero-grad"]
    example = load_rules().get("zero-grad").docs
    assert (finding.fix.before, finding.fix.after) == (example.before, example.after) != ("", "")
    [loader] = [f for f in RuleConfig.load().run(saved_evidence("audio_loader"))[0] if f.slug == "dataloader-workers"]
    assert "num_workers=0" in loader.fix.before  # written from the loader it measured, not the Example


def test_a_rule_without_the_evidence_it_needs_is_not_run_and_says_why():
    runs = []
    RuleConfig.load().run(Evidence(target=TargetInfo(model_file="m.py")), runs)
    by_slug = {run.slug: run for run in runs}
    assert by_slug["manual-attention"].status == "not run" and by_slug["manual-attention"].why == "no graph was captured"
    assert by_slug["cudnn-benchmark"].why.startswith("the run was not on a CUDA device")
    assert by_slug["zero-grad"].status == "silent"  # it reads the watched calls, which every run has
    assert len(runs) == len(load_rules().rules)


def test_a_silent_rule_reports_how_near_it_came():
    runs = []
    RuleConfig.load().run(saved_evidence("clean_mlp"), runs)
    [copies] = [run for run in runs if run.slug == "non-contiguous"]
    assert copies.status == "silent" and copies.margin is not None and copies.margin.value < copies.margin.threshold


def test_a_rule_naming_evidence_that_does_not_exist_is_refused_when_loaded(tmp_path):
    write_model(tmp_path, '''
        """Bad rule.

        What it detects: x
        """
        from advisor.rulekit.rule import Layer, rule

        @rule(slug="bad-needs", code="USR009", layer=Layer.MODEL, needs=("gpu-clock",))
        def check(ev, th):
            return iter(())
    ''', name="bad_needs.py")
    problems = load_rules([str(tmp_path)]).problems
    assert len(problems) == 1 and "needs names unknown evidence ['gpu-clock']" in problems[0].message
    with pytest.raises(RuleDefinitionError):
        spec = importlib.util.spec_from_file_location("bad_needs_direct", tmp_path / "bad_needs.py")
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_docs_are_parsed_into_their_sections():
    doc = parse_doc('''Title line.

    What it detects:
        a

    Why it matters:
        b

    How to fix:
        c

    Example:
        Before::

            x = 1

        After::

            x = 2
    ''')
    assert doc.title == "Title line" and doc.sections["How to fix"] == "c" and (doc.before, doc.after) == ("x = 1", "x = 2")
    assert parse_doc("Only a title.").problems[0] == "no 'What it detects' section"


def test_a_scaffolded_rule_loads_documented_and_its_samples_say_what_they_expect(tmp_path):
    rule_file, positive, negative = scaffold("slow-cumsum", "USR042", "model", str(tmp_path))
    ruleset = load_rules([str(tmp_path)])
    rule = ruleset.get("slow-cumsum")
    assert ruleset.problems == [] and rule is not None and rule.code == "USR042" and rule.docs.problems == []
    assert rule.needs == ("graph",) and "min_calls" in rule.thresholds
    assert set(expected(Path(positive)).lines) == {"slow-cumsum"}
    assert expected(Path(negative)).nothing
    with pytest.raises(FileExistsError):
        scaffold("slow-cumsum", "USR042", "model", str(tmp_path))


@pytest.mark.slow
def test_a_scaffolded_rule_fires_on_its_positive_sample_at_its_line_and_not_on_its_negative(tmp_path):
    _, positive, negative = scaffold("slow-cumsum", "USR042", "model", str(tmp_path / "rules"))
    fired = audit(Path(positive), tmp_path / "out", rule_dirs=(str(tmp_path / "rules"),)).report.findings
    [finding] = [f for f in fired if f.slug == "slow-cumsum"]
    assert {loc.line for loc in finding.locations} == expected(Path(positive)).lines["slow-cumsum"]
    quiet = audit(Path(negative), tmp_path / "out2", rule_dirs=(str(tmp_path / "rules"),)).report.findings
    assert "slow-cumsum" not in {f.slug for f in quiet}
