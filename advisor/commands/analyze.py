"""Offline audit of recorded Kineto traces: parse, run the rules, report; nothing is executed."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from advisor.commands.options import RuleOptions
from advisor.errors import StageError
from advisor.evidence import Environment, Evidence, TargetInfo
from advisor.report.assembly import assemble_report
from advisor.report.gathered import Gathered
from advisor.report.schema import Report, VerificationSettings
from advisor.rulekit.engine import RuleConfig
from advisor.trace.parse import Trace, TraceFormatError
from advisor.trace.ranks import RankTrace, parse_ranks

TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass(kw_only=True)
class AnalyzeOptions(RuleOptions):
    paths: tuple[str, ...]


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


def trace_files(paths: tuple[str, ...]) -> list[str]:
    """Files as given; folders expand to their traces (one per rank), in name order."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(TRACE_SUFFIXES))
            if not found:
                raise TraceFormatError(f"{path}: a folder with no .json or .json.gz trace in it")
            files.extend(found)
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise TraceFormatError(f"{path}: no such file or folder")
    return files


def run_analyze(options: AnalyzeOptions) -> AnalyzeResult:
    """Raises SettingError for bad --set/--disable; a broken trace becomes a report error."""
    rules = RuleConfig.load(options.rule_dirs, options.settings, options.disabled)
    files: list[str] = []
    try:
        files = trace_files(options.paths)
        primary, ranks = parse_ranks(files)  # the first whole: every rule reads it; the other ranks as summaries
    except TraceFormatError as broken:
        target = TargetInfo(model_file=str(broken).split(":")[0], mode="recorded")
        failed = Gathered(evidence=Evidence(target=target), judge=False,
                          errors=[StageError(stage="parse", kind="user-code", message=str(broken))])
        report = assemble_report(failed, rules, VerificationSettings(enabled=False))
        return AnalyzeResult(report=report, evidence=None, files=files or list(options.paths))
    evidence = evidence_from_traces(primary, ranks)
    report = assemble_report(Gathered(evidence=evidence), rules, VerificationSettings(
        enabled=False, note="a recorded trace: fixes cannot be run, only advised"))
    return AnalyzeResult(report=report, evidence=evidence, files=files)


def evidence_from_traces(first: Trace, ranks: list[RankTrace] | tuple = ()) -> Evidence:
    rank = first.distributed_info.get("rank")
    target = TargetInfo(
        model_file=first.path, mode="recorded", device="cuda" if first.has_gpu else "cpu",
        model_class=f"recorded trace{f' (rank {rank} of {len(ranks)})' if len(ranks) > 1 else ''}",
    )
    env = Environment()
    if first.device_properties:
        device = first.device_properties[0]
        env.device_name = str(device.get("name", ""))
        if "computeMajor" in device:
            env.gpu_capability = (int(device["computeMajor"]), int(device.get("computeMinor", 0)))
        env.gpu_count = len(first.device_properties)
    return Evidence(target=target, env=env, trace=first, ranks=list(ranks))
