"""[tool.advisor] in pyproject.toml, the flags that win over it, and findings suppressed at their line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.assembly.suppression import suppress
from advisor.rulekit.config_file import find_config, table
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Finding, Layer, Location, Severity
from advisor.rulekit.rule_page import docs_site
from advisor.rulekit.thresholds import SettingError

TRACE = Path(__file__).parent / "data" / "evidence" / "host_sync.trace.json.gz"  # fires host-sync (ADV101), MEDIUM


def _pyproject(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_the_nearest_pyproject_with_a_tool_advisor_table_is_the_configuration(tmp_path):
    outer = _pyproject(tmp_path, '[tool.advisor]\nignore = ["gc-pauses"]\n')
    _pyproject(tmp_path / "pkg", '[project]\nname = "pkg"\n')  # nearer, but no [tool.advisor]: not advisor's
    (tmp_path / "pkg" / "deep").mkdir()
    assert find_config(str(tmp_path / "pkg" / "deep" / "model.py")) == str(outer)
    assert find_config("/") == ""
    assert table(str(outer)) == {"ignore": ["gc-pauses"]}
    bad = _pyproject(tmp_path / "bad", '[tool.advisor]\nignored = ["gc-pauses"]\n')
    with pytest.raises(SettingError, match=r"pyproject.toml: \[tool.advisor\] has no setting 'ignored'"):
        table(str(bad))


def test_a_training_callback_reads_its_scripts_configuration_with_no_command_line_beside_it(tmp_path):
    config = _pyproject(tmp_path / "project", '[tool.advisor]\nignore = ["ADV101"]\nextend-ignore = ["zero-grad"]\n'
                                               'set = { "host-sync.min_per_step" = 3 }\ndocs-url = "https://d.example"\n')
    script = tmp_path / "project" / "train" / "train.py"
    script.parent.mkdir()
    script.write_text("print('training')\n", encoding="utf-8")
    rules = RuleConfig.from_file(str(script))
    assert rules.config_file == str(config) and rules.configured_off == {"host-sync", "zero-grad"}
    assert rules.docs_url == "https://d.example" and rules.overrides["host-sync"]["min_per_step"] == 3
    bare = RuleConfig.from_file("<training>")  # run from no file (an interactive session): every rule
    assert bare.config_file == "" and bare.configured_off == set()


def test_select_and_ignore_take_codes_prefixes_and_slugs_and_refuse_what_names_nothing():
    everything = {rule.slug for rule in RuleConfig.load().ruleset.rules}
    fourteens = RuleConfig.load(select=["ADV14"])  # a code prefix: ADV140 to ADV149
    assert everything - fourteens.configured_off == {r.slug for r in fourteens.ruleset.rules if r.code[:5] == "ADV14"}
    assert len(everything - fourteens.configured_off) == 10
    assert RuleConfig.load(ignore=["ADV101", "gc-pauses"]).configured_off == {"host-sync", "gc-pauses"}
    with pytest.raises(SettingError, match="no rule named or coded 'ADV999'"):
        RuleConfig.load(ignore=["ADV999"], config_file="/p/pyproject.toml")


def _analyze(tmp_path: Path, *flags: str) -> tuple[int, dict]:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(TRACE), "--format", "json", "--out", str(out),
                           *flags], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    (written,) = out.glob("*.json")
    return done.returncode, json.loads(written.read_text())


def test_the_configuration_file_turns_rules_off_and_sets_the_gate_and_the_flags_win(tmp_path):
    config = _pyproject(tmp_path / "project", '[tool.advisor]\nignore = ["ADV101"]\nfail-on = "info"\n')
    code, report = _analyze(tmp_path, "--config", str(config))
    assert report["configuration"] == {"file": str(config), "turned_off": ["host-sync"], "docs_url": docs_site()}
    assert "host-sync" not in {f["slug"] for f in report["findings"]}
    off = {r["slug"]: r for r in report["rules"]}["host-sync"]
    assert off["status"] == "disabled" and off["why"] == f"{config} [tool.advisor]"
    # --ignore replaces the file's ignore: host-sync is back, and the file's fail-on (info) fails on it
    code, report = _analyze(tmp_path, "--config", str(config), "--ignore", "gc-pauses")
    assert "host-sync" in {f["slug"] for f in report["findings"]} and code == 1
    # --fail-on on the command line wins over the file's
    code, _ = _analyze(tmp_path, "--config", str(config), "--ignore", "gc-pauses", "--fail-on", "high")
    assert code == 0
    missing = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(TRACE), "--config",
                              str(tmp_path / "none.toml")], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "none.toml: no such configuration file" in missing.stderr


def _finding(path: Path, line: int, slug: str = "host-sync", code: str = "ADV101") -> Finding:
    return Finding(slug=slug, code=code, layer=Layer.APPLICATION, severity=Severity.MEDIUM, message="m",
                   locations=[Location(file=str(path), line=line)])


def test_a_noqa_naming_the_findings_code_or_slug_suppresses_it_there_and_a_bare_noqa_does_not(tmp_path):
    source = tmp_path / "train.py"
    source.write_text("loss.item()  # noqa: ADV101\nloss.item()  # noqa: host-sync, ADV110\n"
                      "loss.item()  # noqa\nloss.item()  # noqa: ADV110\n", encoding="utf-8")
    kept, suppressed = suppress([_finding(source, line) for line in (1, 2, 3, 4)])
    assert [s.line for s in suppressed] == [1, 2] and [f.locations[0].line for f in kept] == [3, 4]
    assert suppressed[0].by == "# noqa at train.py:1" and suppressed[0].finding.slug == "host-sync"


def test_per_file_ignores_suppress_a_rule_in_the_paths_they_name(tmp_path):
    (tmp_path / "scripts").mkdir()
    script, model = tmp_path / "scripts" / "eval.py", tmp_path / "model.py"
    for path in (script, model):
        path.write_text("loss.item()\n", encoding="utf-8")
    rules = RuleConfig.load(per_file_ignores=[("scripts/*.py", ("ADV101",))])
    kept, suppressed = suppress([_finding(script, 1), _finding(model, 1)], rules.per_file_ignores, str(tmp_path))
    assert [s.file for s in suppressed] == [str(script)] and suppressed[0].by == "per-file-ignores 'scripts/*.py'"
    assert [f.locations[0].file for f in kept] == [str(model)]


def test_sarif_fingerprints_follow_a_finding_across_a_line_move_and_stdout_takes_one_format(tmp_path):
    """The partial fingerprint is the finding's identity (its rule and the code at its places), not its line."""
    from advisor.evidence import TargetInfo
    from advisor.report.sarif import FINGERPRINT, render_sarif
    from advisor.report.schema import Report
    from advisor.rulekit.identity import assign_ids

    def fingerprint(line: int) -> str:
        finding = _finding(tmp_path / "train.py", line)
        finding.locations[0].code = "loss.item()"
        assign_ids([finding])
        report = Report(target=TargetInfo(model_file="train.py"), findings=[finding])
        [result] = json.loads(render_sarif(report))["runs"][0]["results"]
        return result["partialFingerprints"][FINGERPRINT]
    assert fingerprint(12) == fingerprint(40) and fingerprint(12).startswith("ADV101-")
    done = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(TRACE), "--out", "-", "--format", "sarif"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1) and json.loads(done.stdout)["version"] == "2.1.0"
    assert "host-sync" in done.stderr  # the summary, kept off the pipe
    refused = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(TRACE), "--out", "-", "--format",
                              "html,json"], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "prints one format" in refused.stderr


def test_sarif_links_each_rule_to_its_page_on_the_configured_docs_site(tmp_path, monkeypatch):
    """docs-url (or ADVISOR_DOCS_URL, which wins) makes each rule's helpUri its own page of the site; without a
    site the rule links the page its fix cites."""
    monkeypatch.delenv("ADVISOR_DOCS_URL", raising=False)

    def help_uris(*flags: str, **env: str) -> dict[str, str]:
        done = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(TRACE), "--out", "-", "--format",
                               "sarif", *flags], capture_output=True, text=True, timeout=300,
                              env={**__import__("os").environ, **env})
        assert done.returncode in (0, 1), done.stderr
        return {rule["name"]: rule.get("helpUri") for rule in json.loads(done.stdout)["runs"][0]["tool"]["driver"]["rules"]}

    config = _pyproject(tmp_path / "project", '[tool.advisor]\ndocs-url = "https://docs.example.org/advisor/"\n')
    assert help_uris("--config", str(config))["host-sync"] == "https://docs.example.org/advisor/rules/host-sync/"
    assert help_uris("--config", str(config), ADVISOR_DOCS_URL="https://mirror.example.org")["host-sync"] == \
        "https://mirror.example.org/rules/host-sync/"
    if not docs_site():  # the installed package publishes no Documentation URL: the fix's own reference
        assert help_uris()["host-sync"].startswith("https://pytorch.org/")
    bad = _pyproject(tmp_path / "bad", '[tool.advisor]\ndocs-url = 3\n')
    with pytest.raises(SettingError, match="docs-url is the address"):
        table(str(bad))


def test_a_noqa_naming_advisors_rules_that_suppresses_nothing_is_said(tmp_path):
    from advisor.assembly.suppression import unused

    source = tmp_path / "train.py"
    source.write_text("loss.item()  # noqa: ADV101\nx = 1  # noqa: zero-grad, E501\ny = 2  # noqa: E501\n",
                      encoding="utf-8")
    rules = RuleConfig.load().ruleset.rules
    _, suppressed = suppress([_finding(source, 1)])
    [left] = unused([str(source)], suppressed, rules)
    assert (left.line, left.names) == (2, ["zero-grad"])  # line 1 did its work; E501 is another linter's


def test_suppressed_findings_stay_in_the_json_and_show_when_asked(tmp_path):
    config = _pyproject(tmp_path / "project", '[tool.advisor]\nper-file-ignores = { "*host_sync.py" = ["ADV101"] }\n')
    code, report = _analyze(tmp_path, "--config", str(config))
    assert report["findings"] == [] and code == 0
    [kept] = report["suppressed"]
    assert kept["finding"]["slug"] == "host-sync" and kept["by"] == "per-file-ignores '*host_sync.py'"
    shown = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(TRACE), "--out", str(tmp_path / "o"),
                            "--config", str(config), "--show-suppressed"], capture_output=True, text=True, timeout=300)
    assert "suppressed ADV101 host-sync by per-file-ignores" in shown.stdout and "Suppressed (1" in shown.stdout
