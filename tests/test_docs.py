"""What a newcomer reads: a short README with the two set-up commands and links that resolve, and the docs site
(docs/, mkdocs.yml) with a page per rule generated from the rule itself; nothing dated, nothing outside the
repository linked."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from advisor.rulekit.engine import load_rules
from advisor.rulekit.rule_page import rule_page, rules_index
from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = sorted((ROOT / "docs").rglob("*.md"))


def test_the_readme_is_short_and_gives_the_two_commands_a_newcomer_pastes():
    assert len(README.splitlines()) <= 200
    commands = re.findall(r"```bash\n(.*?)\n```", README, re.S)
    assert len(commands) == 2, commands
    audit, tests = commands
    assert "pip install" in audit and "advisor audit samples/" in audit
    assert "pip install -e '.[test]'" in tests and tests.endswith("python3 -m pytest -q")
    assert "python3 -m pytest -q" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")  # CI runs that command


def test_the_readmes_links_into_the_docs_resolve():
    links = re.findall(r"\]\((docs/[^)#]+)", README)
    assert links and all((ROOT / link).is_file() for link in links), [link for link in links if not (ROOT / link).is_file()]


@pytest.mark.parametrize("path", [ROOT / "README.md", *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_nothing_dated_and_nothing_outside_the_repository(path):
    text = path.read_text(encoding="utf-8")
    assert "../shared" not in text and "DESIGN.md" not in text
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "dated figures belong in bench/README.md"
    assert not re.search(r"\bissue \d+", text, re.I)


@pytest.mark.parametrize("rule", load_rules().rules, ids=lambda r: r.slug)
def test_every_rule_has_a_page_from_its_own_docs_thresholds_and_fix(rule):
    page = rule_page(rule)
    assert page.startswith(f"# {rule.code} {rule.slug}\n") and f"Layer: {rule.layer.value}" in page
    for section in ("## What it detects", "## Why it matters", "## How to fix", "## Fix and its safety"):
        assert section in page
    assert all(f"`{name}`" in page for name in rule.thresholds)
    if rule.patch_spec is not None:
        assert ("(safe:" if rule.patch_spec.safe else "--unsafe-fixes") in page
    assert f"[{rule.slug}]({rule.slug}.md)" in rules_index(load_rules().rules)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                    reason="the docs extra (mkdocs, mkdocs-material) is not installed")
def test_the_docs_site_builds_strictly_with_every_rules_page(tmp_path):
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-3000:]
    assert all((tmp_path / "rules" / rule.slug / "index.html").is_file() for rule in load_rules().rules)


@pytest.mark.slow
def test_the_readmes_output_is_what_its_command_prints(tmp_path):
    """The README runs `advisor audit samples/host_sync.py` and shows its output: the same model, mode and device,
    the same rules at the same lines (the timings are this machine's)."""
    import json
    import subprocess
    import sys

    block = README.split("## What the output looks like", 1)[1].split("```", 2)[1]
    shown_rules = set(re.findall(r"^\s+(?:HIGH|MEDIUM|LOW|INFO)\s+(ADV\d+ [a-z-]+):", block, re.M))
    shown_places = set(re.findall(r"^\s+at (samples/\S+:\d+)", block, re.M))
    done = subprocess.run([sys.executable, "-m", "advisor", "audit", str(ROOT / "samples" / "host_sync.py"), "--no-verify",
                           "--format", "json", "--out", str(tmp_path), "--quiet"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads((tmp_path / "host_sync.json").read_text())
    target = report["target"]
    assert block.split("\n", 2)[1].startswith(f"{target['model_class']} · {target['mode']} · {target['device']} · step")
    assert shown_rules == {f"{f['code']} {f['slug']}" for f in report["findings"]}
    assert shown_places == {f"samples/host_sync.py:{loc['line']}" for f in report["findings"] for loc in f["locations"]}


def test_the_changelogs_latest_version_is_the_one_advisor_prints():
    from advisor.version import __version__

    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d\d-\d\d$", changelog, re.M)
    assert "## [Unreleased]" in changelog and released and released[0] == __version__


@pytest.mark.parametrize("path", [ROOT / "README.md", *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_prose_paragraph_runs_over_eight_lines(path):
    """A paragraph longer than eight lines is not read; lists, tables and code blocks are not paragraphs."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    long = [paragraph.strip().splitlines()[0] for paragraph in re.split(r"\n\s*\n", text)
            if len(paragraph.strip().splitlines()) > 8
            and not re.match(r"\s*([|*#>-]|\d+\.)", paragraph)]
    assert long == []
