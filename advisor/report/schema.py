"""The Report: everything an audit concluded, as one record (its fields are the JSON schema).

Rendering reads only this; it never computes. ``schema_version`` changes when a field's
meaning changes; added optional fields keep it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from advisor.errors import StageError
from advisor.evidence import (
    DataLoaderInfo,
    Environment,
    FlopCount,
    GraphBreak,
    MeasurementConditions,
    RankSummary,
    TargetInfo,
    Timing,
)
from advisor.evidence.memory_records import StepMemory
from advisor.files.account import FilesRecord
from advisor.gathered import ModelOutput, StageRecord
from advisor.machine.peaks import MachinePeaks
from advisor.records import Field, Record
from advisor.report.readiness import Readiness
from advisor.rulekit.rule import Finding, Layer, RuleRun, Verification
from advisor.trace.roofline import OperatorRate

SCHEMA_VERSION = "1.0"


class OpShare(Record):
    name: str
    self_ms_per_step: float
    share: float = Field(description="share of the profiled step's CPU op self time")
    calls_per_step: float


class TraceSummary(Record):
    file: str = Field(description="the exported Kineto trace, next to the report")
    steps_profiled: int
    step_ms_profiled: float = Field(description="mean profiled step, profiler overhead included")
    ops_per_step: float = Field(description="operators the framework was asked for, per step")
    all_ops_per_step: float = Field(description="every operator event, internal dispatch included")
    kernels_per_step: float = 0.0
    memcpy_per_step: float = 0.0
    syncs_per_step: float = Field(default=0.0, description="device synchronization API calls per step")
    source_attributed: bool = Field(description="whether ops carry the user's exact source line")
    note: str = Field(default="", description="what parsing had to repair, when anything")
    top_ops: list[OpShare] = Field(default_factory=list)
    categories: dict[str, float] = Field(default_factory=dict, description="share of top-level op time by kind")
    timeline: list[TimelineBar] = Field(default_factory=list, description="top-level ops of the first profiled step")
    timeline_ms: float = 0.0


class TimelineBar(Record):
    name: str
    category: str
    start: float = Field(description="offset from the step's start, as a share of the step")
    width: float = Field(description="duration as a share of the step")


class Roofline(Record):
    """The step's operator groups against this machine's roofs (``trace/roofline.py``), most time first."""

    peaks: MachinePeaks
    operators: list[OperatorRate] = Field(default_factory=list)
    shown_share: float = Field(default=0.0, description="of the profiled step, the operators listed hold")
    note: str = ""


class Performance(Record):
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    peak_share: float | None = None
    peak_note: str = ""
    flops_note: str = Field(default="", description="how the step's FLOPs were counted, when not directly")


class GraphSummary(Record):
    method: str
    graph_count: int
    node_count: int
    call_count: int
    breaks: list[GraphBreak] = Field(default_factory=list)
    note: str = ""
    top_targets: dict[str, int] = Field(default_factory=dict)


class RuleProblemRecord(Record):
    source: str
    message: str


class Suppressed(Record):
    """A finding a team decided to keep: out of the checklist and every gate, still in the report."""

    finding: Finding
    by: str = Field(description="'# noqa' at file:line, or per-file-ignores in the configuration file")
    file: str = ""
    line: int = 0


class UnusedNoqa(Record):
    """A ``# noqa:`` naming advisor's rules that suppressed no finding of this run."""

    file: str
    line: int
    names: list[str] = Field(default_factory=list)


class ConfigurationRecord(Record):
    """What configured the rules of this report."""

    file: str = Field(default="", description="the pyproject.toml whose [tool.advisor] was read; empty: none")
    turned_off: list[str] = Field(default_factory=list, description="the rules left out, by the file or the flags")
    docs_url: str = Field(default="", description="where advisor's documentation is published (ADVISOR_DOCS_URL, "
                                                  "docs-url, the package's Documentation URL): each rule's page")


class VerificationSettings(Record):
    enabled: bool = True
    budget_s: float = 120.0
    pairs: int | None = Field(default=None, description="pairs measured per fix when fixed (--pairs), else by budget")
    note: str = ""
    combined: Verification | None = Field(default=None, description="all verified fixes applied together")
    apart: list[str] = Field(default_factory=list, description="verified fixes measured apart, not in the together "
                                                               "(a memory fix, a source patch), by rule")


class MeasurementQuality(Record):
    """How far the run's measurements can be trusted: the machine's conditions while the step was timed and
    while each fix was measured (``advisor/machine/conditions.py``), judged once (``assembly/quality.py``)."""

    # inconsistent: the stages disagree though no contention was measured (a step misread, or a drifting step)
    state: Literal["quiet", "contended", "inconsistent", "unknown"] = "unknown"
    summary: str = ""
    reasons: list[str] = Field(default_factory=list, description="what made the timing window contended")
    timing: MeasurementConditions | None = None
    verifications: list[str] = Field(default_factory=list, description="fixes measured under contention, and why")


class Report(Record):
    schema_version: str = SCHEMA_VERSION
    advisor_version: str = ""
    created: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    target: TargetInfo
    environment: Environment | None = None
    timing: Timing | None = None
    graph: GraphSummary | None = None
    trace: TraceSummary | None = None
    data: DataLoaderInfo | None = None
    flops: FlopCount | None = None
    performance: Performance | None = None
    roofline: Roofline | None = Field(default=None, description="operators against the machine's measured roofs")
    roofs: MachinePeaks | None = Field(default=None, description="the machine's roofs and where they came from")
    memory: StepMemory | None = Field(default=None, description="what the step holds in memory, by kind")
    findings: list[Finding] = Field(default_factory=list)
    suppressed: list[Suppressed] = Field(default_factory=list, description="findings a '# noqa' or per-file-ignores "
                                                                            "kept out of the checklist")
    configuration: ConfigurationRecord = Field(default_factory=ConfigurationRecord)
    unused_noqa: list[UnusedNoqa] = Field(default_factory=list, description="'# noqa' comments naming advisor's rules "
                                                                             "that suppressed nothing")
    errors: list[StageError] = Field(default_factory=list)
    stages: list[StageRecord] = Field(default_factory=list)
    rule_problems: list[RuleProblemRecord] = Field(default_factory=list)
    output: ModelOutput = Field(default_factory=ModelOutput)
    verification: VerificationSettings = Field(default_factory=VerificationSettings)
    readiness: Readiness | None = Field(default=None, description="advisor ready's checks and latency table")
    ranks: list[RankSummary] = Field(default_factory=list, description="per rank of a torchrun job")
    files: FilesRecord | None = Field(default=None, description="what advisor's runs wrote, and where")
    rules: list[RuleRun] = Field(default_factory=list, description="what each rule did: fired, silent (how near it "
                                                                   "came), not run (and why)")
    quality: MeasurementQuality = Field(default_factory=MeasurementQuality)

    def findings_by_layer(self) -> list[tuple[Layer, list[Finding]]]:
        return [(layer, [f for f in self.findings if f.layer == layer]) for layer in Layer]

    def exit_code(self, fail_on: str, failed: bool = False) -> int:
        """2 when the run itself failed, 1 when a finding is at or above ``fail_on`` (for a readiness
        report: a check fails, or warns with ``fail_on="warn"``), else 0."""
        if failed:
            return 2
        if self.readiness is not None:
            failing = {"fail", "warn"} if fail_on == "warn" else {"fail"}
            return 1 if any(check.status in failing for check in self.readiness.checks) else 0
        from advisor.rulekit.rule import Severity

        return 1 if self.worst_severity_rank() >= Severity(fail_on).rank else 0

    def worst_severity_rank(self) -> int:
        return max((f.severity.rank for f in self.findings if f.severity is not None), default=-1)
