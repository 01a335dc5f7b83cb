"""A rule's page in the documentation site, written from the rule itself: its docstring's sections, its code,
layer, default severity, thresholds, and what its fix and its source patch do (and whether the patch is safe).
The docs build (``docs/hooks.py``) writes one per rule and an index; nothing here is written by hand twice."""

from __future__ import annotations

from typing import Any

from advisor.rulekit.docs import parse_doc

SECTION_ORDER = ("What it detects", "Why it matters", "How to fix")


def rule_page(rule: Any) -> str:
    doc = parse_doc(rule.doc)
    lines = [f"# {rule.code} {rule.slug}", "", f"**{doc.title}.**", "",
             f"Layer: {rule.layer.value} · default severity: {rule.severity.value}"
             + (f" · reads: {', '.join(rule.needs)}" if rule.needs else ""), ""]
    for name in SECTION_ORDER:
        if name in doc.sections:
            lines += [f"## {name}", "", _prose(doc.sections[name]), ""]
    if doc.before and doc.after:
        lines += ["## Example", "", "Before:", "", "```python", doc.before, "```", "", "After:", "", "```python",
                  doc.after, "```", ""]
    lines += _thresholds(rule) + _fix(rule)
    return "\n".join(lines).rstrip() + "\n"


def rules_index(rules: list[Any]) -> str:
    lines = ["# Rules", "", "Each rule reads the evidence of an audit, never the model; each has its own page.", "",
             "| code | rule | layer | finds | fix verified | source patch |", "| --- | --- | --- | --- | --- | --- |"]
    for rule in sorted(rules, key=lambda r: r.code):
        title = parse_doc(rule.doc).title.replace("|", "\\|")
        verified = "yes" if rule.fix_spec is not None and rule.fix_spec.apply is not None else "no"
        patched = ("no" if rule.patch_spec is None else "safe" if rule.patch_spec.safe else "--unsafe-fixes")
        lines.append(f"| {rule.code} | [{rule.slug}]({rule.slug}.md) | {rule.layer.value} | {title} | {verified} | "
                     f"{patched} |")
    return "\n".join(lines) + "\n"


def _thresholds(rule: Any) -> list[str]:
    if not rule.thresholds:
        return []
    lines = ["## Thresholds", "", f"Override one with `--set {rule.slug}.NAME=VALUE`.", "",
             "| name | default | meaning |", "| --- | --- | --- |"]
    for name, threshold in rule.thresholds.items():
        unit = f" {threshold.unit}" if threshold.unit else ""
        lines.append(f"| `{name}` | {threshold.default:g}{unit} | {threshold.help} |")
    if rule.high_at:
        lines += ["", f"HIGH from `{rule.high_at}` = {rule.thresholds[rule.high_at].default:g} of the step, MEDIUM "
                      "below it."]
    return lines + [""]


def _fix(rule: Any) -> list[str]:
    lines = ["## Fix and its safety", ""]
    spec = rule.fix_spec
    if spec is not None and spec.apply is not None:
        measured = "its peak memory measured (and what it costs the step's time)" if spec.measures == "memory" \
            else "measured"
        lines.append(f"- Verified: {spec.what or 'the rule fix'} is applied to a copy (or a run) and {measured}, its "
                     f"numerics within {spec.tolerance:g} of the baseline's"
                     + (f"; needs CUDA: {spec.needs_cuda}" if spec.needs_cuda else "") + ".")
    else:
        lines.append("- No automatic fix to measure: the finding says how to fix it by hand.")
    patch = rule.patch_spec
    if patch is None:
        lines.append("- `advisor fix` writes no source patch for it.")
    else:
        safety = ("safe: it does not change results" if patch.safe
                  else "unsafe: it changes results by design, and waits for `--unsafe-fixes`")
        lines.append(f"- `advisor fix` patches the source: {patch.what} ({safety}).")
    return lines + [""]


def _prose(text: str) -> str:
    """A docstring section as Markdown: reST's double backquotes as code, ``::`` blocks fenced."""
    out, block = [], False
    for line in text.replace("``", "`").splitlines():
        if line.rstrip().endswith("::") and not block:
            out += [line.rstrip()[:-1], "", "```"]
            block = True
            continue
        if block and line and not line.startswith(" "):
            out += ["```", ""]
            block = False
        out.append(line[4:] if block and line.startswith("    ") else line)
    if block:
        out.append("```")
    return "\n".join(out).strip()


DOCS_URL_VARIABLE = "ADVISOR_DOCS_URL"


def docs_site(configured: str = "") -> str:
    """Where advisor's documentation is published, so a report can link each rule to its page: the environment's
    ``ADVISOR_DOCS_URL``, else the configuration's ``docs-url``, else the installed package's ``Documentation``
    project URL; empty where none says (a report then links the PyTorch page a rule's fix cites)."""
    import os

    site = os.environ.get(DOCS_URL_VARIABLE, "").strip() or configured.strip()
    if not site:
        from importlib.metadata import PackageNotFoundError, metadata

        try:
            urls = metadata("advisor").get_all("Project-URL") or []
        except PackageNotFoundError:  # a checkout run without its install
            urls = []
        site = next((url.split(",", 1)[1].strip() for url in urls if url.split(",", 1)[0].strip().lower()
                     == "documentation"), "")
    return site.rstrip("/")


def rule_page_url(site: str, slug: str) -> str:
    """The rule's page in the site MkDocs builds from ``docs/`` (directory URLs, ``docs/hooks.py``'s paths)."""
    return f"{site}/rules/{slug}/" if site else ""
