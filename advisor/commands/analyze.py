"""Offline audit of recorded Kineto traces: parse, run the rules, report; nothing is executed."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from advisor.assembly.build import assemble_report
from advisor.capture.recorded import gathered_traces
from advisor.commands.options import RuleOptions
from advisor.evidence import Evidence
from advisor.report.schema import Report, VerificationSettings
from advisor.rulekit.engine import RuleConfig


@dataclass(kw_only=True)
class AnalyzeOptions(RuleOptions):
    paths: tuple[str, ...]
    cluster: str | None = None  # a Dask scheduler's address: the ranks' summaries are made on its workers


@dataclass
class AnalyzeResult:
    report: Report
    evidence: Evidence | None
    files: list[str] = field(default_factory=list)

    @property
    def stem(self) -> str:
        name = os.path.basename(self.files[0]) if self.files else "trace"
        for suffix in (".json.gz", ".json"):
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return name


def run_analyze(options: AnalyzeOptions) -> AnalyzeResult:
    """Raises SettingError for bad --set/--disable; a broken trace becomes a report error."""
    rules = RuleConfig.of(options)
    gathered, files = gathered_traces(options.paths, options.cluster)
    note = "a recorded trace: fixes cannot be run, only advised" if gathered.judge else ""
    report = assemble_report(gathered, rules, VerificationSettings(enabled=False, note=note))
    return AnalyzeResult(report=report, evidence=gathered.evidence if gathered.judge else None, files=files)
