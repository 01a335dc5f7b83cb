"""Rule discovery and execution.

Built-in rules are the modules of ``advisor.rules`` (one rule per file); ``--rules DIR`` adds
every ``*.py`` file in a folder. A file that fails to import or declares a malformed rule is
reported by name and skipped; so is a rule that raises while checking. The audit goes on.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
import traceback
from dataclasses import dataclass, field
from typing import Iterable

from advisor.evidence import Evidence, Margin
from advisor.rulekit import severity
from advisor.rulekit.identity import assign_ids
from advisor.rulekit.needs import missing
from advisor.rulekit.rule import Clean, Finding, Layer, Rule, RuleRun, Severity, Thresholds
from advisor.rulekit.selection import matching, turned_off
from advisor.rulekit.thresholds import SettingError, setting_value
from advisor.sources import is_library_path
from advisor.trace.gc_pause import gc_paused


@dataclass
class RuleProblem:
    source: str  # the file, or the rule's slug when it failed while running
    message: str
    detail: str = ""


@dataclass
class RuleSet:
    rules: list[Rule] = field(default_factory=list)
    problems: list[RuleProblem] = field(default_factory=list)

    def get(self, slug: str) -> Rule | None:
        return next((r for r in self.rules if r.slug == slug), None)

    def slugs_of(self, layer: Layer) -> set[str]:
        return {r.slug for r in self.rules if r.layer == layer}

    def add_from_module(self, module: object, source: str) -> None:
        found = [value for value in vars(module).values() if isinstance(value, Rule)]
        if not found:
            self.problems.append(RuleProblem(source, "defines no rule (no function decorated with @rule)"))
        for candidate in found:
            clash = next((r for r in self.rules if r.slug == candidate.slug or r.code == candidate.code), None)
            if clash is not None:
                self.problems.append(RuleProblem(
                    source, f"rule {candidate.slug} ({candidate.code}) clashes with {clash.slug} ({clash.code}) "
                            f"from {clash.source}; skipped"))
                continue
            self.rules.append(candidate)


BUILTIN_PACK = "advisor.rules"  # the rule pack shipped with advisor, loaded by name like any plug-in


def load_rules(extra_dirs: Iterable[str] = ()) -> RuleSet:
    """The built-in pack's rules, then each ``--rules`` folder's; a broken file is a problem, not a crash."""
    ruleset = RuleSet()
    pack = importlib.util.find_spec(BUILTIN_PACK)
    for name in _rule_modules(pack.submodule_search_locations or []):
        try:
            module = importlib.import_module(name)
        except Exception as broken:  # noqa: BLE001
            ruleset.problems.append(_import_problem(name, broken))
            continue
        ruleset.add_from_module(module, getattr(module, "__file__", name))
    for directory in extra_dirs:
        _load_directory(ruleset, directory)
    ruleset.rules.sort(key=lambda r: r.code)
    return ruleset


def _rule_modules(pack_folders: Iterable[str]) -> list[str]:
    """The pack's rule modules by name: each module of a layer's folder, or the package of a rule that keeps code
    beside it (its ``__init__``); the modules inside a rule's package are its own, not rules."""
    names = []
    for layer in sorted(pkgutil.iter_modules(list(pack_folders)), key=lambda i: i.name):
        if not layer.ispkg or layer.name.startswith("_"):
            continue
        folder = os.path.join(layer.module_finder.path, layer.name)
        names += [f"{BUILTIN_PACK}.{layer.name}.{info.name}" for info in pkgutil.iter_modules([folder])
                  if not info.name.startswith("_")]
    return sorted(names)


def _load_directory(ruleset: RuleSet, directory: str) -> None:
    if not os.path.isdir(directory):
        ruleset.problems.append(RuleProblem(directory, "is not a folder of rule files"))
        return
    for filename in sorted(os.listdir(directory)):
        if not filename.endswith(".py") or filename.startswith("_"):
            continue
        path = os.path.join(directory, filename)
        name = f"advisor_user_rules.{os.path.splitext(filename)[0]}"
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        except Exception as broken:  # noqa: BLE001 - includes RuleDefinitionError
            sys.modules.pop(name, None)
            ruleset.problems.append(_import_problem(path, broken))
            continue
        ruleset.add_from_module(module, path)


def _import_problem(source: str, broken: BaseException) -> RuleProblem:
    where = ""
    if isinstance(broken, SyntaxError):
        where = f" (line {broken.lineno})"
    return RuleProblem(
        source, f"could not be loaded{where}: {type(broken).__name__}: {broken}; skipped",
        "".join(traceback.format_exception(broken)),
    )


def parse_settings(ruleset: RuleSet, settings: Iterable[str]) -> dict[str, dict[str, float]]:
    """``["non-contiguous.min_share=0.2"]`` -> ``{"non-contiguous": {"min_share": 0.2}}``, checked."""
    overrides: dict[str, dict[str, float]] = {}
    for setting in settings:
        key, sep, raw = setting.partition("=")
        slug, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise SettingError(f"--set {setting!r}: expected SLUG.THRESHOLD=VALUE")
        rule = ruleset.get(slug)
        declared = severity.SCALE_THRESHOLDS if slug == severity.SCALE else rule.thresholds if rule else None
        if declared is None:
            raise SettingError(f"--set {setting!r}: no rule named {slug!r} (see 'advisor rules'), nor the "
                               f"severity scale ({severity.SCALE}.high_share, ...)")
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise SettingError(f"--set {setting!r}: {slug} has no threshold {name!r} (it has: {known})")
        overrides.setdefault(slug, {})[name] = setting_value(setting, raw, name)
    return overrides


DISABLE_VARIABLE = "ADVISOR_DISABLE"  # rules to leave out of every run, comma-separated: a CI job's --disable


def check_disabled(ruleset: RuleSet, disabled: Iterable[str]) -> set[str]:
    """The slugs ``--disable`` or ``ADVISOR_DISABLE`` name, by slug or code."""
    return matching(ruleset.rules, disabled, f"--disable or {DISABLE_VARIABLE}")


def thresholds_for(rule: Rule, overrides: dict[str, dict[str, float]]) -> Thresholds:
    return Thresholds.resolve(rule.thresholds, overrides.get(rule.slug))


@dataclass
class RuleConfig:
    """A rule set with the user's threshold overrides and disabled rules applied: what every entry
    point runs. Built once, before anything runs, so a bad ``--set`` fails fast."""

    ruleset: RuleSet
    overrides: dict[str, dict[str, float]] = field(default_factory=dict)
    disabled: set[str] = field(default_factory=set)
    config_file: str = ""  # the [tool.advisor] read, if one was
    configured_off: set[str] = field(default_factory=set)  # by select and ignore (the file's, or the flags')
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = ()  # (a glob of paths, the slugs off in them)
    docs_url: str = ""  # the configured site of the rules' pages; empty: the environment's or the package's

    @classmethod
    def load(cls, rule_dirs: Iterable[str] = (), settings: Iterable[str] = (), disabled: Iterable[str] = (),
             select: Iterable[str] = (), ignore: Iterable[str] = (),
             per_file_ignores: Iterable[tuple[str, tuple[str, ...]]] = (), config_file: str = "",
             docs_url: str = "") -> "RuleConfig":
        """Raises SettingError for a --set, --disable, --select, --ignore or ``ADVISOR_DISABLE`` that names nothing."""
        ruleset = load_rules(rule_dirs)
        from_environment = [slug.strip() for slug in os.environ.get(DISABLE_VARIABLE, "").split(",") if slug.strip()]
        configured = turned_off(ruleset.rules, select, ignore, config_file or "the command line")
        off = check_disabled(ruleset, [*disabled, *from_environment]) | configured
        paths = tuple((pattern, frozenset(matching(ruleset.rules, names, f"{config_file} per-file-ignores")))
                      for pattern, names in per_file_ignores)
        return cls(ruleset, parse_settings(ruleset, settings), off, config_file, configured, paths, docs_url)

    @classmethod
    def from_file(cls, subject: str) -> "RuleConfig":
        """The rules the nearest [tool.advisor] above ``subject`` configures, with no command line beside it (a
        training callback's audit); every rule where there is none."""
        from advisor.rulekit.config_file import find_config, rule_settings, table

        path = find_config(subject) if subject and os.path.exists(subject) else ""
        found = rule_settings(table(path) if path else {})
        return cls.load(settings=found["settings"], select=found["select"],
                        ignore=found["ignore"] + found["extend_ignore"], per_file_ignores=found["per_file_ignores"],
                        config_file=path, docs_url=found["docs_url"])

    @classmethod
    def of(cls, options) -> "RuleConfig":
        """The rules a command's options (``commands/options.RuleOptions``) configure."""
        return cls.load(options.rule_dirs, options.settings, options.disabled, options.select, options.ignore,
                        options.per_file_ignores, options.config_file, options.docs_url)

    def run(self, evidence: Evidence, runs: list[RuleRun] | None = None) -> tuple[list[Finding], list[RuleProblem]]:
        by_configuration = f"{self.config_file} [tool.advisor]" if self.config_file else "--select or --ignore"
        why = {slug: by_configuration if slug in self.configured_off else "--disable" for slug in self.disabled}
        return run_rules(self.ruleset, evidence, self.overrides, why, runs)


def run_rules(
    ruleset: RuleSet,
    evidence: Evidence,
    overrides: dict[str, dict[str, float]] | None = None,
    disabled: dict[str, str] | None = None,
    runs: list[RuleRun] | None = None,
) -> tuple[list[Finding], list[RuleProblem]]:
    """Every rule over the evidence. ``runs``, when given, receives what each rule did (fired, silent with
    the margin it reported, not run and why)."""
    findings: list[Finding] = []
    problems: list[RuleProblem] = []
    runs = runs if runs is not None else []
    scale = Thresholds.resolve(severity.SCALE_THRESHOLDS, (overrides or {}).get(severity.SCALE))
    with gc_paused():  # rules allocate many small acyclic objects next to a large live trace
        for rule in ruleset.rules:
            if disabled and rule.slug in disabled:
                runs.append(RuleRun(slug=rule.slug, status="disabled", why=disabled[rule.slug]))
                continue
            if (lacking := missing(rule.needs, evidence)) is not None:
                runs.append(RuleRun(slug=rule.slug, status="not run", why=lacking))
                continue
            thresholds = thresholds_for(rule, overrides or {})
            try:
                produced = list(rule.check(evidence, thresholds))
            except Exception as broken:  # noqa: BLE001 - one bad rule must not end the audit
                problems.append(RuleProblem(
                    rule.slug, f"raised {type(broken).__name__}: {broken}; its findings are missing",
                    "".join(traceback.format_exception(broken))))
                runs.append(RuleRun(slug=rule.slug, status="not run", why=f"it raised {type(broken).__name__}"))
                continue
            margins = [item for item in produced if isinstance(item, Margin)]
            mine = [item for item in produced if isinstance(item, Finding)]
            cleans = [item.why for item in produced if isinstance(item, Clean)]
            findings += [_stamped(rule, finding, thresholds, scale, margins[-1] if margins else None) for finding in mine]
            runs.append(RuleRun(slug=rule.slug, status="fired" if mine else "silent",
                                why="" if mine or not cleans else cleans[-1],
                                margin=margins[-1] if margins else next((f.margin for f in mine if f.margin), None)))
    findings.sort(key=_order)
    assign_ids(findings)
    return findings, problems


def _stamped(rule: Rule, finding: Finding, thresholds: Thresholds, scale: Thresholds, margin: Margin | None) -> Finding:
    """A rule's finding as the report holds it: who saw it, its severity decided, its fix's example."""
    fix = finding.fix
    if fix is not None and not (fix.before or fix.after):
        fix = fix.model_copy(update={"before": rule.docs.before, "after": rule.docs.after})
    decided = severity.decide(rule.severity, finding.severity, finding.impact,
                              thresholds[rule.high_at] if rule.high_at else None, scale)
    locations, message = finding.locations, finding.message
    in_libraries = [loc for loc in locations if loc.file and is_library_path(loc.file)]
    if in_libraries and len(in_libraries) < len(locations):
        locations = [loc for loc in locations if loc not in in_libraries]  # the user's places are the places
    elif in_libraries:  # blame landed in a library: no line of the user's is shown to change
        decided = severity.at_most(decided, severity.UNPLACED_MOST)
        message += (f"; no line of your code is involved (it happens in {_files(in_libraries)}, "
                    "a library's code)")
    return finding.model_copy(update={
        "slug": rule.slug, "code": rule.code, "title": rule.title, "layer": rule.layer, "fix": fix,
        "severity": decided, "margin": finding.margin or margin, "locations": locations, "message": message,
    })


def _files(locations: list) -> str:
    return ", ".join(sorted({os.path.basename(loc.file) for loc in locations}))


def _order(finding: Finding) -> tuple:
    """By measured impact (share of the step), then severity: what costs most comes first."""
    severity = finding.severity or Severity.INFO
    return (-(finding.impact or 0.0), -severity.rank, finding.code)
