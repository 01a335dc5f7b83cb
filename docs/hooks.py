"""MkDocs hook: a page per rule (and the rules' index), written at build time from the rules themselves
(``advisor.rulekit.rule_page``), so the site never repeats a rule's docstring by hand; each page is in the
navigation under Rules, by code."""

from __future__ import annotations

from mkdocs.structure.files import File


def _rules():
    from advisor.rulekit.engine import load_rules

    return sorted(load_rules().rules, key=lambda rule: rule.code)


def on_config(config):
    pages = ["rules/index.md"] + [{f"{rule.code} {rule.slug}": f"rules/{rule.slug}.md"} for rule in _rules()]
    config["nav"] = [{"Rules": pages} if entry == {"Rules": "rules/index.md"} else entry for entry in config["nav"]]
    return config


def on_files(files, config):
    from advisor.rulekit.rule_page import rule_page, rules_index

    rules = _rules()
    files.append(File.generated(config, "rules/index.md", content=rules_index(rules)))
    for rule in rules:
        files.append(File.generated(config, f"rules/{rule.slug}.md", content=rule_page(rule)))
    return files
