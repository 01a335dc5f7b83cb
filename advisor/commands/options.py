"""The options every command shares, as one shape: where reports go (all), which rules judge (those that
run rules), and how the model is measured (those that run it). Each command's options add their own."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class ReportOptions:
    out_dir: str = "reports"
    formats: tuple[str, ...] = ("html", "json")
    fail_on: str = "high"


@dataclass(kw_only=True)
class RuleOptions(ReportOptions):
    rule_dirs: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()  # --set OWNER.NAME=VALUE
    disabled: tuple[str, ...] = ()
    select: tuple[str, ...] = ()  # codes, code prefixes or slugs; empty: every rule
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (a glob of paths, the rules off in them)
    config_file: str = ""  # the pyproject.toml whose [tool.advisor] these came from
    docs_url: str = ""  # where advisor's documentation is published (the file's docs-url), for the rules' pages


@dataclass(kw_only=True)
class MeasureOptions(RuleOptions):
    timeout: float = 300.0  # seconds each stage (or the script) may run
    verify: bool = True
    budget: float = 120.0  # seconds for fix verification
    pairs: int | None = None  # each fix measured with exactly this many pairs, whatever the time (no budget)
    shadow_limit_mb: float | None = None  # the audited run's journal and each experiment's shadow
    wait_for_quiet_s: float | None = None  # after contended timed steps; None: ADVISOR_WAIT_FOR_QUIET, else 15 s
    experiment: bool = False  # a run of advisor's own (advisor fix's re-audit of a patched copy): writes shadowed
