"""The rule engine: built-in pack, user rule folders, broken rules, settings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from advisor.rulekit.engine import check_disabled, load_rules, parse_settings, run_rules
from advisor.rulekit.rule import Layer, Severity
from advisor.rulekit.thresholds import SettingError
from conftest import SAMPLES

SECTIONS = ("What it detects", "Why it matters", "How to fix", "Example")

USER_RULE = '''
"""Step slower than a budget.

What it detects: a median step above the budget. Why it matters: latency SLOs.
How to fix: see the other findings. Example: n/a.
"""
from advisor.rulekit.rule import Finding, Layer, Severity, Threshold, rule

@rule(slug="step-budget", code="USR001", layer=Layer.APPLICATION, severity=Severity.LOW,
      thresholds={"budget_ms": Threshold(0.0, "largest acceptable median step", "ms")})
def check(ev, th):
    if ev.timing is not None and ev.timing.median_ms > th.budget_ms:
        yield Finding(message=f"median step {ev.timing.median_ms:.3f} ms > {th.budget_ms} ms")
'''


def _rule_dir(tmp_path, files: dict[str, str]):
    folder = tmp_path / "rules"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


def test_builtin_rules_are_documented_unique_and_load_cleanly():
    ruleset = load_rules()
    assert ruleset.problems == []
    assert ruleset.get("host-sync") is not None
    assert len({r.slug for r in ruleset.rules}) == len({r.code for r in ruleset.rules}) == len(ruleset.rules)
    for item in ruleset.rules:
        missing = [s for s in SECTIONS if s not in item.doc]
        assert not missing, f"{item.slug}: docstring lacks {missing}"
        for name in item.thresholds:
            assert re.fullmatch(r"[a-z_]+", name)


THRESHOLD_WORD = re.compile(r"``((?:min|max|high|medium|loop|short)_[a-z0-9_]+)``")


def test_docs_name_only_thresholds_that_exist_and_explain_lists_every_one():
    from click.testing import CliRunner

    from advisor.cli import cli

    for item in load_rules().rules:
        named = set(THRESHOLD_WORD.findall(item.doc))
        assert named <= set(item.thresholds), f"{item.slug}: the docs name {named - set(item.thresholds)}"
        shown = CliRunner().invoke(cli, ["rules", "explain", item.slug]).output
        for name, threshold in item.thresholds.items():  # the generated part of the docs
            assert f"  {name} = {threshold.default:g}" in shown and threshold.help in shown, (item.slug, name)


@pytest.mark.slow
def test_user_rule_folder_adds_rules_and_engine_fills_identity(sample_audit, tmp_path):
    ruleset = load_rules([str(_rule_dir(tmp_path, {"budget.py": USER_RULE}))])
    assert ruleset.problems == []
    findings, problems = run_rules(ruleset, sample_audit("clean_mlp").evidence)
    [finding] = [f for f in findings if f.slug == "step-budget"]
    assert (finding.code, finding.layer, finding.severity) == ("USR001", Layer.APPLICATION, Severity.LOW)
    assert finding.title == "Step slower than a budget" and problems == []
    high_budget = parse_settings(ruleset, ["step-budget.budget_ms=1e9"])
    assert not [f for f in run_rules(ruleset, sample_audit("clean_mlp").evidence, high_budget)[0]
                if f.slug == "step-budget"]


@pytest.mark.parametrize("name, text, expected", [
    ("syntax.py", "def broken(:\n", "SyntaxError"),
    ("badslug.py", USER_RULE.replace('slug="step-budget"', 'slug="Step Budget"'), "is not lower-case words"),
    ("badcode.py", USER_RULE.replace('code="USR001"', 'code="7"'), "is not like 'ADV101'"),
    ("signature.py", USER_RULE.replace("def check(ev, th):", "def check(ev):"), "exactly (ev, th)"),
    ("nodoc.py", USER_RULE.split('"""', 2)[2], "no docstring"),
    ("norule.py", "X = 1\n", "defines no rule"),
    ("clash.py", USER_RULE.replace('slug="step-budget"', 'slug="host-sync"'), "clashes with host-sync"),
])
def test_broken_rule_files_are_reported_by_name_and_skipped(tmp_path, name, text, expected):
    ruleset = load_rules([str(_rule_dir(tmp_path, {name: text, "budget.py": USER_RULE}))])
    [problem] = ruleset.problems
    assert problem.source.endswith(name) and expected in problem.message
    assert ruleset.get("step-budget") is not None and ruleset.get("host-sync") is not None


@pytest.mark.slow
def test_a_rule_that_raises_is_reported_and_the_others_still_run(sample_audit, tmp_path):
    raising = USER_RULE.replace('slug="step-budget", code="USR001"', 'slug="raises", code="USR002"').replace(
        "if ev.timing", "if 1 / 0 and ev.timing")
    ruleset = load_rules([str(_rule_dir(tmp_path, {"raises.py": raising}))])
    findings, problems = run_rules(ruleset, sample_audit("host_sync").evidence)
    assert [p.source for p in problems] == ["raises"] and "ZeroDivisionError" in problems[0].message
    assert any(f.slug == "host-sync" for f in findings)


def test_settings_are_validated():
    ruleset = load_rules()
    assert parse_settings(ruleset, ["host-sync.min_per_step=3"]) == {"host-sync": {"min_per_step": 3.0}}
    assert parse_settings(ruleset, ["non-contiguous.min_share=1"]) == {"non-contiguous": {"min_share": 1.0}}
    for bad, message in [("host-sync.min_per_step", "expected SLUG.THRESHOLD=VALUE"),
                         ("nope.x=1", "no rule named 'nope'"),
                         ("host-sync.nope=1", "has no threshold 'nope'"),
                         ("host-sync.min_per_step=lots", "is not a number"),
                         ("host-sync.min_per_step=-1", "a finite number of at least 0"),
                         ("host-sync.min_per_step=nan", "a finite number of at least 0"),
                         ("non-contiguous.min_share=20", "min_share is a share, between 0 and 1"),
                         ("severity.high_share=1.5", "high_share is a share, between 0 and 1")]:
        with pytest.raises(SettingError, match=re.escape(message)):
            parse_settings(ruleset, [bad])
    with pytest.raises(SettingError, match="no rule named or coded 'nope'"):
        check_disabled(ruleset, ["nope"])
    host_sync = ruleset.get("host-sync")
    assert check_disabled(ruleset, [host_sync.code]) == {"host-sync"} == check_disabled(ruleset, ["host-sync"])


@pytest.mark.slow
def test_cli_rules_list_explain_disable_and_extra_folder(tmp_path):
    folder = _rule_dir(tmp_path, {"budget.py": USER_RULE})
    listing = subprocess.run([sys.executable, "-m", "advisor", "rules", "--rules", str(folder)],
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0 and "ADV101  host-sync" in listing.stdout and "USR001  step-budget" in listing.stdout
    explained = subprocess.run([sys.executable, "-m", "advisor", "rules", "explain", "host-sync"],
                               capture_output=True, text=True, timeout=120)
    assert explained.returncode == 0 and "How to fix" in explained.stdout
    assert "min_per_step = 1 count" in explained.stdout
    unknown = subprocess.run([sys.executable, "-m", "advisor", "rules", "explain", "nope"],
                             capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "no rule named 'nope'" in unknown.stderr
    out = tmp_path / "out"
    audited = subprocess.run(
        [sys.executable, "-m", "advisor", "audit", str(SAMPLES / "host_sync.py"), "--out", str(out), "--quiet",
         "--rules", str(folder), "--disable", "host-sync", "--fail-on", "low", "--no-verify"],
        capture_output=True, text=True, timeout=300)
    report = json.loads((out / "host_sync.json").read_text())
    slugs = {finding["slug"] for finding in report["findings"]}
    assert "step-budget" in slugs and "host-sync" not in slugs  # (the sample's own lines name host-sync)
    assert {run["slug"]: run["status"] for run in report["rules"]}["host-sync"] == "disabled"
    assert audited.returncode == 1  # the user rule's LOW finding meets --fail-on low
    bad = subprocess.run([sys.executable, "-m", "advisor", "audit", str(SAMPLES / "host_sync.py"), "--out", str(out),
                          "--set", "host-sync.bogus=1", "--no-verify"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "has no threshold 'bogus'" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_a_checkout_run_without_its_install_audits_with_every_rule(tmp_path):
    # advisor's folder found on the path without the editable install's finder (the site folders added by hand,
    # without their .pth files): the rule pack lives inside the package, so nothing is missing. Every site folder
    # this interpreter reads: its dependencies may sit beside a venv (system site packages) or in the user's site.
    import advisor

    sites = [path for path in sys.path if os.path.basename(path) in ("site-packages", "dist-packages")]
    (tmp_path / "advisor").symlink_to(os.path.dirname(advisor.__file__), target_is_directory=True)
    program = (f"import sys; sys.path[:0] = {[str(tmp_path), *sites]!r}; "
               f"sys.argv = ['advisor', 'audit', {str(SAMPLES / 'host_sync.py')!r}, '--no-verify', '--format', "
               f"'json', '--out', {str(tmp_path / 'out')!r}]; from advisor.cli import main; main()")
    done = subprocess.run([sys.executable, "-S", "-c", program], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    (written,) = (tmp_path / "out").glob("*.json")
    report = json.loads(written.read_text())
    assert len(report["rules"]) == len(load_rules().rules) and report["rule_problems"] == []
    assert "host-sync" in {finding["slug"] for finding in report["findings"]}


def test_each_built_in_rule_sits_in_its_layers_folder():
    folders = {Layer.HARDWARE: "hardware", Layer.RUNTIME: "runtime", Layer.MODEL: "model",
               Layer.APPLICATION: "application"}
    misplaced = [rule.slug for rule in load_rules().rules
                 if f"{os.sep}advisor{os.sep}rules{os.sep}{folders[rule.layer]}{os.sep}" not in rule.source]
    assert misplaced == []
